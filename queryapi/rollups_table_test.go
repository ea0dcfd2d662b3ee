package queryapi

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/internal/rolluptest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/rollup"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

// tableDays of data: gauges and counters, dense (60 s to 150 s) and sparse
// (5 m; 15 m irregular), counters that reset, series that start and stop.
const tableDays = 62

func tableData(t0 int64) []rolluptest.Series {
	rnd := rand.New(rand.NewPCG(1, 2))
	day := int64(24 * time.Hour / time.Millisecond)
	end := t0 + tableDays*day
	var out []rolluptest.Series
	add := func(ls labels.Labels, from, to, every int64, jitter bool, value func(i int, t int64) float64) {
		s := rolluptest.Series{Labels: ls}
		i := 0
		for t := from; t < to; t += every {
			ts := t
			if jitter {
				ts += rnd.Int64N(every / 2)
			}
			s.T, s.V = append(s.T, ts), append(s.V, value(i, ts))
			i++
		}
		out = append(out, s)
	}
	gauge := func(i int, t int64) float64 { return 50 + 40*math.Sin(float64(t)/3.7e6) + 5*rnd.Float64() }
	counter := func(perSample float64, resetEvery int) func(int, int64) float64 {
		v := 0.0
		return func(i int, _ int64) float64 {
			if i > 0 && i%resetEvery == 0 {
				v = 0
			}
			v += perSample * (0.98 + 0.04*rnd.Float64())
			return v
		}
	}
	add(labels.FromStrings("__name__", "g", "job", "a", "inst", "1"), t0+7_000, end, 60_000, false, gauge)
	add(labels.FromStrings("__name__", "g", "job", "a", "inst", "2"), t0+31_000, end, 5*60_000, false, gauge)
	add(labels.FromStrings("__name__", "g", "job", "b", "inst", "3"), t0, end, 15*60_000, true, gauge)
	add(labels.FromStrings("__name__", "g", "job", "b", "inst", "4"), t0+10*day+123_000, t0+40*day, 120_000, false, gauge)
	add(labels.FromStrings("__name__", "c_total", "job", "a", "inst", "1"), t0+11_000, end, 60_000, false, counter(90, 9*1440+17))
	add(labels.FromStrings("__name__", "c_total", "job", "a", "inst", "2"), t0+43_000, end, 150_000, false, counter(30, 5*576+3))
	add(labels.FromStrings("__name__", "c_total", "job", "b", "inst", "5"), t0+20*day+5_000, t0+50*day, 120_000, false, counter(10, 1<<30))
	return out
}

// rollupCase is one expression of the table: exact (equal to raw within
// Prometheus's float tolerance), or a rate within 1 % of raw.
type rollupCase struct {
	q      string
	step   time.Duration
	approx bool
	rollup bool // reads rollups (else only windows)
}

