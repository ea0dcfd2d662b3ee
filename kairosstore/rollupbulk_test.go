package kairosstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/rolluptest"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/readhint"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// noRowDoubles is the embedded engine without its bulk read of several
// rows: a store over it reads rollup rows a call per cell, as before the
// bulk read, through the same iterator of rows (CellsOfRows).
type noRowDoubles struct{ *pebblekv.Engine }

// CellDoublesOfRows of another signature hides the engine's own.
func (noRowDoubles) CellDoublesOfRows() {}

// TestRollupBulkMatchesPerCell holds the read of rollup rows in bulk to
// the read a call per cell: two stores over one Pebble engine, one that
// cannot see CellDoublesOfRows, answer every read hint (each aggregate,
// resolution, windows or none, steps of 1 ms to 300 years, Prometheus's
// ends) with the same points bit for bit and count the same rollup cells
// read. The rollups hold what another writer leaves behind the store's
// back: buckets written again with a TTL that has expired (last write
// wins, then nothing), a deleted range, cells of other value lengths
// (blocks that are not all doubles) and the null-typed rows of non-finite
// buckets (hostile series: NaN, ±Inf, ±1e300).
func TestRollupBulkMatchesPerCell(t *testing.T) {
	// Rows of 6 h are one block at every resolution; rows of 3 weeks
	// (the default) are several at 5m, so that a block of other value
	// lengths (read a call per cell) comes before blocks of doubles (read
	// in bulk) in one row.
	for _, width := range []time.Duration{6 * time.Hour, 0} {
		t.Run(fmt.Sprint("width=", width), func(t *testing.T) { testRollupBulkMatchesPerCell(t, width) })
	}
}

func testRollupBulkMatchesPerCell(t *testing.T, width time.Duration) {
	ctx := context.Background()
	pe, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pe.Close()) })
	require.NoError(t, pe.Setup(ctx))
	opts := ks.Options{RowWidth: width}
	bulkReg, slowReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	bulk, err := ks.Open(ctx, pe, opts, nil, bulkReg)
	require.NoError(t, err)
	slow, err := ks.Open(ctx, noRowDoubles{pe}, opts, nil, slowReg)
	require.NoError(t, err)

	day := 24 * hour
	t0 := 1_700_000_000_000 / day * day
	rnd := rand.New(rand.NewPCG(30, 2))
	var series []rolluptest.Series
	for i := range 2 {
		series = append(series, rolluptest.Hostile(rnd, "c", i, 300, t0), rolluptest.Hostile(rnd, "g", i, 300, t0))
	}
	appendSeries(t, bulk, series)
	res := []rollup.Resolution{rollup.Resolution(5 * time.Minute), rollup.Resolution(time.Hour), rollup.Resolution(6 * time.Hour)}
	require.NoError(t, rolluptest.Write(ctx, bulk, pe, res, t0+6*hour, t0+9*day, series))

	// Behind the store's back: buckets of series 1 written again by a
	// writer whose cells live a second (expired when read), ...
	ttl, err := ks.Open(ctx, pe, ks.Options{RowWidth: width, TTL: 1}, nil, nil)
	require.NoError(t, err)
	app := ttl.NewAppender()
	for _, r := range res {
		for _, a := range rollup.Aggregates {
			for e := r.Bucket(t0 + 2*day); e < t0+3*day; e += r.Millis() {
				_, err := app.Append(0, rollup.SeriesLabels(series[2].Labels, r, a), e, 42)
				require.NoError(t, err)
			}
		}
	}
	require.NoError(t, app.Commit(ctx))
	// ... a range of series 0's deleted, ...
	_, err = bulk.Delete(ctx, t0+4*day+7, t0+5*day, labels.MustNewMatcher(labels.MatchEqual, "i", "0"))
	require.NoError(t, err)
	// ... and cells of 4 and 9 bytes in a third of the rollup rows.
	b := &engine.Batch{WriteTime: time.Now().UnixMilli()}
	require.NoError(t, pe.MetricNames(ctx, func(name string) error {
		if !strings.HasSuffix(name, rollup.NameSuffix) {
			return nil
		}
		return pe.RowTimes(ctx, name, math.MinInt64, math.MaxInt64, func(rt int64) error {
			return pe.RowKeys(ctx, name, rt, func(dataType string, tags []codec.Tag) error {
				if dataType == codec.TypeDouble && rnd.IntN(3) == 0 {
					key := codec.AppendRowKey(nil, codec.RowKey{Metric: name, RowTime: rt, DataType: dataType, Tags: tags})
					col := uint32(rnd.Int64N(6 * hour))
					b.Cells = append(b.Cells, engine.Cell{Key: key, Column: col, Value: make([]byte, 4+5*rnd.IntN(2))})
				}
				return nil
			})
		})
	}))
	require.NotEmpty(t, b.Cells)
	require.NoError(t, pe.Write(ctx, b))
	time.Sleep(2100 * time.Millisecond) // the TTL'd cells expire

	const years300 = int64(300 * 365.25 * 24 * 3600 * 1000)
	minT, maxT := rolluptest.PromMin, rolluptest.PromMax
	type rangeCase struct{ start, end, step, rng int64 }
	cases := []rangeCase{
		{minT, maxT, 0, 1},
		{minT, maxT, years300, hour},
		{minT, maxT, 0, years300},
		{t0, t0 + 10*day, 6 * hour, hour},
		{t0, t0 + 10*day, 6 * hour, 6 * hour},
		{t0 + 5*hour, t0 + 3*day, 1, hour},
		{t0, t0 + 10*day, hour, years300},
		{t0 + 5*hour, maxT, 6 * hour, hour},
		{minT, t0 + 30*hour, 6 * hour, 4 * hour},
	}
	for range 4 {
		start := t0 + rnd.Int64N(10*day)
		cases = append(cases, rangeCase{start, start + rnd.Int64N(5*day), 1 + rnd.Int64N(12*hour), 1 + rnd.Int64N(2*day)})
	}
	read := func(st *ks.Store, c rangeCase, p readhint.Hint) (out []string) {
		q, err := st.Querier(c.start, c.end)
		require.NoError(t, err)
		defer q.Close()
		hints := &storage.SelectHints{Start: c.start, End: c.end, Step: c.step, Range: c.rng}
		ss := q.Select(readhint.With(ctx, p), true, hints, labels.MustNewMatcher(labels.MatchRegexp, "__name__", "c|g"))
		return pointStrings(t, ss, false)
	}
	points := 0
	for _, r := range res {
		for _, a := range []rollup.Aggregate{rollup.Count, rollup.Sum, rollup.Min, rollup.Max, rollup.Counter, rollup.Avg} {
			for i, c := range cases {
				for _, w := range []int64{0, c.rng} {
					p := readhint.Hint{Aggregate: a, Resolution: r, WindowMillis: w}
					want, got := read(slow, c, p), read(bulk, c, p)
					require.Equal(t, want, got, "%s %s case %d %+v window %d", r, a, i, c, w)
					points += len(got)
				}
			}
		}
	}
	require.Positive(t, points)
	require.Positive(t, cellsRead(t, bulkReg, "rollup"))
	require.Equal(t, cellsRead(t, slowReg, "rollup"), cellsRead(t, bulkReg, "rollup"), "the same rollup cells counted")
}
