package kairosstore_test

import (
	"context"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/rolluptest"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/readhint"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// columnsReader is cql.Engine's read of given columns of rows.
type columnsReader interface {
	CellsOfColumns(ctx context.Context, keys [][]byte, cols []uint32, fn func(row int, column uint32, value []byte) error) error
}

// slicesEngine is Cassandra read by slices only (Cells, CellsOfKeys),
// counting the cells it hands over.
type slicesEngine struct {
	engine.Engine
	kr    keysReader
	cells *atomic.Int64
}

func (e slicesEngine) Cells(ctx context.Context, key []byte, lo, hi uint32, fn func(uint32, []byte) error) error {
	return e.Engine.Cells(ctx, key, lo, hi, func(c uint32, b []byte) error {
		e.cells.Add(1)
		return fn(c, b)
	})
}

func (e slicesEngine) CellsOfKeys(ctx context.Context, keys [][]byte, lo, hi uint32, fn func(int, uint32, []byte) error) error {
	return e.kr.CellsOfKeys(ctx, keys, lo, hi, func(i int, c uint32, b []byte) error {
		e.cells.Add(1)
		return fn(i, c, b)
	})
}

// namesEngine is slicesEngine that also reads columns by name, counting
// those statements.
type namesEngine struct {
	slicesEngine
	cr    columnsReader
	stmts *atomic.Int64
}

func (e namesEngine) CellsOfColumns(ctx context.Context, keys [][]byte, cols []uint32, fn func(int, uint32, []byte) error) error {
	e.stmts.Add(1)
	return e.cr.CellsOfColumns(ctx, keys, cols, func(i int, c uint32, b []byte) error {
		e.cells.Add(1)
		return fn(i, c, b)
	})
}

// TestRollupColumnsByName reads rate-like windows (1h every 6h) of random
// series (NaN, ±Inf, ±1e300, gaps, resets, samples at Prometheus's minimum
// and maximum times) from rollups at 1h and 5m, on Cassandra, with the
// buckets the windows need read by name (column1 IN) and through slices:
// every answer is equal to the bit, the named reads happen, and they hand
// over fewer cells. Also ranges the plan must not blow up on: all of
// Prometheus's time at a 6h step, a step of 300 years, a range of 1 ms.
func TestRollupColumnsByName(t *testing.T) {
	ctx := context.Background()
	promMin, promMax := rolluptest.PromMin, rolluptest.PromMax
	day := 24 * hour
	t0 := 1_700_000_000_000 / day * day
	rnd := rand.New(rand.NewPCG(30, 2))
	var data []rolluptest.Series
	for i, name := range []string{"g", "c"} {
		data = append(data, rolluptest.Hostile(rnd, name, i, 80, t0))
	}
	for _, width := range []time.Duration{6 * time.Hour, 3 * 7 * 24 * time.Hour} {
		t.Run(width.String(), func(t *testing.T) {
			eng := openCassandra(t) // a keyspace has one row width
			kr, ok1 := eng.(keysReader)
			cr, ok2 := eng.(columnsReader)
			require.True(t, ok1 && ok2, "cql.Engine reads several rows and columns by name")
			ds := data
			var sliceCells, nameCells, nameStmts atomic.Int64
			opts := ks.Options{RowWidth: width}
			slices := openStore(t, slicesEngine{Engine: eng, kr: kr, cells: &sliceCells}, opts)
			names := openStore(t, namesEngine{slicesEngine: slicesEngine{Engine: eng, kr: kr, cells: &nameCells}, cr: cr, stmts: &nameStmts}, opts)
			appendSeries(t, slices, ds)
			h, m5 := rollup.Resolution(time.Hour), rollup.Resolution(5*time.Minute)
			require.NoError(t, rolluptest.Write(ctx, slices, eng, []rollup.Resolution{h, m5}, t0+hour, t0+9*day+17*hour, ds))

			read := func(st *ks.Store, name string, p readhint.Hint, sh *storage.SelectHints) map[string][][2]uint64 {
				q, err := st.Querier(sh.Start, sh.End)
				require.NoError(t, err)
				defer q.Close()
				ss := q.Select(readhint.With(ctx, p), false, sh, labels.MustNewMatcher(labels.MatchEqual, "__name__", name))
				out := map[string][][2]uint64{}
				for ss.Next() {
					it := ss.At().Iterator(nil)
					var pts [][2]uint64
					for it.Next() != 0 {
						ts, v := it.At()
						pts = append(pts, [2]uint64{uint64(ts), math.Float64bits(v)})
					}
					require.NoError(t, it.Err())
					out[ss.At().Labels().String()] = pts
				}
				require.NoError(t, ss.Err())
				return out
			}
			y300 := int64(300 * 365 * day)
			for _, sh := range []*storage.SelectHints{
				{Start: t0 - day - hour + 1, End: t0 + 11*day, Step: 6 * hour, Range: hour},
				{Start: t0 + 3*day - 5*time.Minute.Milliseconds() + 1, End: t0 + 11*day, Step: 6 * hour, Range: 5 * time.Minute.Milliseconds()},
				{Start: promMin, End: promMax, Step: 6 * hour, Range: hour},
				{Start: t0 + 5*day - hour + 1, End: promMax, Step: y300, Range: hour},
				{Start: t0 + 5*day, End: t0 + 5*day, Step: 1, Range: 1},
			} {
				for _, s := range ds {
					name := s.Labels.Get("__name__")
					as := []rollup.Aggregate{rollup.Sum, rollup.Count, rollup.Max}
					if name == "c" {
						as = []rollup.Aggregate{rollup.Counter, rollup.Min}
					}
					for _, a := range as {
						for _, r := range []rollup.Resolution{h, m5} {
							p := readhint.Hint{Aggregate: a, Resolution: r, WindowMillis: sh.Range}
							want := read(slices, name, p, sh)
							got := read(names, name, p, sh)
							require.Equal(t, want, got, "%s at %s over [%d, %d] step %d range %d", a, r, sh.Start, sh.End, sh.Step, sh.Range)
						}
					}
				}
			}
			require.Positive(t, nameStmts.Load(), "buckets read by name")
			t.Logf("cells handed over: %d by name, %d by slices; %d statements by name", nameCells.Load(), sliceCells.Load(), nameStmts.Load())
			// Raw cells, the same for both, are counted too.
			require.Less(t, nameCells.Load(), sliceCells.Load(), "reading by name hands over fewer cells")
		})
	}
}