var rollupCases = []rollupCase{
	{q: `max_over_time(g[8h])`, step: 8 * time.Hour, rollup: true},
	{q: `min_over_time(g[8h])`, step: 8 * time.Hour, rollup: true},
	{q: `sum_over_time(g[8h])`, step: 8 * time.Hour, rollup: true},
	{q: `count_over_time(g[8h])`, step: 8 * time.Hour, rollup: true},
	{q: `avg_over_time(g[8h])`, step: 8 * time.Hour, rollup: true},
	{q: `max_over_time(g[1d])`, step: 24 * time.Hour, rollup: true},
	{q: `min_over_time(g[1d])`, step: 24 * time.Hour, rollup: true},
	{q: `sum_over_time(g[1d])`, step: 24 * time.Hour, rollup: true},
	{q: `count_over_time(g[1d])`, step: 24 * time.Hour, rollup: true},
	{q: `avg_over_time(g[1d])`, step: 24 * time.Hour, rollup: true},
	{q: `max_over_time(g[1h])`, step: 6 * time.Hour, rollup: true},
	{q: `min_over_time(g[2h])`, step: 12 * time.Hour, rollup: true},
	{q: `sum_over_time(g[30m])`, step: 2 * time.Hour, rollup: true},
	{q: `count_over_time(g[30m])`, step: 2 * time.Hour, rollup: true},
	{q: `avg_over_time(g[30m])`, step: 2 * time.Hour, rollup: true},
	{q: `max by (job) (max_over_time(g[8h]))`, step: 8 * time.Hour, rollup: true},
	{q: `sum by (job) (sum_over_time(g[1d]))`, step: 24 * time.Hour, rollup: true},
	{q: `sum(count_over_time(g[1d]))`, step: 24 * time.Hour, rollup: true},
	{q: `avg_over_time(g{job="b"}[1d])`, step: 24 * time.Hour, rollup: true},
	{q: `max_over_time(g[8h] offset 1d)`, step: 8 * time.Hour, rollup: true},
	{q: `min_over_time(g[8h] offset 2h)`, step: 8 * time.Hour, rollup: true},
	{q: `count_over_time(c_total[8h])`, step: 8 * time.Hour, rollup: true},
	{q: `max_over_time(c_total[1d])`, step: 24 * time.Hour, rollup: true},
	{q: `sum_over_time(g[8h]) - sum_over_time(g[8h] offset 8h)`, step: 8 * time.Hour, rollup: true},
	{q: `max_over_time(g[8h]) > 80`, step: 8 * time.Hour, rollup: true},
	{q: `avg_over_time(g[1d]) * 2 + 1`, step: 24 * time.Hour, rollup: true},
	{q: `topk(2, max_over_time(g[1d]))`, step: 24 * time.Hour, rollup: true},
	{q: `count_over_time(g{inst="4"}[8h])`, step: 8 * time.Hour, rollup: true},
	{q: `max_over_time(g{inst="3"}[1d])`, step: 24 * time.Hour, rollup: true},
	{q: `quantile by (job) (0.5, avg_over_time(g[8h]))`, step: 8 * time.Hour, rollup: true},
	{q: `2 ^ (avg_over_time(g[8h]) / 100)`, step: 8 * time.Hour, rollup: true},
	{q: `rate(c_total{job="a"}[8h])`, step: 8 * time.Hour, approx: true, rollup: true},
	{q: `increase(c_total{job="a"}[1d])`, step: 24 * time.Hour, approx: true, rollup: true},
	{q: `sum by (job) (rate(c_total{job="a"}[8h1m]))`, step: 8 * time.Hour, approx: true, rollup: true},
	{q: `rate(c_total{job="a"}[4h])`, step: 6 * time.Hour, approx: true, rollup: true},
	{q: `increase(c_total{job="a"}[2h])`, step: 2 * time.Hour, approx: true, rollup: true},
	{q: `rate(c_total{job="a"}[1d])`, step: 8 * time.Hour, approx: true, rollup: true},
	{q: `sum(increase(c_total{job="a"}[1d]))`, step: 24 * time.Hour, approx: true, rollup: true},
	{q: `rate(c_total{job="a"}[1h])`, step: 8 * time.Hour, approx: true, rollup: true},
	// Grafana's year: $__interval 6h, $__rate_interval 6h plus a scrape.
	{q: `max_over_time(g[6h])`, step: 6 * time.Hour, rollup: true},
	{q: `avg by (job) (avg_over_time(g[6h]))`, step: 6 * time.Hour, rollup: true},
	{q: `avg_over_time(g[6h] offset 1d)`, step: 6 * time.Hour, rollup: true},
	{q: `avg_over_time(g[1h])`, step: 6 * time.Hour, rollup: true},
	{q: `avg_over_time(g{job="b"}[5m])`, step: time.Hour, rollup: true},
	{q: `sum by (job) (rate(c_total[6h2m30s]))`, step: 6 * time.Hour, approx: true, rollup: true},
	{q: `increase(c_total{job="b"}[6h])`, step: 6 * time.Hour, approx: true, rollup: true},
	{q: `rate(c_total[5m])`, step: 8 * time.Hour},
	{q: `irate(c_total[5m])`, step: 8 * time.Hour},
	{q: `g`, step: 8 * time.Hour},
	{q: `last_over_time(g[10m])`, step: 6 * time.Hour},
	{q: `deriv(g[30m])`, step: 8 * time.Hour},
	{q: `max_over_time(g[7m])`, step: 8 * time.Hour},
	{q: `sum by (job) (rate(c_total[5m]))`, step: 8 * time.Hour},
	{q: `rate(c_total[5m] offset 3m)`, step: 8 * time.Hour},
	{q: `g offset 1h`, step: 3 * time.Hour},
}

