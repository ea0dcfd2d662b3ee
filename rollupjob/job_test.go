package rollupjob_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/rollup"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

const (
	minute = int64(60_000)
	hour   = 60 * minute
)

var (
	m5 = rollup.Resolution(5 * time.Minute)
	h1 = rollup.Resolution(time.Hour)
)

// engines runs a test on the embedded engine and on the Cassandra node.
func engines(t *testing.T, test func(t *testing.T, open func(t *testing.T) engine.Engine)) {
	t.Run("pebble", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		var once sync.Once
		var eng *pebblekv.Engine
		test(t, func(t *testing.T) engine.Engine {
			// One engine per test: the embedded store locks its
			// directory, so two stores share one engine.
			once.Do(func() {
				var err error
				eng, err = pebblekv.Open(dir, pebblekv.Options{}, nil)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, eng.Close()) })
				require.NoError(t, eng.Setup(t.Context()))
			})
			return eng
		})
	})
	t.Run("cassandra", func(t *testing.T) {
		t.Parallel()
		addr, keyspace := cassandratest.Keyspace(t)
		test(t, func(t *testing.T) engine.Engine { return openCassandra(t, addr, keyspace) })
	})
}

// openCassandra is an engine on the test node's keyspace, set up; each call
// is one more adapter's connection.
func openCassandra(t testing.TB, addr, keyspace string) *cql.Engine {
	t.Helper()
	eng := cassandratest.Engine(t, addr, keyspace)
	require.NoError(t, eng.Setup(t.Context()))
	return eng
}

// clock is a settable clock.
type clock struct{ ms atomic.Int64 }

func (c *clock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }
func (c *clock) set(ms int64)   { c.ms.Store(ms) }

// node is one adapter: a store over an engine, and its rollupjob.
type node struct {
	store *kairosstore.Store
	job   *rollupjob.Job
	reg   *prometheus.Registry
}

// t0 is the test's present: the unit ending at 1000h closed at 1000h10m.
const t0 = 1000*hour + 15*minute

// guard is the store's Guard: the job, once it exists (as Runner is,
// without its check for a job not created yet).
type guard struct{ j atomic.Pointer[rollupjob.Job] }

func (g *guard) BeforeChange(ctx context.Context, cs []kairosstore.Change) error {
	return g.j.Load().BeforeChange(ctx, cs)
}

func (g *guard) AfterChange(ctx context.Context, cs []kairosstore.Change, began time.Time) error {
	return g.j.Load().AfterChange(ctx, cs, began)
}

func newNode(t *testing.T, eng engine.Engine, clk *clock, owner string, mod ...func(*rollupjob.Config)) *node {
	t.Helper()
	n := &node{reg: prometheus.NewRegistry()}
	j := &guard{}
	st, err := kairosstore.Open(t.Context(), eng, kairosstore.Options{Now: clk.Now, Guard: j}, nil, prometheus.NewRegistry())
	require.NoError(t, err)
	cfg := rollupjob.Config{
		Resolutions: []rollup.Resolution{m5, h1}, Delay: 10 * time.Minute,
		Owner: owner, Now: clk.Now, CommitCells: 100,
	}
	for _, f := range mod {
		f(&cfg)
	}
	jb, err := rollupjob.New(st, cfg, nil, n.reg)
	require.NoError(t, err)
	j.j.Store(jb)
	n.store, n.job = st, jb
	return n
}

// seed writes data through a store without a job, as KairosDB or an
// adapter before rollups would have.
// seeded is the clock at t0 and testData written into eng, the start of
// most tests here.
func seeded(t *testing.T, eng engine.Engine) (*clock, []series) {
	clk := &clock{}
	clk.set(t0)
	data := testData()
	seed(t, eng, clk, data)
	return clk, data
}

func seed(t *testing.T, eng engine.Engine, clk *clock, data []series) {
	t.Helper()
	st, err := kairosstore.Open(t.Context(), eng, kairosstore.Options{Now: clk.Now}, nil, prometheus.NewRegistry())
	require.NoError(t, err)
	write(t, st, data)
}

