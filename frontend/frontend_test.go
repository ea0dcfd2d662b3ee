package frontend

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/promqltest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/queryapi"
)

// midnight is a UTC day boundary the test data crosses.
var midnight = time.Date(2025, 3, 10, 0, 0, 0, 0, time.UTC)

// testData spans midnight ± 2h at 15 s: the metrics of the e2e
// compliance test (counters, one of which resets, a classic histogram,
// gauges, an info metric, a series that goes stale and one that starts
// late, a native histogram).
func writeTestData(t testing.TB, store *kairosstore.Store) {
	t.Helper()
	app := store.NewAppender()
	appendTestData(t, app)
	require.NoError(t, app.Commit(context.Background()))
}

// testAppender is what appendTestData writes to: the store's appender or
// Prometheus's.
type testAppender interface {
	Append(storage.SeriesRef, labels.Labels, int64, float64) (storage.SeriesRef, error)
	AppendHistogram(storage.SeriesRef, labels.Labels, int64, *histogram.Histogram, *histogram.FloatHistogram) (storage.SeriesRef, error)
}

func appendTestData(t testing.TB, app testAppender) {
	const step = 15_000
	first := midnight.Add(-2 * time.Hour).UnixMilli()
	n := int(4*time.Hour/time.Millisecond)/step + 1
	add := func(ls labels.Labels, f func(i int) (float64, bool)) {
		for i := range n {
			if v, ok := f(i); ok {
				_, err := app.Append(0, ls, first+int64(i)*step, v)
				require.NoError(t, err)
			}
		}
	}
	for k, inst := range []string{"a", "b", "c"} {
		for c, code := range []string{"200", "500"} {
			perStep := float64(10*(k+1)) / float64(1+4*c)
			add(labels.FromStrings("__name__", "http_requests_total", "job", "api", "instance", inst, "code", code), func(i int) (float64, bool) {
				if inst == "b" && i >= 500 {
					return perStep * float64(i-500), true
				}
				return perStep * float64(i), true
			})
		}
		add(labels.FromStrings("__name__", "info_meta", "job", "api", "instance", inst, "version", fmt.Sprintf("1.%d", k)), func(int) (float64, bool) { return 1, true })
		for b, le := range []string{"0.1", "0.5", "1", "+Inf"} {
			add(labels.FromStrings("__name__", "req_duration_seconds_bucket", "job", "api", "instance", inst, "le", le), func(i int) (float64, bool) {
				return float64(i * (b + 1) * (k + 2)), true
			})
		}
		add(labels.FromStrings("__name__", "req_duration_seconds_count", "job", "api", "instance", inst), func(i int) (float64, bool) {
			return float64(i * 4 * (k + 2)), true
		})
		add(labels.FromStrings("__name__", "req_duration_seconds_sum", "job", "api", "instance", inst), func(i int) (float64, bool) {
			return float64(i*(k+2)) * 0.75, true
		})
	}
	for r, room := range []string{"r1", "r2", "r3"} {
		add(labels.FromStrings("__name__", "temperature", "job", "sensors", "room", room), func(i int) (float64, bool) {
			return 18 + float64(r)*2.5 + 3*math.Sin(float64(i)/17+float64(r)), true
		})
	}
	add(labels.FromStrings("__name__", "flaky_gauge", "job", "x", "id", "gone"), func(i int) (float64, bool) {
		switch {
		case i < 470:
			return float64(i % 7), true
		case i == 470:
			return math.Float64frombits(value.StaleNaN), true
		}
		return 0, false
	})
	add(labels.FromStrings("__name__", "flaky_gauge", "job", "x", "id", "late"), func(i int) (float64, bool) {
		return float64(i % 5), i >= 490
	})
	for i := range n {
		c := uint64(i)
		_, err := app.AppendHistogram(0, labels.FromStrings("__name__", "native_latency_seconds", "job", "api"), first+int64(i)*step, &histogram.Histogram{
			Schema: 0, Count: 3 * c, Sum: 1.5 * float64(c), ZeroThreshold: 0.001, ZeroCount: c,
			PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{int64(c), 0},
		}, nil)
		require.NoError(t, err)
	}
}

// testStore is a real embedded store; onChange is given the store's change
// notices once set.
func testStore(t testing.TB, onChange *func([]kairosstore.Change)) *kairosstore.Store {
	t.Helper()
	ctx := context.Background()
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	require.NoError(t, eng.Setup(ctx))
	opts := kairosstore.Options{}
	if onChange != nil {
		opts.OnChange = func(cs []kairosstore.Change) {
			if f := *onChange; f != nil {
				f(cs)
			}
		}
	}
	store, err := kairosstore.Open(ctx, eng, opts, nil, nil)
	require.NoError(t, err)
	return store
}

// queryAPI is the query API's query_range handler over store.
func queryAPI(store *kairosstore.Store) queryapi.RangeHandler {
	return queryAPIWith(store, queryapi.Options{})
}

func queryAPIWith(store *kairosstore.Store, opts queryapi.Options) queryapi.RangeHandler {
	var h queryapi.RangeHandler
	queryapi.New(store, opts, nil, prometheus.NewRegistry()).Register(func(_, name string, handler http.Handler) {
		if name == "query_range" {
			h = handler.(queryapi.RangeHandler)
		}
	})
	return h
}