// TestRollupTable evaluates each expression over 62 days through the query
// API twice: over raw samples (max_source_resolution=0) and with the plans
// (rollups where they apply, windows otherwise), and requires the same
// series and steps with equal values, or rates within 1 % of raw that are
// never negative nor above the largest raw rate.
func TestRollupTable(t *testing.T) {
	if testing.Short() {
		cassandratest.SkipUnlessCI(t, "62 days of samples, not under -short")
	}
	for _, name := range []string{"pebble", "cassandra"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rollupTable(t, openEngine(t, name), 0, tableDays, false)
		})
	}
	// The rollups as the rollup job writes them, backfilling the 62 days
	// (on pebble: the job's own tests cover its cells on Cassandra).
	t.Run("pebble-job", func(t *testing.T) {
		t.Parallel()
		rollupTable(t, openEngine(t, "pebble"), 0, tableDays, true)
	})
}

// openEngine opens a fresh engine: pebble in a temporary directory, or
// cassandra in a keyspace of its own on the test node.
func openEngine(tb testing.TB, name string) engine.Engine {
	var eng engine.Engine
	if name == "pebble" {
		p, err := pebblekv.Open(tb.TempDir(), pebblekv.Options{}, nil)
		require.NoError(tb, err)
		tb.Cleanup(func() { require.NoError(tb, p.Close()) })
		eng = p
	} else {
		addr, keyspace := cassandratest.Keyspace(tb)
		eng = cassandratest.Engine(tb, addr, keyspace)
	}
	require.NoError(tb, eng.Setup(context.Background()))
	return eng
}

// TestRollupTableStitched is the table with rollups done for days 20 to 40
// only: the raw samples before and after are stitched on without a gap or
// an overlap, or the sums and counts would differ from raw.
func TestRollupTableStitched(t *testing.T) {
	if testing.Short() {
		cassandratest.SkipUnlessCI(t, "62 days of samples, not under -short")
	}
	t.Parallel()
	rollupTable(t, openEngine(t, "pebble"), 20, 40, false)
}

