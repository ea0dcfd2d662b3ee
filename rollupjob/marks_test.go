package rollupjob_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/rollup"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

// lateWrite writes samples of series s of data through n's store and
// records them in data.
func lateWrite(t *testing.T, n *node, data []series, s int, ts []int64, vs []float64) {
	t.Helper()
	app := n.store.NewAppender()
	for i := range ts {
		_, err := app.Append(0, data[s].ls, ts[i], vs[i])
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit(t.Context()))
	record(data, s, ts, vs)
}

// record puts samples into data[s], as a store holds them.
func record(data []series, s int, ts []int64, vs []float64) {
	for i, t := range ts {
		if k, ok := slices.BinarySearch(data[s].ts, t); ok {
			data[s].vs[k] = vs[i]
		} else {
			data[s].ts, data[s].vs = slices.Insert(data[s].ts, k, t), slices.Insert(data[s].vs, k, vs[i])
		}
	}
}

func marks(t *testing.T, n *node) []string {
	t.Helper()
	var out []string
	require.NoError(t, n.store.ServiceKeys(t.Context(), rollup.Service, rollup.ServiceKey, "dirty.", func(k string) error {
		out = append(out, k)
		return nil
	}))
	return out
}

// TestLateWriteSurvivesRestart: a write into rolled-up units, and a delete,
// answered by a process that is then gone (kill -9: no step of its job
// runs again) are recomputed by the job of the next process on the
// keyspace. The marks are in service_index when Commit and Delete return;
// before, they waited in memory for the job's next step and died with
// the process. The delete comes from a process whose job never stepped
// (it had just started): its marks still cover the units rolled up before.
func TestLateWriteSurvivesRestart(t *testing.T) {
	engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
		clk := &clock{}
		clk.set(t0)
		data := testData()
		seed(t, open(t), clk, data)
		a := newNode(t, open(t), clk, "a")
		a.run(t)
		require.Equal(t, expected(data, 1000*hour), stored(t, a.store, "x", "y"))

		lateWrite(t, a, data, 0, []int64{994*hour - 30_000, 994 * hour}, []float64{1e9, 2e9})
		require.NotEmpty(t, marks(t, a), "the mark is stored when Commit returns")

		// The next process, started a minute later: a's lease has run out.
		clk.set(t0 + 2*time.Minute.Milliseconds())
		b := newNode(t, open(t), clk, "b")
		_, err := b.store.Delete(t.Context(), 992*hour, 993*hour+7*minute, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "y"))
		require.NoError(t, err)
		keep := data[2]
		keep.ts, keep.vs = nil, nil
		for i, ts := range data[2].ts {
			if ts < 992*hour || ts > 993*hour+7*minute {
				keep.ts, keep.vs = append(keep.ts, ts), append(keep.vs, data[2].vs[i])
			}
		}
		data[2] = keep

		c := newNode(t, open(t), clk, "c")
		settle(clk)
		c.run(t)
		require.Equal(t, expected(data, 1000*hour), stored(t, c.store, "x", "y"))
		require.Positive(t, counter(c, "kairos_adapter_rollup_recomputations_total", "write"))
		require.Positive(t, counter(c, "kairos_adapter_rollup_recomputations_total", "delete"))
		require.Empty(t, marks(t, c), "marks are deleted once done")
	})
}

// TestLateWriteToStandby: two adapters on one keyspace; the one that does
// not hold the lease takes a late write and is gone before its job steps
// again. The holder finds the mark and recomputes.
func TestLateWriteToStandby(t *testing.T) {
	engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
		clk := &clock{}
		clk.set(t0)
		data := testData()
		seed(t, open(t), clk, data)
		a := newNode(t, open(t), clk, "a")
		b := newNode(t, open(t), clk, "b")
		a.run(t)
		worked, err := b.job.Step(t.Context())
		require.NoError(t, err)
		require.False(t, worked, "b stands by")

		lateWrite(t, b, data, 1, []int64{997*hour + 30_000}, []float64{-5})
		settle(clk)
		a.run(t)
		require.Equal(t, expected(data, 1000*hour), stored(t, a.store, "x", "y"))
	})
}

// gateEngine holds the next Write while armed until it is released: a
// commit in flight.
type gateEngine struct {
	engine.Engine
	armed          atomic.Bool
	held, released chan struct{}
	setService     atomic.Int64
	failSetService atomic.Bool
}

func newGate(eng engine.Engine) *gateEngine {
	return &gateEngine{Engine: eng, held: make(chan struct{}), released: make(chan struct{})}
}