// run steps the job until it has nothing left to do, and returns the steps
// that worked.
func (n *node) run(t *testing.T) int {
	t.Helper()
	for i := 0; ; i++ {
		require.Less(t, i, 10000, "the job does not finish")
		worked, err := n.job.Step(t.Context())
		require.NoError(t, err)
		if !worked {
			return i
		}
	}
}

// series is raw samples of one series.
type series struct {
	ls labels.Labels
	ts []int64
	vs []float64
}

// testData: a counter with a reset and a stale marker, a gauge with NaN, a
// sparse series, and one that stops, over (990h, 1000h] plus a few samples
// in (1000h, t0], which are not rolled up yet.
func testData() []series { return testDataAt(0) }

// testDataAt is testData moved by shift ms.
func testDataAt(shift int64) []series {
	out := testDataUnshifted()
	for i := range out {
		for k := range out[i].ts {
			out[i].ts[k] += shift
		}
	}
	return out
}

func testDataUnshifted() []series {
	var out []series
	counter := series{ls: labels.FromStrings("__name__", "x", "job", "a", "kind", "counter")}
	gauge := series{ls: labels.FromStrings("__name__", "x", "job", "b", "kind", "gauge")}
	sparse := series{ls: labels.FromStrings("__name__", "y", "job", "a")}
	stops := series{ls: labels.FromStrings("__name__", "x", "job", "c")}
	c := 0.0
	for t := 990*hour + 30_000; t <= t0; t += 30_000 {
		c += float64(t%7) + 1
		if t == 995*hour+7*minute {
			c = 3 // a reset
		}
		v := c
		if t == 996*hour+30_000 {
			v = math.Float64frombits(value.StaleNaN)
		}
		counter.ts, counter.vs = append(counter.ts, t), append(counter.vs, v)
		g := math.Sin(float64(t) / 1e6)
		if t%(17*minute) == 0 {
			g = math.NaN()
		}
		gauge.ts, gauge.vs = append(gauge.ts, t), append(gauge.vs, g)
		if t%(47*minute) == 0 {
			sparse.ts, sparse.vs = append(sparse.ts, t), append(sparse.vs, float64(t/minute))
		}
		if t < 993*hour+20*minute {
			stops.ts, stops.vs = append(stops.ts, t), append(stops.vs, -float64(t%1000))
		}
	}
	return append(out, counter, gauge, sparse, stops)
}

func write(t *testing.T, st *kairosstore.Store, data []series) {
	t.Helper()
	app := st.NewAppender()
	for _, s := range data {
		for i, ts := range s.ts {
			_, err := app.Append(0, s.ls, ts, s.vs[i])
			require.NoError(t, err)
		}
	}
	require.NoError(t, app.Commit(t.Context()))
}

