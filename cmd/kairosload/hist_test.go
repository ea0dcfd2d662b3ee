package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLatencyHistQuantiles(t *testing.T) {
	var a, b latencyHist
	require.Zero(t, a.quantile(0.5))
	// 1..1000 ms, split over two histograms as workers keep them.
	for i := 1; i <= 1000; i++ {
		h := &a
		if i%2 == 0 {
			h = &b
		}
		h.observe(time.Duration(i) * time.Millisecond)
	}
	a.merge(&b)
	require.EqualValues(t, 1000, a.total)
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {0.001, time.Millisecond}} {
		got := a.quantile(c.q)
		// The bucket's upper bound: never below the truth, at most one
		// bucket (4.4 %) above it.
		require.GreaterOrEqual(t, got, c.want, "q=%v", c.q)
		require.LessOrEqual(t, float64(got), float64(c.want)*1.045, "q=%v", c.q)
	}
	require.Equal(t, time.Second, a.quantile(1))
}

func TestLatencyHistExtremes(t *testing.T) {
	var h latencyHist
	h.observe(0)
	h.observe(100 * time.Hour) // beyond the last bucket
	require.Equal(t, 0, bucketOf(0))
	require.Equal(t, numBuckets-1, bucketOf(100*time.Hour))
	require.Equal(t, 100*time.Hour, h.quantile(1))
	require.LessOrEqual(t, h.quantile(0.5), 2*time.Microsecond)
}
