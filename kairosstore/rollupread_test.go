package kairosstore_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// rollupData is two days of one gauge and one counter (reset once, in the
// rolled-up middle, and once in the raw tail) at 60 s from t0.
func rollupData(t0 int64) []rolluptest.Series {
	g := rolluptest.Series{Labels: labels.FromStrings("__name__", "g", "job", "a")}
	c := rolluptest.Series{Labels: labels.FromStrings("__name__", "c", "job", "a")}
	v := 1000.0
	for i := int64(0); i < 48*60; i++ {
		ts := t0 + 7_000 + i*60_000 // not on bucket ends: samples near both sides of a seam
		g.T, g.V = append(g.T, ts), append(g.V, 50+40*math.Sin(float64(i)/37))
		v += float64(i%7) + 0.5
		if i == 20*60 || i == 40*60 {
			v = 3
		}
		c.T, c.V = append(c.T, ts), append(c.V, v)
	}
	return []rolluptest.Series{g, c}
}

// rollupStore is a store with rollupData written raw (no rollups yet).
func rollupStore(t *testing.T, eng engine.Engine) (*ks.Store, *prometheus.Registry, int64, []rolluptest.Series) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	st, err := ks.Open(ctx, eng, ks.Options{RowWidth: 6 * time.Hour}, nil, reg)
	require.NoError(t, err)
	day := int64(24 * time.Hour / time.Millisecond)
	t0 := 1_700_000_000_000 / day * day
	data := rollupData(t0)
	appendSeries(t, st, data)
	return st, reg, t0, data
}

// TestRollupReadStitched reads with rollups done only for the middle of the
// query's range: the raw samples before and after are stitched on, and
// sums, counts, extremes and the counter's increase over the whole range
// equal the raw ones, which holds only without a gap or an overlap at
// either seam.
func TestRollupReadStitched(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		st, reg, t0, data := rollupStore(t, eng)
		h := rollup.Resolution(time.Hour)
		require.NoError(t, rolluptest.Write(ctx, st, eng, []rollup.Resolution{h}, t0+10*hour, t0+30*hour, data))

		mint, maxt := t0+1, t0+48*hour
		read := func(name string, p readhint.Hint) (ts []int64, vs []float64) {
			q, err := st.Querier(mint, maxt)
			require.NoError(t, err)
			defer q.Close()
			// Range: how far a window reaches from a series' start or stop
			// (read raw that far).
			ss := q.Select(readhint.With(ctx, p), false, &storage.SelectHints{Start: mint, End: maxt, Range: hour},
				labels.MustNewMatcher(labels.MatchEqual, "__name__", name))
			ts, vs = onlySeries(t, ss)
			for i := 1; i < len(ts); i++ {
				require.Less(t, ts[i-1], ts[i])
			}
			return ts, vs
		}
		g, c := data[0], data[1]
		var rawSum, rawMin, rawMax, rawInc float64
		rawMin, rawMax = math.Inf(1), math.Inf(-1)
		for i, v := range g.V {
			rawSum += v
			rawMin, rawMax = min(rawMin, v), max(rawMax, v)
			if i > 0 {
				if c.V[i] < c.V[i-1] {
					rawInc += c.V[i]
				} else {
					rawInc += c.V[i] - c.V[i-1]
				}
			}
		}
		// 10 raw hours before, 21 buckets, 18 raw hours after.
		ts, vs := read("g", readhint.Hint{Aggregate: rollup.Sum, Resolution: h})
		require.Len(t, ts, 9*60+21+18*60)
		require.InEpsilon(t, rawSum, total(vs), 1e-12)
		_, vs = read("g", readhint.Hint{Aggregate: rollup.Count, Resolution: h})
		require.Equal(t, float64(len(g.T)), total(vs))
		_, vs = read("g", readhint.Hint{Aggregate: rollup.Min, Resolution: h})
		require.Equal(t, rawMin, minOf(vs))
		_, vs = read("g", readhint.Hint{Aggregate: rollup.Max, Resolution: h})
		require.Equal(t, rawMax, -minOf(negate(vs)))
		// Avg: a point per bucket at its end, raw or rolled up alike, each
		// the mean of the bucket's samples.
		ts, vs = read("g", readhint.Hint{Aggregate: rollup.Avg, Resolution: h})
		require.Len(t, ts, 48)
		for i, end := range ts {
			require.Equal(t, t0+int64(i+1)*hour, end)
			sum, n := 0.0, 0.0
			for j, t := range g.T {
				if t > end-hour && t <= end {
					sum, n = sum+g.V[j], n+1
				}
			}
			require.InEpsilon(t, sum/n, vs[i], 1e-12, "bucket %d", i)
		}
		// The raw samples before the rollups keep their values (resets
		// included, as over raw samples); from the rollups on, a running
		// sum that never resets.
		ts, vs = read("c", readhint.Hint{Aggregate: rollup.Counter, Resolution: h})
		inc := 0.0
		for i := 1; i < len(vs); i++ {
			if ts[i] > t0+9*hour {
				require.GreaterOrEqual(t, vs[i], vs[i-1], "the running sum never resets")
			}
			if vs[i] < vs[i-1] {
				inc += vs[i]
			} else {
				inc += vs[i] - vs[i-1]
			}
		}
		require.InEpsilon(t, rawInc, inc, 1e-12)
		require.Positive(t, cellsRead(t, reg, "rollup"))

		// A count over raw samples alone (no rollups at 5m) is 1 a sample.
		_, vs = read("g", readhint.Hint{Aggregate: rollup.Count, Resolution: rollup.Resolution(5 * time.Minute)})
		require.Equal(t, float64(len(g.T)), total(vs))
	})
}