func (g *gateEngine) Write(ctx context.Context, b *engine.Batch) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.held)
		<-g.released
	}
	return g.Engine.Write(ctx, b)
}

func (g *gateEngine) SetServiceValue(ctx context.Context, service, serviceKey, key, value string, writeTime int64) error {
	g.setService.Add(1)
	if g.failSetService.Load() {
		return errors.New("service_index unavailable")
	}
	return g.Engine.SetServiceValue(ctx, service, serviceKey, key, value, writeTime)
}

// inFlight starts a commit of the samples through n's store, held in the
// engine until release is called; release returns the commit's error.
func inFlight(t *testing.T, n *node, gate *gateEngine, ls labels.Labels, ts []int64, vs []float64) (release func() error) {
	t.Helper()
	gate.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		app := n.store.NewAppender()
		for i := range ts {
			if _, err := app.Append(0, ls, ts[i], vs[i]); err != nil {
				done <- err
				return
			}
		}
		done <- app.Commit(context.Background())
	}()
	select {
	case <-gate.held:
	case err := <-done:
		t.Fatalf("the commit returned before its engine write: %v", err)
	}
	return func() error {
		close(gate.released)
		return <-done
	}
}

// TestWriteInFlightAsUnitCloses: a write checks whether its unit is closed,
// and its samples land after the unit closed and the job rolled it up
// without them. The writer's clock is 10 s behind the job's (adapters'
// clocks differ; MarkSlack allows half of it). A write that starts just
// before the close is marked because the unit closes within the slack; one
// that starts earlier and is held longer marks again after it landed.
// Before, the check came after the write, on the writer's clock, which had
// not reached the close yet: no mark, and the unit stayed wrong.
func TestWriteInFlightAsUnitCloses(t *testing.T) {
	for _, c := range []struct {
		name  string
		start int64 // the writer's clock when the write starts, before the close at 1001h10m
	}{
		{"just before the close", 1001*hour + 10*minute - 10_000 - 1},
		{"long before, held", 1001*hour + 10*minute - 10_000 - 25_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
				jobClk, writerClk := &clock{}, &clock{}
				jobClk.set(t0)
				writerClk.set(t0 - 10_000)
				data := testData()
				eng := open(t)
				seed(t, eng, jobClk, data)
				a := newNode(t, eng, jobClk, "a")
				a.run(t)
				gate := newGate(eng)
				b := newNode(t, gate, writerClk, "b")

				// Into the unit ending at 1001h, which closes at
				// 1001h10m on the job's clock.
				writerClk.set(c.start)
				release := inFlight(t, b, gate, data[0].ls, []int64{1000*hour + 30*minute + 1}, []float64{7e9})
				jobClk.set(1001*hour + 10*minute)
				writerClk.set(1001*hour + 10*minute - 10_000)
				a.run(t)
				_, to, _ := done(t, a.store, m5)
				require.Equal(t, 1001*hour, to, "the unit is rolled up without the sample in flight")
				require.NoError(t, release())
				record(data, 0, []int64{1000*hour + 30*minute + 1}, []float64{7e9})

				settle(jobClk)
				a.run(t)
				require.Equal(t, expected(data, 1001*hour), stored(t, a.store, "x", "y"))
			})
		})
	}
}

// TestMarkOutlivesItsRecomputation: the job must not take a mark as done
// while the samples of the write that stored it may not have landed (the
// mark is stored before them): a mark younger than MarkSlack waits, and a
// commit held longer than a quarter of it marks again once it landed. A
// mark stored again while the job is halfway through its range makes the
// job start the range over: the new samples may be in units it has done.
func TestMarkOutlivesItsRecomputation(t *testing.T) {
	engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
		eng := open(t)
		clk, data := seeded(t, eng)
		gate := newGate(eng)
		n := newNode(t, gate, clk, "a", func(c *rollupjob.Config) { c.Span = time.Hour })
		n.run(t)

		// Held for a minute: the job steps meanwhile, first with the
		// mark young, then with it old enough.
		release := inFlight(t, n, gate, data[1].ls, []int64{995*hour + 30*minute}, []float64{1e6})
		n.run(t)
		require.Len(t, marks(t, n), 1, "a young mark waits")
		settle(clk)
		clk.set(clk.ms.Load() + 30_000)
		n.run(t) // recomputes without the sample, and deletes the mark
		require.NoError(t, release())
		record(data, 1, []int64{995*hour + 30*minute}, []float64{1e6})
		require.Len(t, marks(t, n), 1, "marked again after landing")
		settle(clk)
		n.run(t)
		require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "x", "y"))

		// A write over two units (marked with the unit after them: three);
		// the job recomputes the first; a second write into the same
		// units stores the same mark again.
		settle(clk)
		lateWrite(t, n, data, 0, []int64{993*hour + 30*minute, 994*hour + 30*minute}, []float64{1e3, 2e3})
		settle(clk)
		worked, err := n.job.Step(t.Context())
		require.NoError(t, err)
		require.True(t, worked)
		settle(clk)
		lateWrite(t, n, data, 0, []int64{993*hour + 40*minute, 994*hour + 40*minute}, []float64{1.5e3, 2.5e3})
		settle(clk)
		n.run(t)
		require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "x", "y"))
		require.Empty(t, marks(t, n))
	})
}

