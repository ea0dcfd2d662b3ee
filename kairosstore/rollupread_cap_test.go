package kairosstore

import (
	"math"
	"testing"
)

// TestRollupCap: the points readRollup sizes its answer for are the
// bucket ends in its spans, held at maxRollupCap at the extremes of time
// and for spans whose widths add past it, so no span can make a read
// allocate ahead of what it reads.
func TestRollupCap(t *testing.T) {
	const h = 3_600_000
	minT, maxT := int64(-9223309901257974), int64(9223309901257974) // Prometheus's minimum and maximum times
	for _, c := range []struct {
		spans []span
		r     int64
		want  int
	}{
		{nil, h, 0},
		{[]span{{0, 0}}, h, 1},
		{[]span{{0, 3*h - 1}, {6 * h, 9 * h}}, h, 3 + 4},
		{[]span{{0, 365 * 24 * h}}, h, 8761},
		{[]span{{0, 400 * 24 * h}}, h, maxRollupCap},
		{[]span{{minT, maxT}}, h, maxRollupCap},
		{[]span{{math.MinInt64, math.MaxInt64}}, 1, maxRollupCap},
		{[]span{{0, 8000 * h}, {9000 * h, 10000 * h}}, h, maxRollupCap},
		{[]span{{0, 10}}, 0, 0},
	} {
		if got := rollupCap(c.spans, c.r); got != c.want {
			t.Errorf("rollupCap(%v, %d) = %d, want %d", c.spans, c.r, got, c.want)
		}
	}
}