// TestReadWindows reads only the windows a selector is evaluated in: every
// sample inside them and nothing else, from fewer cells.
func TestReadWindows(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		st, reg, t0, data := rollupStore(t, eng)
		g := data[0]
		// rate(g[5m]) at a step of 3h from t0+1h: windows (t-5m, t].
		w, step := int64(5*time.Minute/time.Millisecond), 3*hour
		hints := &storage.SelectHints{Start: t0 + hour - w + 1, End: t0 + 46*hour, Step: step, Range: w}
		q, err := st.Querier(hints.Start, hints.End)
		require.NoError(t, err)
		defer q.Close()
		ss := q.Select(readhint.With(ctx, readhint.Hint{WindowMillis: w}), false, hints, labels.MustNewMatcher(labels.MatchEqual, "__name__", "g"))
		require.True(t, ss.Next())
		var got, want []int64
		it := ss.At().Iterator(nil)
		for it.Next() != 0 {
			ts, _ := it.At()
			got = append(got, ts)
		}
		require.NoError(t, it.Err())
		for _, ts := range g.T {
			if ts < hints.Start || ts > hints.End {
				continue
			}
			if e := (ts - hints.Start) % step; e < w {
				want = append(want, ts)
			}
		}
		require.Equal(t, want, got)
		require.Len(t, got, 16*5)
		require.Less(t, cellsRead(t, reg, "raw"), float64(2*len(got)))
	})
}

func cellsRead(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "kairos_adapter_read_cells_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == kind {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func total(vs []float64) float64 {
	s := 0.0
	for _, v := range vs {
		s += v
	}
	return s
}

func minOf(vs []float64) float64 {
	m := math.Inf(1)
	for _, v := range vs {
		m = min(m, v)
	}
	return m
}

func negate(vs []float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = -v
	}
	return out
}

// sliceCounter counts the data_points slices read.
type sliceCounter struct {
	engine.Engine
	slices atomic.Int64
}

func (e *sliceCounter) Cells(ctx context.Context, key []byte, lo, hi uint32, fn func(uint32, []byte) error) error {
	e.slices.Add(1)
	return e.Engine.Cells(ctx, key, lo, hi, fn)
}

