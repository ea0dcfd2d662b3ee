package kairosstore

import (
	"math"
	"math/rand/v2"
	"slices"
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

// TestClipAsFilter: clip, which finds the spans it keeps by binary search,
// keeps what a filter of every span keeps, at the ends of int64 and for
// bounds that meet no span, fall between two, or are reversed.
func TestClipAsFilter(t *testing.T) {
	naive := func(spans []span, lo, hi int64) []span {
		var out []span
		for _, sp := range spans {
			if l, h := max(sp.lo, lo), min(sp.hi, hi); l <= h {
				out = append(out, span{l, h})
			}
		}
		return out
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ends := []int64{math.MinInt64, math.MinInt64 + 1, -9223309901257974, 0, 9223309901257974, math.MaxInt64 - 1, math.MaxInt64}
	for range 20000 {
		var spans []span
		t0 := int64(rng.IntN(20)) - 10
		for range rng.IntN(6) {
			lo := t0 + int64(rng.IntN(4))
			hi := lo + int64(rng.IntN(4))
			spans = append(spans, span{lo, hi})
			t0 = hi + 2
		}
		if rng.IntN(4) == 0 {
			spans = append([]span{{math.MinInt64, math.MinInt64 + 5}}, spans...)
			spans = append(spans, span{math.MaxInt64 - 5, math.MaxInt64})
		}
		pick := func() int64 {
			if rng.IntN(5) == 0 {
				return ends[rng.IntN(len(ends))]
			}
			return int64(rng.IntN(40)) - 20
		}
		lo, hi := pick(), pick()
		orig := slices.Clone(spans)
		got, want := clip(spans, lo, hi), naive(spans, lo, hi)
		if !slices.Equal(got, want) {
			t.Fatalf("clip(%v, %d, %d) = %v, want %v", spans, lo, hi, got, want)
		}
		// clip may share spans' array (a plan's spans, read by every
		// series at once): it never writes it, nor lets an append.
		if !slices.Equal(spans, orig) || len(got) > 0 && cap(got) != len(got) {
			t.Fatalf("clip(%v, %d, %d) changed its spans or left room after them", orig, lo, hi)
		}
		if got := trim(slices.Clone(spans), lo, hi); !slices.Equal(got, want) {
			t.Fatalf("trim(%v, %d, %d) = %v, want %v", spans, lo, hi, got, want)
		}
	}
}
