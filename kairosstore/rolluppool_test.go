package kairosstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/rolluptest"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/readhint"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// TestRollupReadsReuseSlices: a rollup read's answer, and a counter's
// rollups it is made from, come from the store's pool of sample slices and
// go back to it, the answer when the consumer moves its iterator on (as
// PromQL does, series after series). So a reader that reuses its iterator
// must see what one that never does sees, bit for bit, while more series
// than the reads ahead (ReadConcurrency) are read at once and take the
// slices the last ones gave back: a slice handed back while still read
// from (a counter's rollups before runningSum has read them, or an answer
// the consumer still iterates) would be written by the next read. Every
// aggregate, with windows and without, over hostile series (NaN, ±Inf,
// ±1e300, gaps, resets, samples at Prometheus's ends) and counters of
// finite samples with gaps and resets, and ranges (steps of
// 1 ms to 300 years, Prometheus's minimum and maximum times).
func TestRollupReadsReuseSlices(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		st, err := ks.Open(ctx, eng, ks.Options{RowWidth: 6 * time.Hour, ReadConcurrency: 4}, nil, nil)
		require.NoError(t, err)
		const hour, day = int64(3_600_000), int64(86_400_000)
		t0 := 1_700_000_000_000 / day * day
		rnd := rand.New(rand.NewPCG(30, 3))
		var series []rolluptest.Series
		for i := range 6 {
			series = append(series, rolluptest.Hostile(rnd, "c", i, 300, t0), rolluptest.Hostile(rnd, "g", i, 300, t0))
			// A counter of finite samples, of a metric without null rows:
			// its rollups are read into pooled slices only (non-finite
			// buckets are joined into slices of their own).
			k := rolluptest.Hostile(rnd, "c", i, 300, t0)
			k.Labels = labels.FromStrings("__name__", "k", "i", fmt.Sprint(i))
			for j, v := range k.V {
				if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) == 1e300 {
					k.V[j] = k.V[max(j-1, 0)]
				}
			}
			series = append(series, k)
		}
		appendSeries(t, st, series)
		res := []rollup.Resolution{rollup.Resolution(time.Hour), rollup.Resolution(6 * time.Hour)}
		require.NoError(t, rolluptest.Write(ctx, st, eng, res, t0+6*hour, t0+9*day, series))

		const years300 = int64(300 * 365.25 * 24 * 3600 * 1000)
		type rangeCase struct{ start, end, step, rng int64 }
		cases := []rangeCase{
			{t0, t0 + 10*day, 6 * hour, hour},
			{t0 + 5*hour, t0 + 3*day, 1, hour},
			{t0, t0 + 10*day, hour, 6 * hour},
			{rolluptest.PromMin, rolluptest.PromMax, years300, hour},
			{t0 + 5*hour, rolluptest.PromMax, 6 * hour, day},
		}
		read := func(c rangeCase, p readhint.Hint, reuse bool) (out []string) {
			q, err := st.Querier(c.start, c.end)
			require.NoError(t, err)
			defer q.Close()
			hints := &storage.SelectHints{Start: c.start, End: c.end, Step: c.step, Range: c.rng}
			ss := q.Select(readhint.With(ctx, p), true, hints, labels.MustNewMatcher(labels.MatchRegexp, "__name__", "c|g|k"))
			return pointStrings(t, ss, reuse)
		}
		points := 0
		for _, r := range res {
			for _, a := range []rollup.Aggregate{rollup.Counter, rollup.Sum, rollup.Max, rollup.Count, rollup.Avg} {
				for i, c := range cases {
					for _, w := range []int64{0, c.rng} {
						p := readhint.Hint{Aggregate: a, Resolution: r, WindowMillis: w}
						want := read(c, p, false)
						for round := range 2 {
							require.Equal(t, want, read(c, p, true), "%s %s case %d %+v window %d round %d", r, a, i, c, w, round)
						}
						points += len(want)
					}
				}
			}
		}
		require.Positive(t, points)
	})
}

// pointStrings is every point of ss, bit for bit, a line each; reuse passes
// each series' iterator on to the next, as PromQL does.
func pointStrings(t *testing.T, ss storage.SeriesSet, reuse bool) (out []string) {
	t.Helper()
	var it chunkenc.Iterator
	for ss.Next() {
		s := ss.At()
		if !reuse {
			it = nil
		}
		it = s.Iterator(it)
		for it.Next() != chunkenc.ValNone {
			ts, v := it.At()
			out = append(out, fmt.Sprintf("%s %d %x", s.Labels(), ts, math.Float64bits(v)))
		}
		require.NoError(t, it.Err())
	}
	require.NoError(t, ss.Err())
	return out
}