// TestRollupWindowsOneSlicePerRow: rate(c[1h]) at a step of 6h over a
// month of 1h counter rollups evaluates 120 windows of one bucket each.
// They were read a slice each (on Cassandra a round trip each); the 5
// buckets between two windows are fewer cells than a slice costs, so the
// store reads each row's buckets in one slice and keeps the windows' only:
// the same points as the windows cut from the whole range.
func TestRollupWindowsOneSlicePerRow(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		counted := &sliceCounter{Engine: eng}
		st, err := ks.Open(ctx, counted, ks.Options{}, nil, prometheus.NewRegistry())
		require.NoError(t, err)
		day := 24 * hour
		t0 := 1_700_000_000_000 / day * day
		const days = 30
		c := rolluptest.Series{Labels: labels.FromStrings("__name__", "c", "job", "a")}
		app := st.NewAppender()
		for ts, v := t0+7_000, 0.0; ts < t0+days*day; ts += 60_000 {
			v += 1.5
			c.T, c.V = append(c.T, ts), append(c.V, v)
			_, err := app.Append(0, c.Labels, ts, v)
			require.NoError(t, err)
		}
		require.NoError(t, app.Commit(ctx))
		h := rollup.Resolution(time.Hour)
		require.NoError(t, rolluptest.Write(ctx, st, eng, []rollup.Resolution{h}, t0+hour, t0+days*day, []rolluptest.Series{c}))

		step, w := 6*hour, hour
		// Evaluation times, on bucket ends; the last a step before the
		// rollups end, as a bucket whose successor is not known is read raw
		// (the series could stop inside it).
		first, last := t0+6*hour, t0+days*day-step
		read := func(hints *storage.SelectHints, p readhint.Hint) (ts []int64, vs []float64, slices int64) {
			q, err := st.Querier(hints.Start, hints.End)
			require.NoError(t, err)
			defer q.Close()
			before := counted.slices.Load()
			ss := q.Select(readhint.With(ctx, p), false, hints, labels.MustNewMatcher(labels.MatchEqual, "__name__", "c"))
			ts, vs = onlySeries(t, ss)
			return ts, vs, counted.slices.Load() - before
		}
		hints := &storage.SelectHints{Start: first - w + 1, End: last, Step: step, Range: w}
		p := readhint.Hint{Aggregate: rollup.Counter, Resolution: h, WindowMillis: w}
		ts, vs, slices := read(hints, p)
		windows := (last-first)/step + 1
		require.Len(t, ts, 2*int(windows), "each window: its bucket's start and end")
		require.LessOrEqual(t, slices, int64(4), "a slice per row (a month spans 2 or 3 rows of 3 weeks)")

		// The whole range read, then cut to the windows: the same points.
		p.WindowMillis = 0
		allTS, allVS, _ := read(&storage.SelectHints{Start: hints.Start, End: hints.End}, p)
		var wantTS []int64
		var wantVS []float64
		for i, t := range allTS {
			if (t-hints.Start)%step < w {
				wantTS, wantVS = append(wantTS, t), append(wantVS, allVS[i])
			}
		}
		require.Equal(t, wantTS, ts)
		// The running sum starts from the total of what was read, so
		// compare the increases inside each window, what rate sees.
		for i := 1; i < len(vs); i++ {
			if ts[i]-ts[i-1] < w {
				require.Equal(t, wantVS[i]-wantVS[i-1], vs[i]-vs[i-1], "at %d", ts[i])
				require.Equal(t, 60*1.5, vs[i]-vs[i-1], "at %d", ts[i])
			}
		}
	})
}

