package e2e

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// TestQueryAPIMatchesPrometheus writes the same samples to the adapter and,
// through its remote-write receiver, to a real Prometheus, then asks both
// the same PromQL (instant and range queries) and the same /series,
// /labels and /label/<name>/values questions: the adapter's own query API
// must answer as Prometheus does. Every time in the test is fixed relative
// to the data, so nothing depends on when the queries run.
func TestQueryAPIMatchesPrometheus(t *testing.T) {
	promBin := envOrSkip(t, "KAIROS_TEST_PROMETHEUS", "the Prometheus server binary printed by scripts/prometheus.sh")
	requireSameRelease(t, promBin)
	prom := startPrometheus(t, promBin, "prometheus", "global: {scrape_interval: 1m}\n", "--web.enable-remote-write-receiver", "--enable-feature=exemplar-storage")
	promAsAdapter := &adapter{addr: strings.TrimPrefix(prom, "http://")}
	// A whole minute, 30 minutes back: the samples (one hour up to t0) are
	// all within Prometheus's head, which accepts them in any order of
	// series.
	t0 := time.Now().Truncate(time.Minute).Add(-30 * time.Minute)
	data := queryAPISeries(t0)
	mustWrite(t, promAsAdapter, false, data)

	engines := map[string]func(t *testing.T) storageArgs{
		"embedded": func(t *testing.T) storageArgs { return embeddedStorage(t.TempDir()) },
		"cassandra": func(t *testing.T) storageArgs {
			addr, keyspace := cassandratest.Keyspace(t)
			return cassandraStorage(addr, keyspace)
		},
	}
	for name, storage := range engines {
		t.Run(name, func(t *testing.T) {
			// The range queries go through the frontend split at every
			// 10 minutes (since the epoch, as days are: the same code
			// as UTC midnights), so each of them crosses several
			// boundaries, sharded in 3, and cached.
			a := startAdapter(t, "", append(storage(t), "--query.split-interval=10m", "--query.shards=3", "--query.parallelism=4"))
			mustWrite(t, a, false, data)
			compareQueryAPI(t, prom, a.url(""), t0)
			frontend := func(name string, with ...string) float64 {
				return promMetric(t, a.url(""), "kairos_adapter_frontend_"+name, with...)
			}
			t.Logf("frontend: parts %v, shards %v (fallbacks %v), cache hits %v, misses %v",
				frontend("parts_evaluated_total"), frontend("shards_total"), frontend("shard_fallbacks_total"),
				frontend("cache_requests_total", `result="hit"`), frontend("cache_requests_total", `result="miss"`))
			require.Positive(t, frontend("shards_total"))
			require.Positive(t, frontend("cache_requests_total", `result="hit"`))
			require.Greater(t, frontend("parts_evaluated_total"), 2*frontend("queries_total", `path="split"`), "queries split in parts")
		})
	}
	// Without the frontend (no split, shard or cache), the same answers
	// where the store's read hints apply.
	t.Run("embedded without frontend", func(t *testing.T) {
		a := startAdapter(t, "", append(embeddedStorage(t.TempDir()), "--query.split-interval=0", "--query.shards=1", "--query.results-cache-bytes=0"))
		mustWrite(t, a, false, data)
		compareGaps(t, prom, a.url(""), t0)
	})
}

// requireSameRelease fails unless the Prometheus binary at bin is built
// from the release whose engine the adapter embeds (go.mod's): against
// another release, answers differ wherever PromQL changed between them,
// and the test would blame the adapter. A binary cached from before a
// bump is the usual cause.
func requireSameRelease(t *testing.T, bin string) {
	t.Helper()
	const mod = "github.com/prometheus/prometheus"
	version := func(bin string) string {
		info, err := buildinfo.ReadFile(bin)
		require.NoError(t, err, "reading the build information of %s", bin)
		// Built by path from tools/prometheus, Prometheus's module is
		// the binary's main one.
		for _, d := range append(info.Deps, &info.Main) {
			if d.Path == mod {
				return d.Version
			}
		}
		return ""
	}
	want := version(adapterBin)
	require.NotEmpty(t, want, "the adapter is not built with %s", mod)
	require.Equal(t, want, version(bin), "%s is not built from the release of %s the adapter embeds (go.mod and tools/prometheus/go.mod pin the same one; scripts/prometheus.sh builds it)", bin, mod)
}

