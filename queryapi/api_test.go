package queryapi

import (
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/enginetest"
)

func TestParseTime(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Time
		err  string
	}{
		{in: "0", want: time.Unix(0, 0)},
		{in: "1700000000", want: time.Unix(1700000000, 0)},
		{in: "1700000000.123", want: time.UnixMilli(1700000000123)},
		// Rounded to the millisecond, as Prometheus rounds.
		{in: "1700000000.1236", want: time.UnixMilli(1700000000124)},
		{in: "-1.5", want: time.UnixMilli(-1500)},
		{in: "2023-11-14T22:13:20Z", want: time.Unix(1700000000, 0)},
		{in: "2023-11-14T22:13:20.5+01:00", want: time.UnixMilli(1699996400500)},
		{in: minTimeText, want: minTime},
		{in: maxTimeText, want: maxTime},
		{in: "yesterday", err: `cannot parse "yesterday" to a valid timestamp`},
		{in: "", err: `cannot parse "" to a valid timestamp`},
		// Prometheus's parser takes these, each becoming whatever int64
		// conversion leaves of it.
		{in: "NaN", err: `cannot parse "NaN" to a valid timestamp: not a finite number`},
		{in: "-nan", err: `cannot parse "-nan" to a valid timestamp`},
		{in: "+Inf", err: `cannot parse "+Inf" to a valid timestamp: not a finite number`},
		{in: "-Infinity", err: `cannot parse "-Infinity" to a valid timestamp: not a finite number`},
		{in: "1e300", err: `cannot parse "1e300" to a valid timestamp: outside ` + minTimeText + ` to ` + maxTimeText},
		{in: "-1e300", err: `cannot parse "-1e300" to a valid timestamp: outside ` + minTimeText + ` to ` + maxTimeText},
		{in: "1e999", err: `cannot parse "1e999" to a valid timestamp: outside ` + minTimeText + ` to ` + maxTimeText},
		{in: "9223372036854775807", err: `cannot parse "9223372036854775807" to a valid timestamp: outside ` + minTimeText + ` to ` + maxTimeText},
		{in: "-9223309901257976", err: `cannot parse "-9223309901257976" to a valid timestamp: outside ` + minTimeText + ` to ` + maxTimeText},
		{in: "-9223309901257974", want: minTime},
		{in: "-0", want: time.Unix(0, 0)},
		{in: "0x1p4", want: time.Unix(16, 0)},
	} {
		got, err := parseTime(c.in)
		if c.err != "" {
			require.EqualError(t, err, c.err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		require.True(t, c.want.Equal(got), "%s: got %v, want %v", c.in, got, c.want)
	}
}

func TestParseDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "15", want: 15 * time.Second},
		{in: "0.5", want: 500 * time.Millisecond},
		{in: "5m", want: 5 * time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "1d", want: 24 * time.Hour},
		{in: "1e30", err: `cannot parse "1e30" to a valid duration. It overflows int64`},
		{in: "5 minutes", err: `cannot parse "5 minutes" to a valid duration`},
	} {
		got, err := parseDuration(c.in)
		if c.err != "" {
			require.EqualError(t, err, c.err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
}

// newTestAPI serves the API over newTestStore.
//
// newTestStore is a real embedded store holding two counter
// series (a and b) and one native histogram series, with samples every 15 s
// from 0 to 600 s.
func newTestAPI(t *testing.T, opts Options) http.Handler {
	t.Helper()
	return mount(New(newTestStore(t), withBudget(opts), nil, prometheus.NewRegistry()), http.NotFoundHandler())
}

// withBudget gives opts the store's sample budget, as main.go does.
func withBudget(opts Options) Options {
	opts.SampleLimit = kairosstore.WithSampleLimit
	return opts
}

func newTestStore(t testing.TB) *kairosstore.Store {
	t.Helper()
	ctx := context.Background()
	store, err := kairosstore.Open(ctx, openEngine(t, "pebble"), kairosstore.Options{MaxMetrics: 2}, nil, nil)
	require.NoError(t, err)
	app := store.NewAppender()
	for ts := int64(0); ts <= 600_000; ts += 15_000 {
		require.NoError(t, errOf(app.Append(0, labels.FromStrings("__name__", "c_total", "i", "a"), ts, float64(ts/1000))))
		require.NoError(t, errOf(app.Append(0, labels.FromStrings("__name__", "c_total", "i", "b"), ts, float64(ts/500))))
		require.NoError(t, errOf(app.AppendHistogram(0, labels.FromStrings("__name__", "h"), ts, &histogram.Histogram{
			Count: 2, Sum: 3, ZeroThreshold: 0.001, ZeroCount: 1,
			PositiveSpans: []histogram.Span{{Offset: 0, Length: 1}}, PositiveBuckets: []int64{1},
		}, nil)))
	}
	require.NoError(t, errOf(app.Append(0, labels.FromStrings("__name__", "d", "i", "x"), 0, 1)))
	require.NoError(t, errOf(app.Append(0, labels.FromStrings("__name__", "d", "i", "x"), 60_000, 3)))
	require.NoError(t, app.Commit(ctx))
	return store
}

type answer struct {
	code int
	body string
}

func get(t testing.TB, h http.Handler, method, path string, form url.Values) answer {
	t.Helper()
	var req *http.Request
	if method == http.MethodPost {
		req = httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, path+"?"+form.Encode(), nil)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return answer{rec.Code, string(b)}
}

// TestAnswers pins the JSON of each result type and of the errors, byte for
// byte, as Prometheus's API writes them.
func TestAnswers(t *testing.T) {
	h := newTestAPI(t, Options{})
	cases := []struct {
		name   string
		path   string
		form   url.Values
		code   int
		answer string
	}{
		{name: "vector", path: "/api/v1/query", form: url.Values{"query": {"c_total"}, "time": {"600"}}, code: 200,
			answer: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"c_total","i":"a"},"value":[600,"600"]},{"metric":{"__name__":"c_total","i":"b"},"value":[600,"1200"]}]}}`},
		{name: "matrix", path: "/api/v1/query_range", form: url.Values{"query": {"c_total"}, "start": {"300"}, "end": {"330.5"}, "step": {"30"}}, code: 200,
			answer: `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"c_total","i":"a"},"values":[[300,"300"],[330,"330"]]},{"metric":{"__name__":"c_total","i":"b"},"values":[[300,"600"],[330,"660"]]}]}}`},
		{name: "matrix of a function", path: "/api/v1/query_range", form: url.Values{"query": {"c_total * 2"}, "start": {"300"}, "end": {"300"}, "step": {"30"}}, code: 200,
			answer: `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"i":"a"},"values":[[300,"600"]]},{"metric":{"i":"b"},"values":[[300,"1200"]]}]}}`},
		{name: "scalar", path: "/api/v1/query", form: url.Values{"query": {"1.5"}, "time": {"1.25"}}, code: 200,
			answer: `{"status":"success","data":{"resultType":"scalar","result":[1.25,"1.5"]}}`},
		{name: "string", path: "/api/v1/query", form: url.Values{"query": {`"x"`}, "time": {"2"}}, code: 200,
			answer: `{"status":"success","data":{"resultType":"string","result":[2,"x"]}}`},
		{name: "special floats", path: "/api/v1/query", form: url.Values{"query": {"vector(1/0) or label_replace(vector(-1/0), \"s\", \"n\", \"\", \"\")"}, "time": {"0"}}, code: 200,
			answer: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[0,"+Inf"]},{"metric":{"s":"n"},"value":[0,"-Inf"]}]}}`},
		{name: "native histogram", path: "/api/v1/query", form: url.Values{"query": {"h"}, "time": {"600"}}, code: 200,
			answer: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"h"},"histogram":[600,{"count":"2","sum":"3","buckets":[[3,"-0.001","0.001","1"],[0,"0.5","1","1"]]}]}]}}`},
		{name: "limit", path: "/api/v1/query", form: url.Values{"query": {"c_total"}, "time": {"600"}, "limit": {"1"}}, code: 200,
			answer: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"c_total","i":"a"},"value":[600,"600"]}]},"warnings":["results truncated due to limit"]}`},
		{name: "info annotation", path: "/api/v1/query", form: url.Values{"query": {"rate(d[2m])"}, "time": {"60"}}, code: 200,
			answer: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"i":"x"},"value":[60,"0.025"]}]},"infos":["PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: \"d\" (1:6)"]}`},
		{name: "series", path: "/api/v1/series", form: url.Values{"match[]": {"c_total", `{__name__="h"}`}}, code: 200,
			answer: `{"status":"success","data":[{"__name__":"c_total","i":"a"},{"__name__":"c_total","i":"b"},{"__name__":"h"}]}`},
		{name: "labels", path: "/api/v1/labels", form: url.Values{"match[]": {`{__name__=~"c_total|h"}`}}, code: 200,
			answer: `{"status":"success","data":["__name__","i"]}`},
		{name: "metric names", path: "/api/v1/label/__name__/values", form: url.Values{}, code: 200,
			answer: `{"status":"success","data":["c_total","d","h"]}`},
		{name: "label values", path: "/api/v1/label/i/values", form: url.Values{"match[]": {"c_total"}}, code: 200,
			answer: `{"status":"success","data":["a","b"]}`},
		{name: "no label values", path: "/api/v1/label/nope/values", form: url.Values{"match[]": {"c_total"}}, code: 200,
			answer: `{"status":"success","data":[]}`},
		{name: "escaped label name", path: "/api/v1/label/U__i/values", form: url.Values{"match[]": {"c_total"}}, code: 200,
			answer: `{"status":"success","data":["a","b"]}`},
		{name: "format", path: "/api/v1/format_query", form: url.Values{"query": {"sum  by(i)(c_total)"}}, code: 200,
			answer: `{"status":"success","data":"sum by (i) (c_total)"}`},
		{name: "exemplars of no store", path: "/api/v1/query_exemplars", form: url.Values{"query": {"c_total"}}, code: 200,
			answer: `{"status":"success","data":[]}`},

		{name: "parse error", path: "/api/v1/query", form: url.Values{"query": {"sum(c_total"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:12: parse error: unclosed left parenthesis"}`},
		{name: "bad time", path: "/api/v1/query", form: url.Values{"query": {"c_total"}, "time": {"x"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"time\": invalid time value for 'time': cannot parse \"x\" to a valid timestamp"}`},
		{name: "bad timeout", path: "/api/v1/query", form: url.Values{"query": {"c_total"}, "timeout": {"soon"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"timeout\": cannot parse \"soon\" to a valid duration"}`},
		{name: "bad lookback", path: "/api/v1/query", form: url.Values{"query": {"c_total"}, "lookback_delta": {"x"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"error parsing lookback delta duration: cannot parse \"x\" to a valid duration"}`},
		{name: "negative limit", path: "/api/v1/query", form: url.Values{"query": {"c_total"}, "limit": {"-1"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"limit\": limit must be non-negative"}`},
		{name: "no start", path: "/api/v1/query_range", form: url.Values{"query": {"c_total"}, "end": {"1"}, "step": {"1"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"start\": cannot parse \"\" to a valid timestamp"}`},
		{name: "end before start", path: "/api/v1/query_range", form: url.Values{"query": {"c_total"}, "start": {"2"}, "end": {"1"}, "step": {"1"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"end\": end timestamp must not be before start time"}`},
		{name: "zero step", path: "/api/v1/query_range", form: url.Values{"query": {"c_total"}, "start": {"1"}, "end": {"2"}, "step": {"0"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"step\": zero or negative query resolution step widths are not accepted. Try a positive integer"}`},
		{name: "too many points", path: "/api/v1/query_range", form: url.Values{"query": {"c_total"}, "start": {"0"}, "end": {"11001"}, "step": {"1"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"}`},
		// time.Time.Sub saturates at 292 years: 2·10^10 steps counted as
		// 10,670, and the read planner walked them all.
		{name: "too many points between Prometheus's bounds", path: "/api/v1/query_range", form: url.Values{"query": {"c_total"}, "start": {minTimeText}, "end": {maxTimeText}, "step": {"864000"}, "timeout": {"3s"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"}`},
		{name: "too many points between Prometheus's bounds in seconds", path: "/api/v1/query_range", form: url.Values{"query": {"count_over_time(c_total[1y])"}, "start": {"-9223309901257974"}, "end": {"9223309901257974"}, "step": {"864000"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"}`},
		{name: "NaN time", path: "/api/v1/query", form: url.Values{"query": {"c_total"}, "time": {"NaN"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"time\": invalid time value for 'time': cannot parse \"NaN\" to a valid timestamp: not a finite number"}`},
		{name: "NaN start", path: "/api/v1/query_range", form: url.Values{"query": {"c_total"}, "start": {"NaN"}, "end": {"1"}, "step": {"1"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"start\": cannot parse \"NaN\" to a valid timestamp: not a finite number"}`},
		{name: "infinite end", path: "/api/v1/query_range", form: url.Values{"query": {"c_total"}, "start": {"1"}, "end": {"+Inf"}, "step": {"1"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"end\": cannot parse \"+Inf\" to a valid timestamp: not a finite number"}`},
		{name: "series from 1e300", path: "/api/v1/series", form: url.Values{"match[]": {"c_total"}, "start": {"1e300"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"start\": invalid time value for 'start': cannot parse \"1e300\" to a valid timestamp: outside -292273086-05-16T16:47:06Z to 292277025-08-18T07:12:54.999999999Z"}`},
		{name: "labels to -Inf", path: "/api/v1/labels", form: url.Values{"match[]": {"c_total"}, "end": {"-Inf"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"end\": invalid time value for 'end': cannot parse \"-Inf\" to a valid timestamp: not a finite number"}`},
		{name: "exemplars from NaN", path: "/api/v1/query_exemplars", form: url.Values{"query": {"c_total"}, "start": {"NaN"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"start\": invalid time value for 'start': cannot parse \"NaN\" to a valid timestamp: not a finite number"}`},
		{name: "range of a range vector", path: "/api/v1/query_range", form: url.Values{"query": {"c_total[1m]"}, "start": {"1"}, "end": {"2"}, "step": {"1"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": invalid expression type \"range vector\" for range query, must be Scalar or instant Vector"}`},
		{name: "series without match", path: "/api/v1/series", form: url.Values{}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"no match[] parameter provided"}`},
		{name: "series of everything", path: "/api/v1/series", form: url.Values{"match[]": {`{i=~".*"}`}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"match[] must contain at least one non-empty matcher"}`},
		{name: "invalid label name", path: "/api/v1/label/%ff/values", form: url.Values{}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"invalid label name: \"\\xff\""}`},
		// The store refuses a selector over more than --query.max-metrics
		// names (2 here): the caller's fault, as in remote read.
		{name: "store refuses", path: "/api/v1/query", form: url.Values{"query": {`{i=~"a|x"}`}, "time": {"1"}}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"expanding series: the selector matches more than 2 metric names (--query.max-metrics); add a __name__ matcher"}`},
		// Label names of every series read the row keys of every metric:
		// also bounded by --query.max-metrics.
		{name: "labels over max-metrics", path: "/api/v1/labels", form: url.Values{}, code: 400,
			answer: `{"status":"error","errorType":"bad_data","error":"the selector matches more than 2 metric names (--query.max-metrics); add a __name__ matcher"}`},
	}
	for _, c := range cases {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			if strings.Contains(c.path, "/label/") && method == http.MethodPost {
				continue // GET only, as in Prometheus
			}
			got := get(t, h, method, c.path, c.form)
			require.Equal(t, c.code, got.code, "%s %s: %s", method, c.name, got.body)
			require.JSONEq(t, c.answer, got.body, "%s %s", method, c.name)
		}
	}
}

// TestLimits checks the answers Prometheus gives when a query is too big or
// too slow: 422 execution over --query.max-samples (the store's budget of
// loaded samples, and the engine's count of what it holds), 503 timeout past the timeout.
func TestLimits(t *testing.T) {
	h := newTestAPI(t, Options{MaxSamples: 10})
	got := get(t, h, http.MethodGet, "/api/v1/query", url.Values{"query": {"sum(count_over_time(c_total[10m]))"}, "time": {"600"}})
	require.Equal(t, http.StatusUnprocessableEntity, got.code, got.body)
	require.JSONEq(t, `{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory in query execution"}`, got.body)
	// The query reads 2 series x 40 samples; the engine holds at most 42
	// at once, so it is the store's budget of loaded samples that refuses
	// one less than 80, with the engine's answer.
	for limit, code := range map[int]int{79: http.StatusUnprocessableEntity, 80: http.StatusOK, 0: http.StatusOK} {
		h := newTestAPI(t, Options{MaxSamples: limit})
		got := get(t, h, http.MethodGet, "/api/v1/query", url.Values{"query": {"sum(count_over_time(c_total[10m]))"}, "time": {"600"}})
		require.Equal(t, code, got.code, "limit %d: %s", limit, got.body)
		if code != http.StatusOK {
			require.JSONEq(t, `{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory in query execution"}`, got.body)
		}
	}

	// What the engine holds counts too, as in Prometheus: a range query at
	// a 1 s step loads 2 x 41 samples, within a limit of 100, but holds
	// 2 x 601 points, so it is refused; at 1,202 it is answered.
	for limit, code := range map[int]int{100: http.StatusUnprocessableEntity, 1202: http.StatusOK} {
		h = newTestAPI(t, Options{MaxSamples: limit})
		got = get(t, h, http.MethodGet, "/api/v1/query_range", url.Values{"query": {"c_total"}, "start": {"0"}, "end": {"600"}, "step": {"1"}})
		require.Equal(t, code, got.code, "limit %d: %s", limit, got.body)
	}

	h = newTestAPI(t, Options{Timeout: time.Nanosecond})
	got = get(t, h, http.MethodGet, "/api/v1/query", url.Values{"query": {"c_total"}, "time": {"600"}})
	require.Equal(t, http.StatusServiceUnavailable, got.code, got.body)
	var r response
	require.NoError(t, json.Unmarshal([]byte(got.body), &r))
	require.Equal(t, errTimeout, r.ErrorType, got.body)
}

// TestBuildInfo checks the shape Grafana reads and the version mapping.
func TestBuildInfo(t *testing.T) {
	for in, want := range map[string]string{"v0.313.5": "3.13.5", "v0.300.0": "3.0.0", "v0.55.1": "0.55.1", "(devel)": "(devel)"} {
		require.Equal(t, want, promRelease(in), in)
	}
	h := newTestAPI(t, Options{})
	got := get(t, h, http.MethodGet, "/api/v1/status/buildinfo", nil)
	require.Equal(t, http.StatusOK, got.code)
	var r struct {
		Status string            `json:"status"`
		Data   map[string]string `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(got.body), &r))
	require.Equal(t, "success", r.Status)
	for _, k := range []string{"version", "revision", "branch", "buildUser", "buildDate", "goVersion"} {
		require.Contains(t, r.Data, k)
	}
	require.True(t, strings.HasPrefix(r.Data["goVersion"], "go"), r.Data["goVersion"])
}

// rangeRecorder records the ranges of the queriers opened on a store.
type rangeRecorder struct {
	Store
	mu     sync.Mutex
	ranges [][2]int64
}

func (r *rangeRecorder) Querier(mint, maxt int64) (storage.Querier, error) {
	r.mu.Lock()
	r.ranges = append(r.ranges, [2]int64{mint, maxt})
	r.mu.Unlock()
	return r.Store.Querier(mint, maxt)
}

// TestSelectorRanges checks that each selector is read over its own range
// (offset, range, lookback), not over the range of the whole query.
func TestSelectorRanges(t *testing.T) {
	rec := &rangeRecorder{Store: newTestStore(t)}
	h := mount(New(rec, Options{}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
	got := get(t, h, http.MethodGet, "/api/v1/query", url.Values{"query": {"c_total - c_total offset 5m + sum_over_time(c_total[1m] @ 100)"}, "time": {"600"}})
	require.Equal(t, http.StatusOK, got.code, got.body)
	slices.SortFunc(rec.ranges, func(a, b [2]int64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	require.Equal(t, [][2]int64{
		{1, 300_000},       // offset 5m: (300 s - 5m lookback, 300 s]
		{1, 600_000},       // the whole query, opened by the engine
		{40_001, 100_000},  // [1m] @ 100: (40 s, 100 s]
		{300_001, 600_000}, // c_total: (600 s - 5m, 600 s]
	}, rec.ranges)
}

// startingStore is a store that cannot answer yet, as the adapter's store
// while it connects to Cassandra.
type startingStore struct{}

type unavailableError struct{}

func (unavailableError) Error() string        { return "the store is still starting" }
func (unavailableError) Is(target error) bool { return target == storeerr.ErrUnavailable }

func (startingStore) Querier(int64, int64) (storage.Querier, error) { return nil, unavailableError{} }

func TestStoreStarting(t *testing.T) {
	h := mount(New(startingStore{}, Options{}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
	for _, c := range []struct {
		path string
		form url.Values
	}{
		{"/api/v1/query", url.Values{"query": {"up"}}},
		{"/api/v1/query_range", url.Values{"query": {"up"}, "start": {"0"}, "end": {"60"}, "step": {"15"}}},
		{"/api/v1/series", url.Values{"match[]": {"up"}}},
		{"/api/v1/labels", nil},
		{"/api/v1/label/job/values", nil},
	} {
		got := get(t, h, http.MethodGet, c.path, c.form)
		require.Equal(t, http.StatusServiceUnavailable, got.code, "%s: %s", c.path, got.body)
		require.JSONEq(t, `{"status":"error","errorType":"unavailable","error":"the store is still starting"}`, got.body, c.path)
	}
}

// TestGate checks --query.max-concurrency: a query waits for a free slot,
// and gives up when its context ends first.
func TestGate(t *testing.T) {
	g := newGate(1)
	require.Equal(t, 1, g.GetMaxConcurrent())
	_, err := g.Insert(context.Background(), "a")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = g.Insert(ctx, "b")
	require.ErrorIs(t, err, context.Canceled, "the slot is taken")
	done := make(chan error)
	go func() {
		_, err := g.Insert(context.Background(), "c")
		done <- err
	}()
	g.Delete(0)
	require.NoError(t, <-done, "a freed slot admits the waiting query")
}

// mount serves the query API's routes as the adapter's mux does, and every
// other request with next.
func mount(a *API, next http.Handler) http.Handler {
	mux := http.NewServeMux()
	a.Register(func(pattern, _ string, h http.Handler) { mux.Handle(pattern, h) })
	mux.Handle("/", next)
	return mux
}

// TestUnknownPathsPassThrough checks that the query API registers no route
// beyond its own, so the adapter's mux keeps every other path.
func TestUnknownPathsPassThrough(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := mount(New(startingStore{}, Options{}, nil, prometheus.NewRegistry()), next)
	for _, p := range []string{"/api/v1/write", "/api/v1/admin/tsdb/delete_series", "/metrics", "/api/v1/query/x"} {
		require.Equal(t, http.StatusTeapot, get(t, h, http.MethodGet, p, nil).code, p)
	}
}

// TestGzip checks that an answer is gzipped when the client accepts it, and
// is then the same answer.
func TestGzip(t *testing.T) {
	h := newTestAPI(t, Options{})
	form := url.Values{"query": {"c_total"}, "start": {"0"}, "end": {"600"}, "step": {"15"}}
	plain := get(t, h, http.MethodGet, "/api/v1/query_range", form)
	require.Equal(t, http.StatusOK, plain.code)
	for accept, gzipped := range map[string]bool{"gzip": true, "deflate, gzip;q=1.0": true, "gzip;q=0": false, "": false, "br": false} {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/query_range?"+form.Encode(), nil)
		req.Header.Set("Accept-Encoding", accept)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code)
		body := io.Reader(rec.Body)
		if gzipped {
			require.Equal(t, "gzip", rec.Header().Get("Content-Encoding"), accept)
			zr, err := gzip.NewReader(rec.Body)
			require.NoError(t, err)
			body = zr
		} else {
			require.Empty(t, rec.Header().Get("Content-Encoding"), accept)
		}
		b, err := io.ReadAll(body)
		require.NoError(t, err)
		require.Equal(t, plain.body, string(b), accept)
	}
}

// errOf is the error of an Append call, for tests that need no ref.
func errOf(_ storage.SeriesRef, err error) error { return err }

// TestStorePanicAnswers500: a store read that panics (on a read-ahead
// goroutine) fails the query as the adapter's own fault, 500 internal
// naming the panic, not 422 as the expression's; the process serves on.
func TestStorePanicAnswers500(t *testing.T) {
	ctx := context.Background()
	store, err := kairosstore.Open(ctx, &enginetest.PanicCells{Engine: openEngine(t, "pebble"), Bad: []byte("i=b:")}, kairosstore.Options{}, nil, nil)
	require.NoError(t, err)
	app := store.NewAppender()
	for _, i := range []string{"a", "b"} {
		require.NoError(t, errOf(app.Append(0, labels.FromStrings("__name__", "c_total", "i", i), 0, 1)))
	}
	require.NoError(t, app.Commit(ctx))
	h := mount(New(store, Options{}, nil, prometheus.NewRegistry()), http.NotFoundHandler())

	got := get(t, h, http.MethodPost, "/api/v1/query", url.Values{"query": {"sum(c_total)"}, "time": {"0"}})
	require.Equal(t, http.StatusInternalServerError, got.code, got.body)
	require.Contains(t, got.body, `"errorType":"internal"`)
	require.Contains(t, got.body, `panicked: no codec expected this`)
	got = get(t, h, http.MethodPost, "/api/v1/query", url.Values{"query": {`c_total{i="a"}`}, "time": {"0"}})
	require.Equal(t, http.StatusOK, got.code, got.body)
}