// expected is every rollup cell of data with bucket end at or before to,
// as "labels @t value" lines, computed by rollup.Compute over each series
// whole.
func expected(data []series, to int64) []string {
	var out []string
	for _, s := range data {
		for _, r := range []rollup.Resolution{m5, h1} {
			for _, p := range rollup.Compute(r, math.MinInt64+1, to, s.ts, s.vs) {
				for _, a := range rollup.Aggregates {
					out = append(out, cell(rollup.SeriesLabels(s.ls, r, a), p.End, p.Value(a)))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func cell(ls labels.Labels, t int64, v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if math.IsNaN(v) {
		s = "NaN" // Sum's NaN need not keep a payload
	}
	return fmt.Sprintf("%s @%d %s", ls, t, s)
}

// stored is every cell of the rollup series of metrics as the store serves
// them, in expected's form.
func stored(t *testing.T, st *kairosstore.Store, metrics ...string) []string {
	t.Helper()
	q, err := st.Querier(0, math.MaxInt64)
	require.NoError(t, err)
	defer q.Close()
	var out []string
	for _, m := range metrics {
		set := q.Select(t.Context(), true, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, m+rollup.NameSuffix))
		var it chunkenc.Iterator
		for set.Next() {
			it = set.At().Iterator(it)
			for it.Next() == chunkenc.ValFloat {
				ts, v := it.At()
				out = append(out, cell(set.At().Labels(), ts, v))
			}
			require.NoError(t, it.Err())
		}
		require.NoError(t, set.Err())
	}
	sort.Strings(out)
	return out
}

func done(t *testing.T, st *kairosstore.Store, r rollup.Resolution) (int64, int64, bool) {
	t.Helper()
	v, ok, err := st.ServiceValue(t.Context(), rollup.Service, rollup.ServiceKey, rollup.DoneKey(r))
	require.NoError(t, err)
	if !ok {
		return 0, 0, false
	}
	from, to, err := rollup.ParseDone(v)
	require.NoError(t, err)
	return from, to, true
}

func buckets(n *node, r rollup.Resolution) int {
	return int(counter(n, "kairos_adapter_rollup_buckets_written_total", r.String()))
}

// counter is the value of the counter name with one label of value label,
// or with no label for "".
func counter(n *node, name, label string) float64 {
	mfs, err := n.reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" && len(m.GetLabel()) == 0 || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestRollup: a job started on a keyspace of ten hours of data rolls up
// the latest closed unit first, then backfills down to the oldest row, and
// every cell is rollup.Compute's over the raw series; the samples after the
// latest closed unit wait.
func TestRollup(t *testing.T) {
	engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
		clk := &clock{}
		clk.set(t0)
		eng := open(t)
		data := testData()
		seed(t, eng, clk, data)
		n := newNode(t, eng, clk, "a")

		worked, err := n.job.Step(t.Context())
		require.NoError(t, err)
		require.True(t, worked)
		from, to, ok := done(t, n.store, m5)
		require.True(t, ok)
		require.Equal(t, [2]int64{999*hour + 5*minute, 1000 * hour}, [2]int64{from, to}, "the latest closed unit first")

		n.run(t)
		want := expected(data, 1000*hour)
		require.Equal(t, want, stored(t, n.store, "x", "y"))
		for _, r := range []rollup.Resolution{m5, h1} {
			from, to, ok := done(t, n.store, r)
			require.True(t, ok)
			require.Equal(t, 990*hour+r.Millis(), from, "backfill stops at the unit of the oldest sample")
			require.Equal(t, 1000*hour, to)
		}
		require.Equal(t, len(want)/5, buckets(n, m5)+buckets(n, h1), "each bucket written once")

		// The next unit closes: forward rolls it up (and backfill looks
		// at one unit more, as the rollup metrics are new to its list).
		clk.set(1001*hour + 10*minute)
		require.Positive(t, n.run(t))
		require.Equal(t, expected(data, 1001*hour), stored(t, n.store, "x", "y"))
		_, to, _ = done(t, n.store, m5)
		require.Equal(t, 1001*hour, to)
	})
}

// TestReadsEachSampleOnce: the backfill rolls up a day's span of units per
// read of a metric, so it reads each raw sample about once, not once for
// its unit and again for the counters' start of the unit after it.
func TestReadsEachSampleOnce(t *testing.T) {
	clk := &clock{}
	clk.set(t0)
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	require.NoError(t, eng.Setup(t.Context()))
	data := testData()
	seed(t, eng, clk, data)
	rolled := 0 // samples at or before the latest closed unit's end
	for _, s := range data {
		for _, ts := range s.ts {
			if ts <= 1000*hour {
				rolled++
			}
		}
	}
	for _, c := range []struct {
		span            time.Duration
		atMost, atLeast float64
	}{
		{span: 0, atMost: 1.2},                     // the default: a day
		{span: time.Hour, atMost: 2, atLeast: 1.7}, // a unit per read
	} {
		n := newNode(t, eng, clk, fmt.Sprint("span", c.span), func(cfg *rollupjob.Config) { cfg.Span = c.span })
		clk.set(clk.ms.Load() + time.Minute.Milliseconds()) // after the last run's writes
		for _, r := range []rollup.Resolution{m5, h1} {
			require.NoError(t, n.store.DeleteServiceValue(t.Context(), rollup.Service, rollup.ServiceKey, rollup.DoneKey(r), clk.Now().UnixMilli()))
		}
		require.NoError(t, n.store.DeleteServiceValue(t.Context(), rollup.Service, rollup.ServiceKey, "lease", clk.Now().UnixMilli()))
		clk.set(clk.ms.Load() + 1)
		n.run(t)
		require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "x", "y"))
		read := counter(n, "kairos_adapter_rollup_raw_samples_read_total", "") / float64(rolled)
		t.Logf("span %v: %.2f reads per raw sample", c.span, read)
		require.LessOrEqual(t, read, c.atMost)
		require.GreaterOrEqual(t, read, c.atLeast)
	}
}

// TestRestartMidBackfill: a job stopped in the middle of its backfill and
// a new one started on the keyspace (a restarted adapter) continue from
// the stored progress: every bucket is written, none twice.
func TestRestartMidBackfill(t *testing.T) {
	engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
		clk := &clock{}
		clk.set(t0)
		data := testData()
		seed(t, open(t), clk, data)
		hourly := func(c *rollupjob.Config) { c.Span = time.Hour } // one unit per step
		a := newNode(t, open(t), clk, "a", hourly)
		for range 4 { // the latest unit and three of the backfill
			worked, err := a.job.Step(t.Context())
			require.NoError(t, err)
			require.True(t, worked)
		}
		from, to, _ := done(t, a.store, m5)
		require.Equal(t, [2]int64{996*hour + 5*minute, 1000 * hour}, [2]int64{from, to})

		// The restarted process: a new store and job, nothing in memory.
		b := newNode(t, open(t), clk, "b", hourly)
		clk.set(t0 + 2*time.Minute.Milliseconds()) // a's lease has expired
		b.run(t)
		want := expected(data, 1000*hour)
		require.Equal(t, want, stored(t, b.store, "x", "y"))
		from, to, _ = done(t, b.store, m5)
		require.Equal(t, [2]int64{990*hour + 5*minute, 1000 * hour}, [2]int64{from, to})
		require.Equal(t, len(want)/5, buckets(a, m5)+buckets(a, h1)+buckets(b, m5)+buckets(b, h1),
			"no bucket written twice, none left out")
		require.Positive(t, buckets(a, m5))
		require.Positive(t, buckets(b, m5))
	})
}