type answer struct {
	code int
	body string
}

func ask(t testing.TB, h http.Handler, form url.Values, header http.Header) answer {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return answer{rec.Code, string(b)}
}

func rangeForm(q string, start, end time.Time, step time.Duration) url.Values {
	return url.Values{"query": {q}, "start": {formatTime(start.UnixMilli())}, "end": {formatTime(end.UnixMilli())}, "step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
}

// sameAnswer requires the same status and, for matrices, the same series,
// times and values (floats within a relative 1e-9: a sharded sum adds in
// another order) and the same annotations.
func sameAnswer(t *testing.T, desc string, want, got answer) {
	t.Helper()
	sameAnswerAt(t, desc, want, got, false)
}

// sameAnswerAt is sameAnswer; with endOK, a value pair of which either is
// at float64's end (atEnd) may differ.
func sameAnswerAt(t *testing.T, desc string, want, got answer, endOK bool) {
	t.Helper()
	require.Equal(t, want.code, got.code, "%s: status: want %s, got %s", desc, want.body, got.body)
	if want.code != http.StatusOK {
		require.JSONEq(t, want.body, got.body, desc)
		return
	}
	if want.body == got.body {
		return
	}
	wm, err := parseAnswer([]byte(want.body))
	require.NoError(t, err, desc)
	gm, err := parseAnswer([]byte(got.body))
	require.NoError(t, err, desc)
	require.Equal(t, wm.warnings, gm.warnings, "%s: warnings", desc)
	require.Equal(t, wm.infos, gm.infos, "%s: infos", desc)
	require.Equal(t, len(wm.series), len(gm.series), "%s: series: want %s, got %s", desc, want.body, got.body)
	for i, ws := range wm.series {
		gs := gm.series[i]
		require.Equal(t, ws.labels, gs.labels, desc)
		require.Equal(t, ws.hists, gs.hists, "%s: histograms of %s", desc, ws.labels)
		require.Equal(t, len(ws.floats), len(gs.floats), "%s: points of %s: want %s, got %s", desc, ws.labels, want.body, got.body)
		for j, wp := range ws.floats {
			gp := gs.floats[j]
			require.Equal(t, wp.t, gp.t, "%s: times of %s", desc, ws.labels)
			if string(wp.v) == string(gp.v) {
				continue
			}
			wv, err1 := parseValue(wp.v)
			gv, err2 := parseValue(gp.v)
			require.NoError(t, err1)
			require.NoError(t, err2)
			if endOK && (atEnd(wv) || atEnd(gv)) {
				continue
			}
			// Infinities and NaN are equal only to themselves (their texts
			// differ, so they are not): an infinity would pass the relative
			// bound against any value.
			finite := !math.IsInf(wv, 0) && !math.IsInf(gv, 0) && !math.IsNaN(wv) && !math.IsNaN(gv)
			require.True(t, finite && math.Abs(wv-gv) <= 1e-9*math.Max(math.Abs(wv), math.Abs(gv)), "%s: %s at %d: want %s, got %s", desc, ws.labels, wp.t, wp.v, gp.v)
		}
	}
}

// extraExprs are what splitting must keep exact at the seams beyond the
// compliance table: offsets both ways, long ranges, subqueries with and
// without a step, and what the frontend keeps whole (@).
var extraExprs = []string{
	`rate(http_requests_total[1h])`,
	`sum by (job) (rate(http_requests_total[5m]))`,
	`sum(rate(http_requests_total[5m] offset 20m))`,
	`sum(rate(http_requests_total[5m] offset -20m))`,
	`max_over_time(rate(http_requests_total[5m])[20m:1m])`,
	`sum(max_over_time(rate(http_requests_total[5m])[20m:1m]))`,
	`avg_over_time(temperature[10m:])`,
	`avg by (room) (avg_over_time(temperature[7m]) * 2)`,
	`count(http_requests_total > 100)`,
	`min(-temperature)`,
	`max without (instance) (increase(http_requests_total[17m]))`,
	`sum(rate(native_latency_seconds[5m]))`,
	`count(native_latency_seconds)`,
	`histogram_quantile(0.9, rate(native_latency_seconds[5m]))`,
	`temperature @ ` + strconv.FormatInt(midnight.Unix(), 10),
	`rate(http_requests_total[5m] @ end())`,
	`sum(rate(http_requests_total[5m] @ start()))`,
	`absent_over_time(nonexistent[5m])`,
	`sort(temperature)`,
	// Sums near float64's end: the engine's avg of finite values that
	// overflow is finite (an incremental mean), the shards' sum is not.
	`avg(temperature * 5e306)`,
	`sum(temperature * 5e306) - sum(temperature * 5e306)`,
	`avg by (job) (temperature * 6e307)`,
	// Annotations of shards, their positions in the query's text.
	`sum by (room) (rate(temperature[5m]))`,
	`max(
	  rate(temperature{room!="r9"}[5m]))`,
	`count(rate(req_duration_seconds_sum[5m])) + count(rate(temperature[5m]))`,
}

// TestSplitAndShardMatchWhole asks every expression of the compliance table
// (and extraExprs) over ranges that cross midnight and other split
// boundaries, split, sharded and from the cache, and requires the answers
// of the query API asked the whole query.
func TestSplitAndShardMatchWhole(t *testing.T) {
	store := testStore(t, nil)
	writeTestData(t, store)
	whole := queryAPI(store)
	exprs, shouldFail := promqltest.ComplianceExprs()
	exprs = append(append(exprs, extraExprs...), shouldFail...)
	ranges := []struct {
		start, end time.Time
		step       time.Duration
	}{
		{midnight.Add(-90 * time.Minute), midnight.Add(90 * time.Minute), 90 * time.Second},
		// A start off the step's grid and an end off the start's.
		{midnight.Add(-47*time.Minute - 7*time.Second), midnight.Add(31*time.Minute + 2*time.Second), 60 * time.Second},
	}
	for _, c := range []struct {
		name   string
		opts   Options
		ranges []int // of ranges
		rounds int   // the second from the cache
	}{
		{"day", Options{Shards: 3}, []int{0, 1}, 1},
		{"20m-cache", Options{SplitInterval: 20 * time.Minute, Shards: 2, CacheBytes: 64 << 20, Now: func() time.Time { return midnight.Add(24 * time.Hour) }}, []int{0, 1}, 2},
		// Many short parts and uneven shards, over the shorter range
		// only: each query is some 30 sub-queries.
		{"7m-odd", Options{SplitInterval: 7 * time.Minute, MaxParts: 100, Shards: 5, Parallelism: 3}, []int{1}, 1},
		// The same range in at most 4 parts: 21m each.
		{"max-parts", Options{SplitInterval: 7 * time.Minute, MaxParts: 4, Shards: 2}, []int{1}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			f := New(whole, c.opts, reg, nil)
			for _, ri := range c.ranges {
				r := ranges[ri]
				for _, e := range exprs {
					form := rangeForm(e, r.start, r.end, r.step)
					want := ask(t, whole, form, nil)
					for round := range c.rounds {
						sameAnswer(t, fmt.Sprintf("%s (round %d)", form.Encode(), round), want, ask(t, f, form, nil))
					}
				}
			}
			t.Logf("%d expressions; parts %v, shards %v, fallbacks %v, cache hits %v", len(exprs),
				counter(t, reg, "kairos_adapter_frontend_parts_evaluated_total", ""), counter(t, reg, "kairos_adapter_frontend_shards_total", ""),
				counter(t, reg, "kairos_adapter_frontend_shard_fallbacks_total", ""), counter(t, reg, "kairos_adapter_frontend_cache_requests_total", "hit"))
			require.Positive(t, counter(t, reg, "kairos_adapter_frontend_shards_total", ""))
		})
	}
}

