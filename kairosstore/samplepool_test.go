package kairosstore

import (
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"
)

// TestPooledSlicesFollowTheSamples: a read gets the slices of a series
// iterated before only when they hold what it expects and are not far
// larger, so that reads ahead of short series do not each hold the
// slices of a long one; slices past maxPooledSamples are not kept.
// (sync.Pool may drop what it is given, under the race detector on
// purpose: a reuse is looked for a few times.)
func TestPooledSlicesFollowTheSamples(t *testing.T) {
	var s Store
	none := labels.EmptyLabels()
	pooled := func(n int) *listSeries {
		return &listSeries{ts: make([]int64, 0, n), vs: make([]float64, 0, n), pooled: true}
	}
	reused := func(c, n int) bool {
		for range 20 {
			s.recycle(pooled(c))
			if got := s.newListSeries(none, n); cap(got.ts) == c && got.pooled {
				return true
			}
		}
		return false
	}
	long := pooled(100_000)
	s.recycle(long)
	require.Nil(t, long.ts, "a recycled series keeps nothing")
	for _, n := range []int{0, 10, 20_000} {
		for range 20 {
			s.recycle(pooled(100_000))
			require.NotEqual(t, 100_000, cap(s.newListSeries(none, n).ts), "a read expecting %d samples got room for 100,000", n)
		}
	}
	require.True(t, reused(100_000, 90_000), "a series of about the same length reuses them")
	require.True(t, reused(1000, 0), "small slices serve a series of unknown length")
	require.False(t, reused(maxPooledSamples+1, maxPooledSamples), "slices past maxPooledSamples are not kept")
	s.recycle(&listSeries{ts: make([]int64, 0, 100), vs: make([]float64, 0, 100)})
	require.NotEqual(t, 100, cap(s.newListSeries(none, 50).ts), "slices that were not the pool's are not taken")
}