// settle moves the clock past the default rollupjob.Config.MarkSlack: the job
// leaves a write's or a delete's mark alone until then.
func settle(clk *clock) { clk.set(clk.ms.Load() + 31*time.Second.Milliseconds()) }

// TestLateWriteAndDelete: a sample written into a rolled-up bucket, and
// deletes of part of a series and of a whole metric, are reflected in the
// rollups at the next steps; buckets left without samples are deleted,
// the others overwritten in place.
func TestLateWriteAndDelete(t *testing.T) {
	engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
		eng := open(t)
		clk, data := seeded(t, eng)
		n := newNode(t, eng, clk, "a")
		n.run(t)
		require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "x", "y"))

		// A late sample of the counter, a new value at the end of the
		// unit ending at 994h: its buckets change, and so does the first
		// bucket of the next unit, whose increase starts from it.
		late := 994 * hour
		app := n.store.NewAppender()
		_, err := app.Append(0, data[0].ls, late, 1e9)
		require.NoError(t, err)
		require.NoError(t, app.Commit(t.Context()))
		data[0].vs[slices.Index(data[0].ts, late)] = 1e9
		require.NotEqual(t, expected(data, 1000*hour), stored(t, n.store, "x", "y"))
		settle(clk)
		n.run(t)
		require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "x", "y"))
		require.Positive(t, counter(n, "kairos_adapter_rollup_recomputations_total", "write"))

		// Part of one series deleted: its buckets in the range go.
		_, err = n.store.Delete(t.Context(), 992*hour-2*minute, 993*hour+7*minute,
			labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "x"), labels.MustNewMatcher(labels.MatchEqual, "job", "c"))
		require.NoError(t, err)
		keep := data[3].ts[:0:0]
		var keepV []float64
		for i, ts := range data[3].ts {
			if ts < 992*hour-2*minute || ts > 993*hour+7*minute {
				keep, keepV = append(keep, ts), append(keepV, data[3].vs[i])
			}
		}
		data[3].ts, data[3].vs = keep, keepV
		settle(clk)
		n.run(t)
		require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "x", "y"))

		// A whole metric deleted, index rows and name included.
		_, err = n.store.Delete(t.Context(), math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "y"))
		require.NoError(t, err)
		data = slices.Delete(data, 2, 3)
		settle(clk)
		n.run(t)
		require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "x", "y"))
		require.Positive(t, counter(n, "kairos_adapter_rollup_recomputations_total", "delete"))
		var marks []string
		require.NoError(t, n.store.ServiceKeys(t.Context(), rollup.Service, rollup.ServiceKey, "dirty.", func(k string) error {
			marks = append(marks, k)
			return nil
		}))
		require.Empty(t, marks, "marks are deleted once done")
	})
}