// counter reads a counter (with the given value of its one label, if any).
func counter(t testing.TB, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if m.GetCounter() != nil {
				total += m.GetCounter().GetValue()
			}
			if m.GetGauge() != nil {
				total += m.GetGauge().GetValue()
			}
		}
	}
	return total
}

// panicking panics wherever it is asked.
type panicking struct{}

func (panicking) ServeHTTP(http.ResponseWriter, *http.Request) { panic("boom") }

func (panicking) MaxQueryLength() int { return 1 << 10 }

func (panicking) Timeout(url.Values) (time.Duration, *queryapi.Error) { return time.Minute, nil }

// FromRollups does not panic: the parts are where the test wants the panic.
func (panicking) FromRollups(parser.Expr, time.Time, time.Duration, url.Values) bool { return false }

func (panicking) EvalRange(context.Context, queryapi.RangeRequest, func(promql.Matrix) any) (queryapi.RangeAnswer, *queryapi.Error) {
	panic("boom")
}

// TestPanicInAPartAnswers500: parts and shards run on goroutines of their
// own, where net/http's recovery does not reach; a panic in one (here in
// the query API it calls) must fail that query with 500, not end the
// process. Before the recovers, the test binary died.
func TestPanicInAPartAnswers500(t *testing.T) {
	var panics panicking
	midnight := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name, query, what string
		opts              Options
	}{
		// Uncached, a query is cut only where it is longer than the interval.
		{"part", "x", "a part of the query", Options{Shards: 1, SplitInterval: time.Hour}},
		{"cached part", "x", "a part of the query", Options{Shards: 1, CacheBytes: 1 << 20, Now: func() time.Time { return midnight.Add(48 * time.Hour) }}},
		{"shard", "sum by (job) (x)", "a shard of the query", Options{SplitInterval: -1, Shards: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := New(panics, c.opts, prometheus.NewRegistry(), nil)
			got := ask(t, f, rangeForm(c.query, midnight.Add(-time.Hour), midnight.Add(time.Hour), time.Minute), nil)
			require.Equal(t, http.StatusInternalServerError, got.code, got.body)
			require.JSONEq(t, `{"status":"error","errorType":"internal","error":"`+c.what+` panicked: boom"}`, got.body)
		})
	}
}