// rollupTable writes tableData, its rollups for the bucket ends in days
// [doneFrom, doneTo] (or, withJob, those the rollup job writes for all of
// it), and evaluates rollupCases.
func rollupTable(t *testing.T, eng engine.Engine, doneFrom, doneTo int64, withJob bool) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	st, err := kairosstore.Open(ctx, eng, kairosstore.Options{RowWidth: 7 * 24 * time.Hour}, nil, reg)
	require.NoError(t, err)
	day := int64(24 * time.Hour / time.Millisecond)
	t0 := 1_700_000_000_000 / day * day
	data := tableData(t0)
	for _, s := range data {
		app := st.NewAppender()
		for i := range s.T {
			require.NoError(t, errOf(app.Append(0, s.Labels, s.T[i], s.V[i])))
		}
		require.NoError(t, app.Commit(ctx))
	}
	if withJob {
		// Its clock an hour after the data ends: it rolls up the last
		// unit, then backfills to the first sample.
		j, err := rollupjob.New(st, rollupjob.Config{Resolutions: testResolutions, Owner: "table", DutyCycle: 1,
			Now: func() time.Time { return time.UnixMilli(t0 + tableDays*day + time.Hour.Milliseconds()) }}, nil, prometheus.NewRegistry())
		require.NoError(t, err)
		for {
			worked, err := j.Step(ctx)
			require.NoError(t, err)
			if !worked {
				break
			}
		}
		from, to, err := doneRange(ctx, eng, testResolutions[0])
		require.NoError(t, err)
		require.LessOrEqual(t, from, t0+day, "backfilled to the first sample")
		require.GreaterOrEqual(t, to, t0+tableDays*day-time.Hour.Milliseconds(), "rolled up to the last unit")
	} else {
		require.NoError(t, rolluptest.Write(ctx, st, eng, testResolutions, t0+doneFrom*day, t0+doneTo*day, data))
	}
	h := mount(New(st, Options{RollupResolutions: testResolutions}, nil, prometheus.NewRegistry()), http.NotFoundHandler())

	// The truth: Prometheus's engine over the store, no plan.
	truthEngine := promql.NewEngine(promql.EngineOpts{MaxSamples: math.MaxInt, Timeout: time.Minute, LookbackDelta: 5 * time.Minute, EnableAtModifier: true, EnableNegativeOffset: true})
	start, end := t0+2*day, t0+(tableDays-1)*day
	for _, c := range rollupCases {
		form := url.Values{"query": {c.q}, "start": {strconv.FormatInt(start/1000, 10)}, "end": {strconv.FormatInt(end/1000, 10)}, "step": {c.step.String()}}
		rawForm := url.Values{"max_source_resolution": {"0"}}
		for k, v := range form {
			rawForm[k] = v
		}
		c0 := cellCounts(t, reg)
		raw := truth(t, truthEngine, st, c.q, start, end, c.step)
		c1 := cellCounts(t, reg)
		planned := rangeResult(t, h, form)
		c2 := cellCounts(t, reg)
		windowed := rangeResult(t, h, rawForm)
		c3 := cellCounts(t, reg)
		require.NotEmpty(t, raw, c.q)
		if c.rollup {
			require.Positive(t, c2["rollup"]-c1["rollup"], "%s reads rollups", c.q)
		}
		require.Zero(t, c3["rollup"]-c2["rollup"], "%s at 0 reads no rollup", c.q)
		if doneFrom == 0 && doneTo == tableDays {
			require.Less(t, c2["raw"]-c1["raw"], (c1["raw"]-c0["raw"])/2, "%s reads fewer raw cells", c.q)
		}
		// Windows alone change nothing.
		require.Equal(t, raw, windowed, c.q)

		require.Equal(t, keys(raw), keys(planned), c.q)
		// Where a window ends in rollups and starts in raw samples, its
		// last point stands at its bucket's end for the bucket's last
		// sample, up to one scrape interval (150 s here) earlier; inside
		// rollups both ends of a window stand so, and that cancels.
		tolerance := 0.01
		if c.approx && (doneFrom != 0 || doneTo != tableDays) {
			rng, err := model.ParseDuration(rangeOf.FindStringSubmatch(c.q)[1])
			require.NoError(t, err)
			tolerance += 150 / time.Duration(rng).Seconds()
		}
		maxRaw := 0.0
		for _, pts := range raw {
			for _, p := range pts {
				maxRaw = max(maxRaw, p[1])
			}
		}
		for ls, want := range raw {
			got := planned[ls]
			require.Len(t, got, len(want), "%s %s", c.q, ls)
			for i := range want {
				require.Equal(t, want[i][0], got[i][0], "%s %s", c.q, ls)
				w, g := want[i][1], got[i][1]
				if c.approx {
					require.GreaterOrEqual(t, g, 0.0, "%s %s at %v", c.q, ls, want[i][0])
					require.LessOrEqual(t, g, maxRaw*1.01, "%s %s at %v: no spike", c.q, ls, want[i][0])
					require.InEpsilon(t, w, g, tolerance, "%s %s at %v", c.q, ls, want[i][0])
					continue
				}
				require.True(t, w == g || math.Abs(w-g) <= 1e-6*math.Max(math.Abs(w), math.Abs(g)) || math.IsNaN(w) && math.IsNaN(g),
					"%s %s at %v: raw %v, planned %v", c.q, ls, want[i][0], w, g)
			}
		}
	}
}