// TestTwoJobs: two adapters on one keyspace, each running its rollupjob. One
// holds the lease and rolls up, the other stands by; when the holder stops,
// the other takes over where it stopped. Where both roll up the same units
// anyway (a lease lost mid-unit), they write identical cells.
func TestTwoJobs(t *testing.T) {
	engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
		clk := &clock{}
		clk.set(t0)
		data := testData()
		seed(t, open(t), clk, data)
		fast := func(c *rollupjob.Config) { c.Interval, c.DutyCycle = 5*time.Millisecond, 1 }
		a := newNode(t, open(t), clk, "a", fast)
		b := newNode(t, open(t), clk, "b", fast)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for _, n := range []*node{a, b} {
			wg.Go(func() { n.job.Run(ctx) })
		}
		require.Eventually(t, func() bool {
			from, _, ok := done(t, a.store, m5)
			return ok && from == 990*hour+5*minute
		}, time.Minute, 10*time.Millisecond)
		cancel()
		wg.Wait()
		want := expected(data, 1000*hour)
		require.Equal(t, want, stored(t, a.store, "x", "y"))
		la, lb := buckets(a, m5)+buckets(a, h1), buckets(b, m5)+buckets(b, h1)
		// Without conditional writes both may take the lease at once;
		// the one whose lease the keyspace did not keep stands down at its
		// next step, so at most the first unit (a tenth of the buckets
		// here) is rolled up twice.
		all := len(want) / 5
		require.GreaterOrEqual(t, la+lb, all)
		require.LessOrEqual(t, la+lb, all+all/8, "each bucket once, but the first unit")
		require.LessOrEqual(t, min(la, lb), all/8, "one job did the work: a wrote %d buckets, b %d", la, lb)

		// Run gave the lease up on its way out: whoever steps first
		// next holds it. b steps on alone into the next unit.
		clk.set(1001*hour + 10*minute)
		before := buckets(b, m5)
		require.Positive(t, b.run(t))
		require.Greater(t, buckets(b, m5), before)
		require.Equal(t, expected(data, 1001*hour), stored(t, a.store, "x", "y"))

		// Both roll up every unit (as if each lost the lease in turn
		// in the middle): the cells are the same.
		first := stored(t, a.store, "x", "y")
		for _, n := range []*node{a, b} {
			for _, r := range []rollup.Resolution{m5, h1} {
				require.NoError(t, n.store.DeleteServiceValue(t.Context(), rollup.Service, rollup.ServiceKey, rollup.DoneKey(r), clk.Now().UnixMilli()+1))
			}
			require.NoError(t, n.store.DeleteServiceValue(t.Context(), rollup.Service, rollup.ServiceKey, "lease", clk.Now().UnixMilli()+1))
			clk.set(clk.ms.Load() + 2) // after the deletes
			n.run(t)
			require.Equal(t, first, stored(t, a.store, "x", "y"))
			require.Equal(t, first, stored(t, b.store, "x", "y"))
		}
	})
}

