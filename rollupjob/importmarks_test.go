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

// TestImportMarksCostTheirUnits: twenty days imported a day per commit, as
// import tsdb writes, through a store whose Guard is a job that does not
// run (the import's), leave a mark per metric and day. The serving job
// backfills them before the marks are old enough, then recomputes what
// they cover in one step, and writes no cell again: every bucket comes out
// as the backfill wrote it. Before, it recomputed a unit per step, reading
// every mark at each step (the square of the marks), and rewrote every
// cell; BenchmarkBackfill/imported has the figures.
func TestImportMarksCostTheirUnits(t *testing.T) {
	clk := &clock{}
	clk.set(t0)
	counted := &cellCounter{Engine: openPebble(t)}
	const base = 980*hour - 20*24*hour
	var data []series
	for i := range 4 {
		s := series{ls: labels.FromStrings("__name__", fmt.Sprint("m", i%2), "i", fmt.Sprint(i))}
		for ts := base + minute; ts <= 980*hour; ts += minute {
			s.ts, s.vs = append(s.ts, ts), append(s.vs, float64(ts/minute%97+int64(i)))
		}
		data = append(data, s)
	}
	n := newNode(t, counted, clk, "serving")
	worked, err := n.job.Step(t.Context()) // the present first: nothing yet
	require.NoError(t, err)
	require.True(t, worked)

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

	n.run(t) // the backfill, the marks young
	require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "m0", "m1"))
	before := counted.cells.Load()
	settle(clk)
	steps := n.run(t)
	require.LessOrEqual(t, steps, 2, "the ripe marks are done in a step")
	require.Empty(t, marks(t, n))
	require.Equal(t, before, counted.cells.Load(), "no cell written again")
	require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "m0", "m1"))
}
