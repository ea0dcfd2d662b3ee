package timeparam

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSteps(t *testing.T) {
	minMs, maxMs := Min.UnixMilli(), Max.UnixMilli()
	for _, c := range []struct {
		start, end, step int64
		want             uint64
	}{
		{0, 0, 1, 1},
		{0, 10, 5, 3},
		{0, 9, 5, 2},
		{-10, 10, 1, 21},
		{10, 0, 1, 0},
		{0, 10, 0, 0},
		// Prometheus's bounds at a step of 10 days: 2·10^10 steps, which
		// time.Time.Sub saturated to 292 years, 10,670 steps.
		{minMs, maxMs, 864_000_000, 21_350_254_402},
		{math.MinInt64, math.MaxInt64, 1, math.MaxUint64},
		{math.MinInt64, math.MaxInt64, 2, math.MaxUint64/2 + 1},
		{math.MaxInt64 - 1, math.MaxInt64, math.MaxInt64, 1},
	} {
		require.Equal(t, c.want, Steps(c.start, c.end, c.step), "%d..%d step %d", c.start, c.end, c.step)
	}
	require.Greater(t, Steps(minMs, maxMs, 864_000_000), uint64(2e10))
}

func TestRoundMilli(t *testing.T) {
	for _, c := range []struct {
		t           time.Time
		floor, ceil int64
	}{
		{time.Unix(1, 0), 1000, 1000},
		{time.Unix(1, 400), 1000, 1001},
		{time.Unix(-1, 400), -1000, -999},
		{time.Unix(-1, 999_999_999), -1, 0},
		{Min, Min.UnixMilli(), Min.UnixMilli()},
		{Max, Max.UnixMilli(), Max.UnixMilli() + 1},
	} {
		require.Equal(t, c.floor, FloorMilli(c.t), c.t)
		require.Equal(t, c.ceil, CeilMilli(c.t), c.t)
	}
}