// panicEngine panics in every RowTimes while armed: a bug, or a row no
// codec expected, met on the job's own goroutine.
type panicEngine struct {
	engine.Engine
	armed atomic.Bool
}

func (e *panicEngine) RowTimes(ctx context.Context, metric string, lo, hi int64, fn func(int64) error) error {
	if e.armed.Load() {
		panic("no codec expected this")
	}
	return e.Engine.RowTimes(ctx, metric, lo, hi, fn)
}

// TestPanicInAStepIsRetried: a step that panics counts as a failed step
// and is retried after the interval, as one that errs; the job rolls up
// once the panics stop. Before the recover, the panic ended the test
// binary.
func TestPanicInAStepIsRetried(t *testing.T) {
	clk := &clock{}
	clk.set(t0)
	eng := &panicEngine{Engine: openPebble(t)}
	data := testData()
	seed(t, eng, clk, data)
	n := newNode(t, eng, clk, "a", func(c *rollupjob.Config) { c.Interval = time.Millisecond })
	eng.armed.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		n.job.Run(ctx)
	}()
	require.Eventually(t, func() bool { return counter(n, "kairos_adapter_rollup_errors_total", "") >= 2 },
		10*time.Second, time.Millisecond, "panicking steps count as failed")
	require.Zero(t, buckets(n, m5))
	eng.armed.Store(false)
	require.Eventually(t, func() bool {
		_, to, ok := done(t, n.store, m5)
		return ok && to == 1000*hour
	}, 10*time.Second, 10*time.Millisecond, "the job rolls up once the panics stop")
	cancel()
	<-stopped
}

func openPebble(t *testing.T) engine.Engine {
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	require.NoError(t, eng.Setup(t.Context()))
	return eng
}

// TestUnknownMetricBackfilledAtOnce: the history of a metric the job's
// last listing did not hold, written through the adapter (a fresh
// adapter's first writes, an import), is rolled up at the job's next step.
// Before, the job learnt of the metric only at its next listing, up to ten
// minutes later (seen on Cassandra: 90 days written at 22:44, backfill
// from 22:54).
func TestUnknownMetricBackfilledAtOnce(t *testing.T) {
	engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
		eng := open(t)
		clk, data := seeded(t, eng)
		n := newNode(t, eng, clk, "a")
		n.run(t)
		require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "x", "y"))

		// Five hours older than anything the job has rolled up, and one
		// inside its done range.
		z := series{ls: labels.FromStrings("__name__", "z", "job", "a")}
		for ts := 985 * hour; ts < 991*hour; ts += minute {
			z.ts, z.vs = append(z.ts, ts), append(z.vs, float64(ts/minute%97))
		}
		clk.set(t0 + time.Minute.Milliseconds()) // well within the listing's ten minutes
		write(t, n.store, []series{z})
		worked, err := n.job.Step(t.Context())
		require.NoError(t, err)
		require.True(t, worked, "the new metric's history is work for the next step")
		from, _, _ := done(t, n.store, m5)
		require.Equal(t, 984*hour+5*minute, from, "backfilled down to the new metric's oldest sample (985h ends the unit (984h, 985h])")
		// Its unit inside the done range is marked; the mark is done
		// once it is old enough.
		settle(clk)
		n.run(t)
		data = append(data, z)
		require.Equal(t, expected(data, 1000*hour), stored(t, n.store, "x", "y", "z"))
	})
}
