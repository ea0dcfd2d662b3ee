package kairosstore_test

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
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

// rowsAtOnceEngine is an engine without a reader of several rows (as
// Cassandra is) that records the most data_points slices in flight.
type rowsAtOnceEngine struct {
	engine.Engine
	mu       sync.Mutex
	cur, max int
}

func (e *rowsAtOnceEngine) Cells(ctx context.Context, key []byte, lo, hi uint32, fn func(uint32, []byte) error) error {
	e.mu.Lock()
	e.cur++
	e.max = max(e.max, e.cur)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.cur--
		e.mu.Unlock()
	}()
	time.Sleep(time.Millisecond) // a round trip, so that reads at once overlap
	return e.Engine.Cells(ctx, key, lo, hi, fn)
}

// keysReader is cql.Engine's read of several rows in one statement.
type keysReader interface {
	CellsOfKeys(ctx context.Context, keys [][]byte, lo, hi uint32, fn func(row int, column uint32, value []byte) error) error
}

// keysAtOnceEngine is rowsAtOnceEngine with a read of several rows in one
// statement, counted in flight as one slice, and the rows it read.
type keysAtOnceEngine struct {
	*rowsAtOnceEngine
	kr   keysReader
	rows int
}

func (e *keysAtOnceEngine) CellsOfKeys(ctx context.Context, keys [][]byte, lo, hi uint32, fn func(row int, column uint32, value []byte) error) error {
	e.mu.Lock()
	e.cur++
	e.max = max(e.max, e.cur)
	e.rows += len(keys)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.cur--
		e.mu.Unlock()
	}()
	time.Sleep(time.Millisecond)
	return e.kr.CellsOfKeys(ctx, keys, lo, hi, fn)
}

// serialRowsEngine reads the rows of a rollup series one after another,
// through its reader of several rows: the sequential path.
type serialRowsEngine struct{ engine.Engine }

func (e serialRowsEngine) CellsOfRows(ctx context.Context, read func(cells func(rowKey []byte, lo, hi uint32, fn func(uint32, []byte) error) error) error) error {
	return read(func(rowKey []byte, lo, hi uint32, fn func(uint32, []byte) error) error {
		return e.Cells(ctx, rowKey, lo, hi, fn)
	})
}

// TestRollupRowsAtOnce reads random series (NaN, ±Inf, ±1e300, gaps,
// resets, samples at Prometheus's minimum and maximum times) through
// rollups whose rows are read several at once, and through the same store
// read row after row: every answer is equal to the bit, with at most 8
// rows of a series in flight and, a row a statement, more than one; on
// Cassandra also with rows in one statement (key IN), whole rows where
// what they hold beyond the range is fewer cells than a statement costs
// (at 1h, 6 buckets a row; at 5m, 72). Then a rollup row is
// deleted behind the store's back: both read the same, without its buckets.
func TestRollupRowsAtOnce(t *testing.T) {
	forEachEngineWithDelete(t, func(t *testing.T, eng engine.Engine, del deleteFunc) {
		ctx := context.Background()
		at := &rowsAtOnceEngine{Engine: eng}
		opts := ks.Options{RowWidth: 6 * time.Hour}
		conc := openStore(t, at, opts)
		serial := openStore(t, serialRowsEngine{eng}, opts)
		stores := map[string]*ks.Store{"at once": conc}
		var keys *keysAtOnceEngine
		if kr, ok := eng.(keysReader); ok { // Cassandra
			keys = &keysAtOnceEngine{rowsAtOnceEngine: &rowsAtOnceEngine{Engine: eng}, kr: kr}
			stores["in one statement"] = openStore(t, keys, opts)
		}

		promMin, promMax := rolluptest.PromMin, rolluptest.PromMax
		day := 24 * hour
		t0 := 1_700_000_000_000 / day * day
		rnd := rand.New(rand.NewPCG(30, 1))
		var data []rolluptest.Series
		for i := range 4 {
			name := "g"
			if i == 3 {
				name = "c"
			}
			data = append(data, rolluptest.Hostile(rnd, name, i, 50, t0))
		}
		appendSeries(t, conc, data)
		h := rollup.Resolution(time.Hour)
		m5 := rollup.Resolution(5 * time.Minute)
		require.NoError(t, rolluptest.Write(ctx, conc, eng, []rollup.Resolution{h, m5}, t0+hour, t0+9*day+17*hour, data))

		type answer map[string][][2]uint64
		read := func(st *ks.Store, name, i string, p readhint.Hint, sh *storage.SelectHints) answer {
			// A new querier per read: the store caches no samples, and the
			// rollup progress it caches is the same for both.
			q, err := st.Querier(sh.Start, sh.End)
			require.NoError(t, err)
			defer q.Close()
			ss := q.Select(readhint.With(ctx, p), false, sh, labels.MustNewMatcher(labels.MatchEqual, "__name__", name), labels.MustNewMatcher(labels.MatchEqual, "i", i))
			out := answer{}
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
		compare := func() (rollupPoints int) {
			for _, sh := range []*storage.SelectHints{
				{Start: promMin, End: promMax, Range: hour},                      // all of it
				{Start: t0 - day, End: t0 + 11*day, Step: 6 * hour, Range: hour}, // windows
			} {
				for _, s := range data {
					name, i := s.Labels.Get("__name__"), s.Labels.Get("i")
					as := []rollup.Aggregate{rollup.Sum, rollup.Count, rollup.Min, rollup.Max}
					if name == "c" {
						as = []rollup.Aggregate{rollup.Counter, rollup.Min}
					}
					for _, ar := range []struct {
						a rollup.Aggregate
						r rollup.Resolution
					}{{as[0], h}, {as[0], m5}, {as[1], h}, {as[1], m5}, {as[len(as)-1], h}, {as[len(as)-1], m5}} {
						a := ar.a
						p := readhint.Hint{Aggregate: a, Resolution: ar.r}
						if sh.Step > 0 {
							p.WindowMillis = hour
						}
						want := read(serial, name, i, p, sh)
						require.NotEmpty(t, want)
						var got answer
						for how, st := range stores {
							e := at
							if st != conc {
								e = keys.rowsAtOnceEngine
							}
							e.mu.Lock()
							e.max = 0
							e.mu.Unlock()
							got = read(st, name, i, p, sh)
							require.Equal(t, want, got, "%s: %s at %s over [%d, %d] step %d", how, a, ar.r, sh.Start, sh.End, sh.Step)
							e.mu.Lock()
							require.LessOrEqual(t, e.max, 8, "%s: rows of one series in flight", how)
							if st == conc {
								require.Greater(t, e.max, 1, "%s: rows of one series read at once", how)
							}
							e.mu.Unlock()
						}
						for _, pts := range got {
							for _, pt := range pts {
								if ts := int64(pt[0]); ts > t0+2*hour && ts < t0+9*day && ts%hour == 0 {
									rollupPoints++
								}
							}
						}
					}
				}
			}
			return rollupPoints
		}
		before := compare()
		// KairosDB's delete of the row window of t0+3d of every rollup
		// series of g (its row_keys too): both paths lose the same buckets.
		del(t, "g"+rollup.NameSuffix, t0+3*day, kairosDelete{})
		after := compare()
		require.Less(t, after, before, "the deleted row's buckets are gone")
		if keys != nil {
			require.Positive(t, keys.rows, "rows read in one statement")
		}
	})
}
