package kairosstore

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
)

// naiveWindows is windows walked step by step, for ranges small enough.
func naiveWindows(hintStart, step, w, start, end int64) []span {
	var out []span
	for t0 := hintStart; t0 <= end; t0 += step {
		lo, hi := max(t0, start), min(t0+w-1, end)
		if lo > hi {
			continue
		}
		if n := len(out); n > 0 && lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, hi)
			continue
		}
		out = append(out, span{lo, hi})
	}
	return out
}

func TestWindowsMatchNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		hintStart := rng.Int64N(2000) - 1000
		step := rng.Int64N(300) + 1
		w := rng.Int64N(step) + 1
		if w == step {
			continue // the caller plans windows only for w < step
		}
		start := rng.Int64N(3000) - 1000
		end := start + rng.Int64N(3000)
		got, want := windows(hintStart, step, w, start, end), naiveWindows(hintStart, step, w, start, end)
		if len(want) > maxWindows {
			want = []span{{start, end}}
		}
		require.Equal(t, want, got, "hintStart %d step %d w %d [%d, %d]", hintStart, step, w, start, end)
	}
}

// TestWindowsBounded: the windows of any hints are counted before they are
// made; beyond maxWindows the read is one span, however far apart the
// ends. Between Prometheus's minimum and maximum times at a step of 10
// days, windows walked 2·10^10 steps and the process died.
func TestWindowsBounded(t *testing.T) {
	minMs, maxMs := timeparam.Min.UnixMilli(), timeparam.Max.UnixMilli()
	day := int64(24 * time.Hour / time.Millisecond)
	for _, c := range []struct {
		name                           string
		hintStart, step, w, start, end int64
		want                           int // windows; -1: one span of [start, end]
	}{
		{"Prometheus's bounds at 10 days", minMs - 5*60_000 + 1, 10 * day, 5 * 60_000, minMs - 5*60_000 + 1, maxMs, -1},
		{"int64's ends at 1 ms", math.MinInt64, 2, 1, math.MinInt64, math.MaxInt64, -1},
		{"int64's ends at 300 years", math.MinInt64, 300 * 365 * day, 60_000, math.MinInt64, math.MaxInt64, -1},
		{"a step near the whole range", minMs, maxMs, 60_000, minMs, maxMs, 2},
		{"windows whose ends would wrap", math.MaxInt64 - 10, 100, 50, math.MaxInt64 - 10, math.MaxInt64, 1},
		{"a window of 1y at a step of 300 years", minMs, 300 * 365 * day, 365 * day, minMs, maxMs, -1},
		{"11,001 windows", 0, 10, 1, 0, 110_000, 11_001},
		{"11,002 windows", 0, 10, 1, 0, 110_010, -1},
	} {
		began := time.Now()
		got := windows(c.hintStart, c.step, c.w, c.start, c.end)
		require.Less(t, time.Since(began), time.Second, c.name)
		switch {
		case c.want < 0:
			require.Equal(t, []span{{c.start, c.end}}, got, c.name)
		case c.want > 0:
			require.Len(t, got, c.want, c.name)
		}
		require.LessOrEqual(t, len(got), maxWindows, c.name)
		for i, sp := range got {
			require.LessOrEqual(t, c.start, sp.lo, c.name)
			require.LessOrEqual(t, sp.lo, sp.hi, c.name)
			require.LessOrEqual(t, sp.hi, c.end, c.name)
			if i > 0 {
				require.Less(t, got[i-1].hi+1, sp.lo, c.name)
			}
		}
	}
}

// TestCoalesce: spans merge where the gap between them is at most maxGap,
// at int64's ends too (where a signed difference wraps), and the filter of
// a merged slice keeps exactly the times of its spans.
func TestCoalesce(t *testing.T) {
	ends := []span{{math.MinInt64, math.MinInt64 + 1}, {0, 10}, {math.MaxInt64 - 1, math.MaxInt64}}
	require.Equal(t, ends, coalesce(ends, 0))
	// Gaps of 2^63-2 and 2^63-12 ms.
	require.Equal(t, ends, coalesce(ends, math.MaxInt64-13))
	require.Equal(t, []span{{math.MinInt64, math.MinInt64 + 1}, {0, math.MaxInt64}}, coalesce(ends, math.MaxInt64-12))
	require.Equal(t, []span{{math.MinInt64, math.MaxInt64}}, coalesce(ends, math.MaxInt64-1))
	spans := []span{{0, 9}, {20, 29}, {31, 40}, {100, 109}}
	require.Equal(t, []span{{0, 9}, {20, 40}, {100, 109}}, coalesce(spans, 1))
	require.Equal(t, []span{{0, 40}, {100, 109}}, coalesce(spans, 10))
	f := spanFilter{spans: spans}
	for ts := int64(-5); ts < 120; ts++ {
		want := false
		for _, sp := range spans {
			want = want || sp.lo <= ts && ts <= sp.hi
		}
		require.Equal(t, want, f.in(ts), "%d", ts)
	}
}