// compareGaps asks for the functions whose answers take their labels from
// a selector's matchers (absent, absent_over_time) where the store reads
// only the windows the engine evaluates: a step longer than the range (or
// the lookback) over series with gaps between samples longer than the
// range, so that most windows are empty and the answer is absent's. No
// label of the adapter's may show in them.
func compareGaps(t *testing.T, prom, adapterURL string, t0 time.Time) {
	sec := func(d time.Duration) string { return strconv.FormatInt(t0.Add(d).Unix(), 10) }
	for _, c := range []struct {
		expr string
		step string
	}{
		{`absent_over_time(temperature[1s])`, "60"},
		{`absent_over_time(temperature{room="r1", job="sensors"}[5s])`, "60"},
		{`absent_over_time(flaky_gauge{id="late", job="x"}[20s] offset 7s)`, "60"},
		{`absent_over_time(http_requests_total{code="500", instance="b"}[6s])`, "90"},
		{`count_over_time(temperature{room="r2"}[10s])`, "60"},
		{`absent(flaky_gauge{id="gone", job="x"})`, "600"},
		{`absent(temperature{room="r9"} offset 1m)`, "600"},
		{`absent(nonexistent{job="x"})`, "600"},
	} {
		// Evaluation times 7 s after the samples' 15 s grid.
		params := url.Values{"query": {c.expr}, "start": {sec(-55*time.Minute + 7*time.Second)}, "end": {sec(0)}, "step": {c.step}}
		require.Positive(t, compareAnswers(t, prom, adapterURL, "/api/v1/query_range", params), c.expr)
	}
}