// TestFailedMarkFailsWrite: a late write whose mark cannot be stored fails
// with nothing stored (the adapter answers 5xx and Prometheus sends it
// again), and a write of the present stores no mark at all: the common
// case costs no round trip.
func TestFailedMarkFailsWrite(t *testing.T) {
	eng := openPebble(t)
	clk, data := seeded(t, eng)
	gate := newGate(eng)
	n := newNode(t, gate, clk, "a")
	n.run(t)
	gate.failSetService.Store(true)
	before := gate.setService.Load()

	app := n.store.NewAppender()
	_, err := app.Append(0, data[0].ls, 999*hour+30_001, 1)
	require.NoError(t, err)
	require.ErrorContains(t, app.Commit(t.Context()), "service_index unavailable")
	q, err := n.store.Querier(999*hour+30_001, 999*hour+30_001)
	require.NoError(t, err)
	set := q.Select(t.Context(), false, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "x"))
	for set.Next() {
		require.Equal(t, chunkenc.ValNone, set.At().Iterator(nil).Next(), "nothing stored")
	}
	require.NoError(t, set.Err())
	require.NoError(t, q.Close())

	// Writes of the present: into the open unit, up to the slack before
	// its close (with the default --rollup.delay, every write of the
	// present).
	calls := gate.setService.Load()
	for _, ts := range []int64{t0, 1000*hour + 1, 1001 * hour} {
		clk.set(max(ts, t0))
		app := n.store.NewAppender()
		_, err := app.Append(0, data[0].ls, ts, 1)
		require.NoError(t, err)
		require.NoError(t, app.Commit(t.Context()))
	}
	clk.set(1001*hour + 10*minute - 30_000 - 1) // the slack before the close
	app = n.store.NewAppender()
	_, err = app.Append(0, data[0].ls, 1000*hour+1, 2)
	require.NoError(t, err)
	require.NoError(t, app.Commit(t.Context()))
	require.Equal(t, calls, gate.setService.Load(), "no mark for writes of the present")
	require.Greater(t, calls, before)
}

// TestMarkOfHostileTimes: a late write at Prometheus's minimum time (which
// the layout holds), with NaN, ±Inf and 1e300 among its values, marks
// every unit from then to the present; the job recomputes the units it has
// done within a step each and deletes the mark, rather than walking the
// 2.5·10^12 hours before them one by one. A write at the maximum time
// marks nothing.
func TestMarkOfHostileTimes(t *testing.T) {
	eng := openPebble(t)
	clk, data := seeded(t, eng)
	gate := newGate(eng)
	n := newNode(t, gate, clk, "a")
	n.run(t)

	promMin := int64(math.MinInt64/1000+62135596801) * 1000 // -292273086-05-16T16:47:06Z
	promMax := int64(math.MaxInt64/1000-62135596801) * 1000 // 292277025-08-18T07:12:54Z
	before := gate.setService.Load()
	lateWrite(t, n, data, 1, []int64{promMax}, []float64{1})
	require.Equal(t, before, gate.setService.Load(), "a write at the maximum time marks nothing")
	lateWrite(t, n, data, 1, []int64{promMin, 994*hour + 1, 995*hour + 1, 996*hour + 1}, []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300})
	require.Len(t, marks(t, n), 1)
	settle(clk)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := 0; len(marks(t, n)) > 0; i++ {
		require.Less(t, i, 30, "the mark is done within a step per unit done")
		_, err := n.job.Step(ctx)
		require.NoError(t, err)
	}
	got := stored(t, n.store, "x")
	for _, want := range expected(data, 1000*hour) {
		if strings.Contains(want, `saved_from="x"`) && !strings.Contains(want, "@-") {
			require.Contains(t, got, want)
		}
	}
}