// doneRange is the job's progress at r.
func doneRange(ctx context.Context, eng engine.Engine, r rollup.Resolution) (from, to int64, err error) {
	v, ok, err := eng.ServiceValue(ctx, rollup.Service, rollup.ServiceKey, rollup.DoneKey(r))
	if err != nil || !ok {
		return 0, 0, fmt.Errorf("no progress at %s: %v", r, err)
	}
	return rollup.ParseDone(v)
}

// truth evaluates q over st with Prometheus's engine, no read plan.
func truth(t *testing.T, eng *promql.Engine, st *kairosstore.Store, q string, start, end int64, step time.Duration) map[string][][2]float64 {
	t.Helper()
	qry, err := eng.NewRangeQuery(context.Background(), st, nil, q, time.UnixMilli(start), time.UnixMilli(end), step)
	require.NoError(t, err)
	defer qry.Close()
	res := qry.Exec(context.Background())
	require.NoError(t, res.Err)
	m, err := res.Matrix()
	require.NoError(t, err)
	out := map[string][][2]float64{}
	for _, s := range m {
		ls := s.Metric.String()
		for _, p := range s.Floats {
			out[ls] = append(out[ls], [2]float64{float64(p.T) / 1000, p.F})
		}
	}
	return out
}

var rangeOf = regexp.MustCompile(`\[(\w+)\]`)

// rangeResult is a query_range answer: points by series.
func rangeResult(t *testing.T, h http.Handler, form url.Values) map[string][][2]float64 {
	t.Helper()
	ans := get(t, h, http.MethodPost, "/api/v1/query_range", form)
	require.Equal(t, http.StatusOK, ans.code, "%s: %s", form.Get("query"), ans.body)
	return rangeBody(t, ans.body)
}

// rangeBody is the points by series of a query_range answer's body.
func rangeBody(t *testing.T, ans string) map[string][][2]float64 {
	t.Helper()
	var body struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(ans), &body))
	out := map[string][][2]float64{}
	for _, s := range body.Data.Result {
		ls := labels.FromMap(s.Metric).String()
		for _, v := range s.Values {
			f, err := strconv.ParseFloat(v[1].(string), 64)
			require.NoError(t, err)
			out[ls] = append(out[ls], [2]float64{v[0].(float64), f})
		}
	}
	return out
}

// requireClose requires have, a rollup answer's points, to be raw's
// points want: the same times, and values equal, both NaN, or within rel
// of each other.
func requireClose(t *testing.T, what string, want, have [][2]float64, rel float64) {
	t.Helper()
	require.Len(t, have, len(want), what)
	for i, p := range want {
		g := have[i]
		require.Equal(t, p[0], g[0], what)
		require.True(t, p[1] == g[1] || math.IsNaN(p[1]) && math.IsNaN(g[1]) ||
			math.Abs(p[1]-g[1]) <= rel*math.Max(math.Abs(p[1]), math.Abs(g[1])),
			"%s at %v: raw %v, rollups %v", what, p[0], p[1], g[1])
	}
}

func keys(m map[string][][2]float64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// cellCounts is kairos_adapter_read_cells_total by kind.
func cellCounts(t testing.TB, reg *prometheus.Registry) map[string]float64 {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "kairos_adapter_read_cells_total" {
			for _, m := range mf.GetMetric() {
				out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}