// queryAPISeries is an hour of 15 s samples up to t0: counters (one resets),
// a classic histogram, gauges, an info metric for joins, a series that ends
// with a stale marker and one that starts late, and a native histogram.
func queryAPISeries(t0 time.Time) []series {
	const step = 15 * time.Second
	n := int(time.Hour/step) + 1
	start := t0.Add(-time.Hour).UnixMilli()
	at := func(i int) int64 { return start + int64(i)*step.Milliseconds() }
	float := func(v float64) uint64 { return math.Float64bits(v) }
	var out []series
	add := func(ls labels.Labels, f func(i int) (float64, bool)) {
		s := series{Labels: ls}
		for i := range n {
			if v, ok := f(i); ok {
				s.Samples = append(s.Samples, sample{at(i), float(v)})
			}
		}
		out = append(out, s)
	}
	for k, inst := range []string{"a", "b", "c"} {
		for c, code := range []string{"200", "500"} {
			perStep := float64(10*(k+1)) / float64(1+4*c)
			add(labels.FromStrings("__name__", "http_requests_total", "job", "api", "instance", inst, "code", code), func(i int) (float64, bool) {
				if inst == "b" && i >= 150 {
					return perStep * float64(i-150), true // the process restarted: a counter reset
				}
				return perStep * float64(i), true
			})
			// An exemplar every 10 minutes, as a traced request leaves.
			s := &out[len(out)-1]
			for i := 0; i < n; i += 40 {
				s.Exemplars = append(s.Exemplars, exemplar.Exemplar{
					Labels: labels.FromStrings("trace_id", fmt.Sprintf("%s%s%04d", inst, code, i)),
					Value:  float64(i) / 100, Ts: at(i), HasTs: true,
				})
			}
		}
		add(labels.FromStrings("__name__", "info_meta", "job", "api", "instance", inst, "version", fmt.Sprintf("1.%d", k)), func(int) (float64, bool) { return 1, true })
		// A classic histogram of request durations, cumulative buckets.
		bounds := []string{"0.1", "0.5", "1", "+Inf"}
		for b, le := range bounds {
			add(labels.FromStrings("__name__", "req_duration_seconds_bucket", "job", "api", "instance", inst, "le", le), func(i int) (float64, bool) {
				return float64(i * (b + 1) * (k + 2)), true
			})
		}
		add(labels.FromStrings("__name__", "req_duration_seconds_count", "job", "api", "instance", inst), func(i int) (float64, bool) {
			return float64(i * len(bounds) * (k + 2)), true
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
	// Ends 30 minutes before t0 with a stale marker, as a scrape that lost
	// its target writes it.
	add(labels.FromStrings("__name__", "flaky_gauge", "job", "x", "id", "gone"), func(i int) (float64, bool) {
		switch {
		case i < 120:
			return float64(i % 7), true
		case i == 120:
			return math.Float64frombits(value.StaleNaN), true
		}
		return 0, false
	})
	add(labels.FromStrings("__name__", "flaky_gauge", "job", "x", "id", "late"), func(i int) (float64, bool) {
		return float64(i % 5), i >= 180
	})
	// A native histogram counter.
	h := series{Labels: labels.FromStrings("__name__", "native_latency_seconds", "job", "api")}
	for i := range n {
		c := uint64(i)
		h.Histograms = append(h.Histograms, hsample{T: at(i), H: &histogram.Histogram{
			Schema: 0, Count: 3 * c, Sum: 1.5 * float64(c), ZeroThreshold: 0.001, ZeroCount: c,
			PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{int64(c), 0},
		}})
	}
	out = append(out, h)
	return out
}

// compareQueryAPI runs the comparison table against Prometheus at prom and
// the adapter at adapterURL.
func compareQueryAPI(t *testing.T, prom, adapterURL string, t0 time.Time) {
	sec := func(d time.Duration) string { return strconv.FormatInt(t0.Add(d).Unix(), 10) }
	exprs := []string{
		`http_requests_total`,
		`http_requests_total{code="500"}`,
		`http_requests_total{instance=~"a|b", code!="500"}`,
		`{__name__=~"http_.*|info_.*", instance="c"}`,
		`rate(http_requests_total[5m])`,
		`increase(http_requests_total[10m])`,
		`resets(http_requests_total[1h])`,
		`irate(http_requests_total[1m])`,
		`sum by (job) (rate(http_requests_total[5m]))`,
		`sum without (instance) (rate(http_requests_total[5m]))`,
		`count by (__name__) ({job="api"})`,
		`histogram_quantile(0.9, sum by (le) (rate(req_duration_seconds_bucket[5m])))`,
		`histogram_quantile(0.5, rate(req_duration_seconds_bucket[10m]))`,
		`rate(req_duration_seconds_sum[5m]) / rate(req_duration_seconds_count[5m])`,
		`rate(http_requests_total[5m]) * on (instance) group_left (version) info_meta`,
		`rate(http_requests_total{code="500"}[5m]) / ignoring (code) rate(http_requests_total{code="200"}[5m])`,
		`max_over_time(rate(http_requests_total[5m])[20m:1m])`,
		`avg_over_time(temperature[10m:])`,
		`temperature offset 10m`,
		`temperature @ ` + sec(-40*time.Minute),
		`rate(http_requests_total[5m] @ end())`,
		`absent(nonexistent_metric{job="x"})`,
		`absent(temperature)`,
		`label_replace(temperature, "place", "room $1", "room", "r(.*)")`,
		`label_join(info_meta, "id", "-", "instance", "version")`,
		`topk(2, temperature)`,
		`bottomk(1, rate(http_requests_total[5m]))`,
		`sort_desc(sum by (instance) (http_requests_total))`,
		`quantile(0.5, temperature)`,
		`avg by (job) (temperature)`,
		`stddev(temperature)`,
		`temperature > 20`,
		`temperature > bool 20`,
		`delta(temperature[10m])`,
		`deriv(temperature[10m])`,
		`predict_linear(temperature[10m], 600)`,
		`changes(temperature[30m])`,
		`clamp(temperature, 18, 21)`,
		`round(temperature, 0.5)`,
		`flaky_gauge`,
		`count_over_time(flaky_gauge[10m])`,
		`last_over_time(flaky_gauge[10m])`,
		`max_over_time(flaky_gauge[5m])`,
		`timestamp(flaky_gauge)`,
		`native_latency_seconds`,
		`rate(native_latency_seconds[5m])`,
		`histogram_quantile(0.5, rate(native_latency_seconds[5m]))`,
		`histogram_count(rate(native_latency_seconds[5m]))`,
		`scalar(sum(temperature))`,
		`vector(1) + 2`,
		`time()`,
		`"a string"`,

		// Selectors.
		`http_requests_total{instance!~"a|c"}`,
		`http_requests_total{code=~"5..", instance!="a"}`,
		`{__name__="temperature", room!="r2"}`,
		`req_duration_seconds_bucket{le=~"0\\.5|\\+Inf", instance="a"}`,
		`{job="sensors"}`,
		// Counters, the one of instance b with a reset.
		`increase(http_requests_total{instance="b"}[30m])`,
		`rate(http_requests_total[1h])`,
		`irate(http_requests_total{instance="b"}[5m])`,
		`resets(http_requests_total{instance="b"}[10m])`,
		`changes(http_requests_total[1h])`,
		`delta(http_requests_total[10m])`,
		`idelta(http_requests_total[2m])`,
		`deriv(http_requests_total[10m])`,
		`predict_linear(http_requests_total[15m], 3600)`,
		`idelta(temperature[5m])`,
		// *_over_time.
		`avg_over_time(temperature[15m])`,
		`min_over_time(temperature[15m])`,
		`sum_over_time(flaky_gauge[10m])`,
		`quantile_over_time(0.9, temperature[30m])`,
		`stddev_over_time(temperature[20m])`,
		`stdvar_over_time(temperature[20m])`,
		`present_over_time(flaky_gauge[5m])`,
		`last_over_time(temperature[1m])`,
		`count_over_time(http_requests_total[2m])`,
		`absent_over_time(flaky_gauge{id="gone"}[5m])`,
		`absent_over_time(nonexistent_metric[5m])`,
		// Classic and native histograms.
		`histogram_quantile(0.99, sum by (le, instance) (rate(req_duration_seconds_bucket[5m])))`,
		`histogram_quantile(0.25, sum without (instance) (increase(req_duration_seconds_bucket[15m])))`,
		`histogram_quantile(0.99, native_latency_seconds)`,
		`histogram_sum(rate(native_latency_seconds[5m]))`,
		`histogram_avg(rate(native_latency_seconds[5m]))`,
		`histogram_fraction(0, 1, rate(native_latency_seconds[5m]))`,
		`histogram_count(native_latency_seconds)`,
		`histogram_stddev(rate(native_latency_seconds[5m]))`,
		`increase(native_latency_seconds[10m])`,
		`sum(rate(native_latency_seconds[5m]))`,
		// Aggregations.
		`min by (instance) (http_requests_total)`,
		`max without (code) (http_requests_total)`,
		`count_values("value", round(temperature))`,
		`group by (instance) (http_requests_total)`,
		`quantile by (code) (0.9, rate(http_requests_total[5m]))`,
		`topk by (code) (1, rate(http_requests_total[5m]))`,
		`bottomk(2, temperature)`,
		`stdvar by (code) (rate(http_requests_total[5m]))`,
		`count without (le) (req_duration_seconds_bucket)`,
		`sum(temperature) by (room)`,
		// Binary operators and vector matching.
		`http_requests_total{code="500"} / on (instance) http_requests_total{code="200"}`,
		`info_meta * on (instance) group_right (version) rate(http_requests_total[5m])`,
		`rate(http_requests_total[5m]) / on (instance) group_left sum by (instance) (rate(http_requests_total[5m]))`,
		`temperature < bool 20`,
		`temperature == bool on (room) temperature`,
		`temperature != 20.5`,
		`http_requests_total > 1000 and on (instance) info_meta{version="1.1"}`,
		`temperature or flaky_gauge`,
		`http_requests_total unless http_requests_total{code="500"}`,
		`rate(http_requests_total[5m]) and ignoring (code) rate(http_requests_total{code="200"}[5m]) > 1`,
		`-temperature + 2 * 3`,
		`temperature atan2 on (room) temperature`,
		`scalar(temperature{room="r1"}) * http_requests_total`,
		// Subqueries, offset and @.
		`rate(http_requests_total[5m:30s])`,
		`min_over_time(temperature[30m:5m])`,
		`deriv(sum(http_requests_total)[10m:1m])`,
		`max_over_time(deriv(temperature[5m])[15m:2m] offset 5m)`,
		`rate(http_requests_total[5m] offset 20m)`,
		`http_requests_total @ start()`,
		`temperature @ end() offset 10m`,
		`sum(rate(http_requests_total[5m] @ ` + sec(-20*time.Minute) + `))`,
		`temperature offset -5m`,
		// absent, labels, sorting.
		`absent(flaky_gauge{id="gone"})`,
		`absent(http_requests_total{code="404", job="api"})`,
		`label_replace(http_requests_total, "class", "${1}xx", "code", "(.).*")`,
		`label_join(temperature, "where", ":", "job", "room")`,
		`label_replace(temperature, "room", "", "room", "r1")`,
		`sort(temperature)`,
		`sort_desc(rate(http_requests_total[5m]))`,
		// Arithmetic functions.
		`abs(temperature - 20)`,
		`ceil(temperature)`,
		`floor(temperature)`,
		`ln(temperature)`,
		`exp(temperature / 10)`,
		`sqrt(temperature)`,
		`log2(http_requests_total + 1)`,
		`sgn(temperature - 20)`,
		`clamp_min(temperature, 20)`,
		`clamp_max(temperature, 20)`,
		// Time functions.
		`day_of_week(vector(time()))`,
		`hour(vector(time()))`,
		`minute()`,
		`month(vector(time())) + year() + day_of_month() + day_of_year() + days_in_month()`,
		`timestamp(temperature offset 5m)`,
		`time() - timestamp(flaky_gauge)`,
		`minute(timestamp(temperature))`,
		// scalar and vector.
		`scalar(temperature)`,
		`vector(scalar(sum by (job) (temperature)))`,
		`scalar(http_requests_total{instance="a", code="200"}) > bool 500`,
		// A series that ends with a stale marker.
		`rate(flaky_gauge[5m])`,
		`avg_over_time(flaky_gauge[15m])`,
		`flaky_gauge offset 1m`,
		`sum(flaky_gauge)`,
		`changes(flaky_gauge[30m])`,
		`absent(flaky_gauge)`,
	}
	require.GreaterOrEqual(t, len(exprs), 110)
	// Expressions are only worth comparing when they answer something:
	// count those whose range query is empty in Prometheus.
	empty := 0
	instantAt := []time.Duration{0, -5 * time.Minute, -29*time.Minute - 50*time.Second, -45 * time.Minute}
	for _, expr := range exprs {
		for _, at := range instantAt {
			params := url.Values{"query": {expr}, "time": {sec(at)}}
			compareAnswers(t, prom, adapterURL, "/api/v1/query", params)
		}
		if strings.HasPrefix(expr, "sort") || strings.HasPrefix(expr, `"`) {
			// A range query of a string is refused, and sort in a
			// range query is a warning, which queryAPI refuses.
			continue
		}
		params := url.Values{"query": {expr}, "start": {sec(-55 * time.Minute)}, "end": {sec(0)}, "step": {"60"}}
		if compareAnswers(t, prom, adapterURL, "/api/v1/query_range", params) == 0 {
			empty++
			t.Logf("empty range answer: %s", expr)
		}
	}
	require.LessOrEqual(t, empty, len(exprs)/10, "too many expressions answer nothing")

	compareGaps(t, prom, adapterURL, t0)
	compareBytes(t, prom, adapterURL, t0)
	compareStats(t, prom, adapterURL, t0)
	compareCompliance(t, prom, adapterURL, t0)

	// A shorter lookback, as a request parameter: a series is gone sooner
	// after its last sample.
	for _, expr := range []string{`flaky_gauge`, `temperature`, `count(http_requests_total)`} {
		for _, at := range []time.Duration{-29*time.Minute - 40*time.Second, -15 * time.Minute} {
			compareAnswers(t, prom, adapterURL, "/api/v1/query", url.Values{"query": {expr}, "time": {sec(at)}, "lookback_delta": {"10s"}})
		}
	}

	// Exemplars of the selectors of a query, over a range and over all time.
	for _, params := range []url.Values{
		{"query": {`rate(http_requests_total{instance="a"}[5m])`}},
		{"query": {`http_requests_total{code="500"} / on(instance) group_left info_meta`}, "start": {sec(-50 * time.Minute)}, "end": {sec(-10 * time.Minute)}},
		{"query": {`temperature`}},
	} {
		compareJSON(t, prom, adapterURL, "/api/v1/query_exemplars", params)
	}
	require.Len(t, rawGet(t, adapterURL+"/api/v1/query_exemplars?query=http_requests_total").list(t), 6, "every counter has exemplars")

	// Label and series lookups, over the data's range and over everything.
	window := url.Values{"start": {sec(-time.Hour)}, "end": {sec(0)}}
	with := func(v url.Values, kv ...string) url.Values {
		out := url.Values{}
		for k, vs := range v {
			out[k] = vs
		}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	for _, params := range []url.Values{{}, window, with(window, "match[]", `{job="api"}`), with(nil, "match[]", `temperature`, "match[]", `flaky_gauge`)} {
		compareJSON(t, prom, adapterURL, "/api/v1/labels", params)
		for _, name := range []string{"__name__", "instance", "le", "room", "id", "nothing"} {
			compareJSON(t, prom, adapterURL, "/api/v1/label/"+name+"/values", params)
		}
	}
	for _, m := range [][]string{{`http_requests_total`}, {`{job="api", instance="b"}`}, {`temperature`, `info_meta{instance="a"}`}, {`{__name__=~"req_.*", le="+Inf"}`}} {
		params := with(window)
		params["match[]"] = m
		compareJSON(t, prom, adapterURL, "/api/v1/series", params)
		params = with(nil)
		params["match[]"] = m
		compareJSON(t, prom, adapterURL, "/api/v1/series", params)
	}
	// A limit truncates both to as many items, with the same warning;
	// which items is up to the storage in Prometheus (its TSDB cuts before
	// sorting).
	for _, u := range []string{"/api/v1/label/__name__/values?limit=2", "/api/v1/labels?limit=3", "/api/v1/series?limit=3&match[]=http_requests_total"} {
		a, b := rawGet(t, prom+u), rawGet(t, adapterURL+u)
		require.Equal(t, len(a.list(t)), len(b.list(t)), u)
		require.Equal(t, a.Warnings, b.Warnings, u)
		require.NotEmpty(t, b.Warnings, u)
	}

	// The same syntax tree and formatting; the query is not evaluated.
	for _, q := range []string{
		`1`, `-1.5e3`, `"text"`, `-x`, `(x + 1) * 2`,
		`x{a="b", c!="d", e=~"f.*", g!~"h"}`, `{__name__=~"x|y"}`,
		`x offset 5m`, `x @ 1700000000`, `x @ start()`, `x[5m] @ end() offset -1m`,
		`rate(x[5m])`, `rate(x[5m:30s] offset 1h)`, `max_over_time(rate(x[1m])[10m:] @ start())`,
		`sum by (job, instance) (x)`, `topk without (a) (3, x)`, `count_values("v", x)`, `quantile(0.9, x)`,
		`x > bool 1`, `x / on (a) group_left (b) y`, `x + ignoring (c) group_right y`, `x and y`, `x unless on () y`,
		`label_replace(x, "dst", "$1", "src", "(.*)")`, `round(x)`, `round(x, 5)`, `time()`, `vector(1)`,
		`histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m])))`, `absent(nonexistent{job="x"})`,
	} {
		for _, path := range []string{"/api/v1/parse_query", "/api/v1/format_query"} {
			u := path + "?query=" + url.QueryEscape(q)
			a, b := rawGet(t, prom+u), rawGet(t, adapterURL+u)
			require.Equal(t, http.StatusOK, a.code, "Prometheus: %s: %s", u, a.body)
			require.Equal(t, http.StatusOK, b.code, "adapter: %s: %s", u, b.body)
			var da, db any
			require.NoError(t, json.Unmarshal(a.data, &da))
			require.NoError(t, json.Unmarshal(b.data, &db))
			require.Equal(t, da, db, "%s: Prometheus said %s", u, a.data)
		}
	}

	// Bad requests get the same status and error type.
	for _, c := range []struct{ path, query string }{
		{"/api/v1/parse_query", "query=" + url.QueryEscape("sum(x")},
		{"/api/v1/format_query", "query=" + url.QueryEscape("x[5m")},
		{"/api/v1/query", "query=sum(" + url.QueryEscape("rate(x[5m]")},
		{"/api/v1/query", "query=up&time=yesterday"},
		{"/api/v1/query_range", "query=up&start=10&end=5&step=1"},
		{"/api/v1/query_range", "query=up&start=0&end=100000&step=1"},
		{"/api/v1/query_range", "query=up&start=0&end=10&step=0"},
		{"/api/v1/series", ""},
		{"/api/v1/series", "match[]=" + url.QueryEscape(`{job=~".*"}`)},
		{"/api/v1/labels", "limit=-1"},
		{"/api/v1/label/%ff/values", ""},
	} {
		pa, pb := rawGet(t, prom+c.path+"?"+c.query), rawGet(t, adapterURL+c.path+"?"+c.query)
		require.Equal(t, pa.code, pb.code, "%s?%s: status (Prometheus said %s)", c.path, c.query, pa.body)
		require.Equal(t, pa.errorType, pb.errorType, "%s?%s: error type", c.path, c.query)
		require.Equal(t, "error", pb.status, "%s?%s", c.path, c.query)
	}

	// The query API's requests are in the adapter's request metrics.
	_, metrics, err := httpGet(adapterURL + "/metrics")
	require.NoError(t, err)
	for _, h := range []string{"query", "query_range", "series", "labels", "label_values", "query_exemplars"} {
		require.Contains(t, metrics, `kairos_adapter_request_duration_seconds_count{code="200",handler="`+h+`"}`)
	}
	require.Contains(t, metrics, `kairos_adapter_request_duration_seconds_count{code="400",handler="query"}`)

	// POST with a form body answers as GET.
	resp, err := http.PostForm(adapterURL+"/api/v1/query", url.Values{"query": {"sum(temperature)"}, "time": {sec(0)}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// compareAnswers compares two query answers line by line (queryAPI's
// lines): the same series and timestamps, and values equal up to a relative
// 1e-9, which leaves room for summation order; histograms must be equal as
// printed. It returns the number of points (samples) in the answer.
func compareAnswers(t *testing.T, prom, adapterURL, path string, params url.Values) (points int) {
	t.Helper()
	desc := path + "?" + params.Encode()
	typA, a := queryAPI(t, prom, path, params)
	typB, b := queryAPI(t, adapterURL, path, params)
	require.Equal(t, typA, typB, "result type of %s", desc)
	points = len(a)
	if points > 0 && strings.HasPrefix(a[points-1], "infos: ") {
		points--
	}
	if slices.Equal(a, b) {
		return points
	}
	if len(a) == len(b) {
		same := true
		for i := range a {
			if !closeLines(a[i], b[i]) {
				same = false
				break
			}
		}
		if same {
			return points
		}
	}
	t.Fatalf("%s: Prometheus (-) and the adapter (+) differ:\n%s", desc, diffLines(a, b, 40))
	return 0
}

// closeLines reports whether two lines "metric @t value" differ only by a
// small relative error in the value.
func closeLines(a, b string) bool {
	ia, ib := strings.LastIndexByte(a, ' '), strings.LastIndexByte(b, ' ')
	if ia < 0 || ib < 0 || a[:ia] != b[:ib] {
		return false
	}
	va, errA := strconv.ParseFloat(a[ia+1:], 64)
	vb, errB := strconv.ParseFloat(b[ib+1:], 64)
	if errA != nil || errB != nil {
		return false
	}
	return va == vb || math.Abs(va-vb) <= 1e-9*math.Max(math.Abs(va), math.Abs(vb))
}

// compareJSON requires the same data and warnings from both for a lookup
// whose result is a list (labels, label values, series); order aside.
func compareJSON(t *testing.T, prom, adapterURL, path string, params url.Values) {
	t.Helper()
	desc := path + "?" + params.Encode()
	a, b := rawGet(t, prom+path+"?"+params.Encode()), rawGet(t, adapterURL+path+"?"+params.Encode())
	require.Equal(t, http.StatusOK, a.code, "Prometheus: %s: %s", desc, a.body)
	require.Equal(t, http.StatusOK, b.code, "adapter: %s: %s", desc, b.body)
	require.Equal(t, a.list(t), b.list(t), "%s: data", desc)
	require.Equal(t, a.Warnings, b.Warnings, "%s: warnings", desc)
}

type rawAnswer struct {
	code      int
	body      string
	status    string
	errorType string
	Warnings  []string
	data      json.RawMessage
}

func rawGet(t *testing.T, u string) rawAnswer {
	t.Helper()
	code, body, err := httpGet(u)
	require.NoError(t, err)
	var r struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Warnings  []string        `json:"warnings"`
		Data      json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &r), "%s: %s", u, body)
	return rawAnswer{code: code, body: body, status: r.Status, errorType: r.ErrorType, Warnings: r.Warnings, data: r.Data}
}

// list is the data as sorted strings: label values as they are, label sets
// as JSON objects (whose keys encoding/json sorts).
func (r rawAnswer) list(t *testing.T) []string {
	t.Helper()
	var items []json.RawMessage
	require.NoError(t, json.Unmarshal(r.data, &items), r.body)
	out := make([]string, 0, len(items))
	for _, it := range items {
		var v any
		require.NoError(t, json.Unmarshal(it, &v))
		b, err := json.Marshal(v)
		require.NoError(t, err)
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}