// TestRawWindowsFewSlices: rate(g[5m]) at a step of 10m reads windows 5
// samples apart. Read a slice each, that was one slice per window (276);
// once the first slice shows how dense the series is, the store reads
// through such gaps, a slice per row, and still hands over only the
// windows' samples.
func TestRawWindowsFewSlices(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		counted := &sliceCounter{Engine: eng}
		st, _, t0, data := rollupStore(t, counted)
		g := data[0]
		w, step := int64(5*time.Minute/time.Millisecond), 10*int64(time.Minute/time.Millisecond)
		hints := &storage.SelectHints{Start: t0 + hour - w + 1, End: t0 + 47*hour, Step: step, Range: w}
		q, err := st.Querier(hints.Start, hints.End)
		require.NoError(t, err)
		defer q.Close()
		before := counted.slices.Load()
		ss := q.Select(readhint.With(ctx, readhint.Hint{WindowMillis: w}), false, hints, labels.MustNewMatcher(labels.MatchEqual, "__name__", "g"))
		require.True(t, ss.Next())
		var got, want []int64
		it := ss.At().Iterator(nil)
		for it.Next() != 0 {
			ts, _ := it.At()
			got = append(got, ts)
		}
		require.NoError(t, it.Err())
		for _, ts := range g.T {
			if ts >= hints.Start && ts <= hints.End && (ts-hints.Start)%step < w {
				want = append(want, ts)
			}
		}
		require.Equal(t, want, got)
		// 8 rows of 6h; the first reads one window alone first.
		require.LessOrEqual(t, counted.slices.Load()-before, int64(9))
	})
}

// appendSeries writes every sample of series through one appender of st.
func appendSeries(t *testing.T, st *ks.Store, series []rolluptest.Series) {
	t.Helper()
	app := st.NewAppender()
	for _, s := range series {
		for i := range s.T {
			_, err := app.Append(0, s.Labels, s.T[i], s.V[i])
			require.NoError(t, err)
		}
	}
	require.NoError(t, app.Commit(context.Background()))
}

// TestRollupCounterStartsAtItsIncrease: a counter read whose points begin
// with rollups (no raw sample before them in the read) starts its running
// sum at the read's whole increase, not at zero. From zero, the first
// window's first value would be 0, and PromQL's rate, taking that for the
// counter's zero point, stops extrapolating there: a rate over rollups
// that differs from one over a finer resolution or raw.
func TestRollupCounterStartsAtItsIncrease(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		st, _, t0, data := rollupStore(t, eng)
		h := rollup.Resolution(time.Hour)
		require.NoError(t, rolluptest.Write(ctx, st, eng, []rollup.Resolution{h}, t0+10*hour, t0+30*hour, data))

		// Inside the rollups, on bucket ends, windows of an hour.
		mint, maxt := t0+12*hour, t0+28*hour
		q, err := st.Querier(mint, maxt)
		require.NoError(t, err)
		defer q.Close()
		ss := q.Select(readhint.With(ctx, readhint.Hint{Aggregate: rollup.Counter, Resolution: h}), false,
			&storage.SelectHints{Start: mint, End: maxt, Step: hour, Range: hour},
			labels.MustNewMatcher(labels.MatchEqual, "__name__", "c"))
		ts, vs := onlySeries(t, ss)
		require.Greater(t, len(vs), 2)
		require.Greater(t, ts[0], t0+10*hour, "the read begins in the rollups")

		// The raw increase over the buckets read: from the last sample
		// before the first bucket's start to the last of the read.
		c := data[1]
		first, last := -1, -1
		for i, t := range c.T {
			if t <= ts[0]-1 {
				first = i
			}
			if t <= ts[len(ts)-1] {
				last = i
			}
		}
		require.GreaterOrEqual(t, first, 0)
		inc := 0.0
		for i := first + 1; i <= last; i++ {
			if c.V[i] < c.V[i-1] {
				inc += c.V[i]
			} else {
				inc += c.V[i] - c.V[i-1]
			}
		}
		require.InEpsilon(t, inc, vs[len(vs)-1]-vs[0], 1e-12, "the running sum holds the increase")
		require.InEpsilon(t, inc, vs[0], 1e-12, "and starts at it")
	})
}

// onlySeries is the points of the one series ss holds; it fails the test
// if ss holds none or more than one, or either errs.
func onlySeries(t *testing.T, ss storage.SeriesSet) (ts []int64, vs []float64) {
	t.Helper()
	require.True(t, ss.Next())
	it := ss.At().Iterator(nil)
	for it.Next() != chunkenc.ValNone {
		pt, v := it.At()
		ts, vs = append(ts, pt), append(vs, v)
	}
	require.NoError(t, it.Err())
	require.False(t, ss.Next())
	require.NoError(t, ss.Err())
	return ts, vs
}
