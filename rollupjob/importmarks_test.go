package rollupjob_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/rollup"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

// cellCounter counts the data_points cells written through it.
type cellCounter struct {
	engine.Engine
	cells atomic.Int64
}

func (c *cellCounter) Write(ctx context.Context, b *engine.Batch) error {
	c.cells.Add(int64(len(b.Cells)))
	return c.Engine.Write(ctx, b)
}

// TestImportReadsOnce: twenty days imported a day per commit, as import
// tsdb writes, through a store whose Guard is a job that does not run (the
// import's), leave a mark per metric and day. The serving job, stepped
// right after the import, holds its backfill of the marked spans until the
// marks ripen and then reads each raw sample once: no more than the
// backfill of the same history written without marks reads, and it writes
// the same cells. Before, it backfilled at once and read every unit again
// when the marks ripened (twice the seeded case's reads); before that, it
// also rewrote every cell. BenchmarkBackfill/imported has the figures.
func TestImportReadsOnce(t *testing.T) {
	const base = 980*hour - 20*24*hour
	var data []series
	for i := range 4 {
		s := series{ls: labels.FromStrings("__name__", fmt.Sprint("m", i%2), "i", fmt.Sprint(i))}
		for ts := base + minute; ts <= 980*hour; ts += minute {
			s.ts, s.vs = append(s.ts, ts), append(s.vs, float64(ts/minute%97+int64(i)))
		}
		data = append(data, s)
	}
	// job is what the serving job read (raw samples) and wrote (cells).
	job := func(t *testing.T, imported bool) (read float64, cells int64) {
		clk := &clock{}
		clk.set(t0)
		counted := &cellCounter{Engine: openPebble(t)}
		if !imported {
			seed(t, counted, clk, data)
		}
		n := newNode(t, counted, clk, "serving")
		before := counted.cells.Load()
		worked, err := n.job.Step(t.Context()) // the present first
		require.NoError(t, err)
		require.True(t, worked)
		cells = counted.cells.Load() - before
		if imported {
			g := &guard{}
			imp, err := kairosstore.Open(t.Context(), counted, kairosstore.Options{Now: clk.Now, Guard: g}, nil, prometheus.NewRegistry())
			require.NoError(t, err)
			importJob, err := rollupjob.New(imp, rollupjob.Config{Resolutions: []rollup.Resolution{m5, h1}, Delay: 0, Owner: "import", Now: clk.Now}, nil, prometheus.NewRegistry())
			require.NoError(t, err)
			g.j.Store(importJob)
			for d := range 20 {
				var day []series
				for _, s := range data {
					c := series{ls: s.ls}
					for k, ts := range s.ts {
						if ts > base+int64(d)*24*hour && ts <= base+int64(d+1)*24*hour {
							c.ts, c.vs = append(c.ts, ts), append(c.vs, s.vs[k])
						}
					}
					day = append(day, c)
				}
				write(t, imp, day)
			}
			require.Len(t, marks(t, n), 2*20, "a mark per metric and commit")
		}
		before = counted.cells.Load()
		n.run(t) // right after the import: the marks are young
		settle(clk)
		n.run(t)
		require.Empty(t, marks(t, n))
		require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "m0", "m1"))
		return counter(n, "kairos_adapter_rollup_raw_samples_read_total", ""), cells + counted.cells.Load() - before
	}
	seededRead, seededCells := job(t, false)
	importedRead, importedCells := job(t, true)
	t.Logf("raw samples read: seeded %.0f, imported %.0f; cells written: seeded %d, imported %d", seededRead, importedRead, seededCells, importedCells)
	require.GreaterOrEqual(t, seededRead, float64(4*20*24*60), "the seeded backfill reads every sample")
	// A held span cut above the marks reads one unit more (the unit
	// before a span is read for the counters' start): 4 series, 60
	// samples a unit, for each of a few cuts.
	require.LessOrEqual(t, importedRead, seededRead+3*4*60, "the imported history is read once")
	require.Equal(t, seededCells, importedCells, "every cell is written once")
}
