package web_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/queryapi"
	"github.com/kairos-remote/kairos-adapter/web"
)

// newUI serves the UI over a real store on the embedded engine, with
// one-hour row windows.
func newUI(t *testing.T) (http.Handler, *kairosstore.Store) {
	return newUIMax(t, 0)
}

// newUIMax is newUI with --query.max-metrics at maxMetrics.
func newUIMax(t *testing.T, maxMetrics int) (http.Handler, *kairosstore.Store) {
	ctx := context.Background()
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	require.NoError(t, eng.Setup(ctx))
	reg := prometheus.NewRegistry()
	s, err := kairosstore.Open(ctx, eng, kairosstore.Options{RowWidth: time.Hour, TagIndexed: map[string][]string{"b": nil}, RowKeysCacheBytes: 64 << 20}, nil, reg)
	require.NoError(t, err)
	ui := web.New(web.Options{Store: func() web.Store { return s }, Config: map[string]string{"k": "v"},
		Status: func() web.Status {
			return web.Status{Engine: map[string]string{"engine": "embedded"}, Store: s.Status()}
		}, API: api(s), MaxMetrics: maxMetrics})
	mux := http.NewServeMux()
	ui.Register(func(pattern, _ string, h http.Handler) { mux.Handle(pattern, h) })
	return mux, s
}

// api serves the JSON endpoints in the query API's envelope, as main.go
// wires them.
func api(s queryapi.Store) func(string, func(*http.Request) (any, []string, error)) http.Handler {
	return queryapi.New(s, queryapi.Options{}, nil, prometheus.NewRegistry()).JSON
}

func get(t *testing.T, h http.Handler, url string) (int, map[string]any) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, url, nil))
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	return rec.Code, body
}

// The explorer counts row_keys entries per row window and data type.
func TestMetricsSeriesPerWindow(t *testing.T) {
	h, s := newUI(t)
	app := s.NewAppender()
	const hour = int64(time.Hour / time.Millisecond)
	for i, inst := range []string{"x", "y", "z"} {
		ls := labels.FromStrings("__name__", "a", "instance", inst)
		_, err := app.Append(0, ls, 10, 1)
		require.NoError(t, err)
		if i < 2 { // two of the three go on into the second window
			_, err = app.Append(0, ls, hour+10, 2)
			require.NoError(t, err)
		}
	}
	_, err := app.AppendHistogram(0, labels.FromStrings("__name__", "b"), hour+20, nil, &histogram.FloatHistogram{Count: 1, Sum: 1, ZeroCount: 1, ZeroThreshold: 0.001})
	require.NoError(t, err)
	require.NoError(t, app.SetMetadata("a", metadata.Metadata{Type: "counter", Help: "Requests.", Unit: "requests"}))
	require.NoError(t, app.Commit(context.Background()))
	// A read of one series of a, so that the index counters move.
	q, err := s.Querier(0, 2*hour)
	require.NoError(t, err)
	ss := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "a"), labels.MustNewMatcher(labels.MatchEqual, "instance", "x"))
	for ss.Next() {
	}
	require.NoError(t, ss.Err())
	require.NoError(t, q.Close())

	code, body := get(t, h, "/api/v1/status/metrics?start=0&end=7199.999")
	require.Equal(t, http.StatusOK, code, body)
	got, err := json.Marshal(body["data"].(map[string]any)["metrics"])
	require.NoError(t, err)
	require.JSONEq(t, `[
	  {"name":"a","series":3,"type":"counter","help":"Requests.","unit":"requests","tagIndexed":false,
	   "dataTypes":["kairos_double"],"indexEntriesScanned":5,"indexEntriesSelected":2,
	   "windows":[{"start":0,"series":3,"dataTypes":{"kairos_double":3},"cached":false},
	              {"start":3600000,"series":2,"dataTypes":{"kairos_double":2},"cached":false}]},
	  {"name":"b","series":1,"type":"","help":"","unit":"","tagIndexed":true,
	   "dataTypes":["prom_float_histogram"],"indexEntriesScanned":0,"indexEntriesSelected":0,
	   "windows":[{"start":3600000,"series":1,"dataTypes":{"prom_float_histogram":1},"cached":false}]}
	]`, string(got))

	// One window only, one metric, the top one only.
	for url, want := range map[string][]string{
		"/api/v1/status/metrics?start=3600&end=7199":                   {"a:2", "b:1"},
		"/api/v1/status/metrics?start=0&end=3599":                      {"a:3", "b:0"},
		"/api/v1/status/metrics?start=0&end=7199&metric=b":             {"b:1"},
		"/api/v1/status/metrics?start=0&end=7199&limit=1":              {"a:3"},
		"/api/v1/status/metrics?start=1970-01-01T01:00:00Z&end=7199.5": {"a:2", "b:1"},
	} {
		code, body := get(t, h, url)
		require.Equal(t, http.StatusOK, code, url)
		var names []string
		for _, m := range body["data"].(map[string]any)["metrics"].([]any) {
			m := m.(map[string]any)
			names = append(names, fmt.Sprint(m["name"], ":", m["series"]))
		}
		require.Equal(t, want, names, url)
	}
}

func TestMetricsBadInput(t *testing.T) {
	h, _ := newUI(t)
	for url, msg := range map[string]string{
		"/api/v1/status/metrics?start=yesterday":   `invalid parameter "start": cannot parse "yesterday" to a valid timestamp`,
		"/api/v1/status/metrics?end=NaN":           `invalid parameter "end": cannot parse "NaN" to a valid timestamp: not a finite number`,
		"/api/v1/status/metrics?start=-Inf":        `invalid parameter "start": cannot parse "-Inf" to a valid timestamp: not a finite number`,
		"/api/v1/status/metrics?start=10&end=5":    "end timestamp must not be before start time",
		"/api/v1/status/metrics?limit=-1":          "limit must be a non-negative number",
		"/api/v1/status/metrics?start=0&end=1e301": `invalid parameter "end": cannot parse "1e301" to a valid timestamp: outside -292273086-05-16T16:47:06Z to 292277025-08-18T07:12:54.999999999Z`,
	} {
		code, body := get(t, h, url)
		require.Equal(t, http.StatusBadRequest, code, url)
		require.Equal(t, map[string]any{"status": "error", "errorType": "bad_data", "error": msg}, body, url)
	}
	// Prometheus's bounds, which Grafana sends back, are times like any.
	code, body := get(t, h, "/api/v1/status/metrics?start=-292273086-05-16T16:47:06Z&end=292277025-08-18T07:12:54.999999999Z")
	require.Equal(t, http.StatusOK, code, body)
}

func TestStatusAndStarting(t *testing.T) {
	h, _ := newUI(t)
	code, body := get(t, h, "/api/v1/status/adapter")
	require.Equal(t, http.StatusOK, code)
	data := body["data"].(map[string]any)
	require.Equal(t, "k: v\n", data["config"])
	require.Equal(t, "embedded", data["engine"].(map[string]any)["engine"])
	store := data["store"].(map[string]any)
	require.Equal(t, "1h", store["row_width"])
	require.Equal(t, "MILLISECONDS", store["row_time_unit"])
	require.Equal(t, true, data["ready"])

	starting := web.New(web.Options{Store: func() web.Store { return nil }, API: api(nil)})
	mux := http.NewServeMux()
	starting.Register(func(pattern, _ string, h http.Handler) { mux.Handle(pattern, h) })
	code, body = get(t, mux, "/api/v1/status/metrics")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "unavailable", body["errorType"])
	code, body = get(t, mux, "/api/v1/status/adapter")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, false, body["data"].(map[string]any)["ready"])
	require.Nil(t, body["data"].(map[string]any)["store"])
}

// Every page is the same document; the assets are embedded.
func TestPages(t *testing.T) {
	h, _ := newUI(t)
	for _, path := range []string{"/", "/graph", "/explore", "/status", "/static/app.js", "/static/app.css"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, rec.Code, path)
		require.NotZero(t, rec.Body.Len(), path)
	}
	// The file server sends /static/index.html to the folder, /static/,
	// whose name is empty once the prefix is stripped: it serves the page.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/static/index.html", nil))
	require.Equal(t, http.StatusMovedPermanently, rec.Code)
	require.Equal(t, "./", rec.Header().Get("Location"))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/static/", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "<html")
	// A name no file can have is not found either, not a server error
	// (Go's file server answers 500 to invalid UTF-8).
	for _, path := range []string{"/nope", "/static/nope.js", "/static/%FF%FE", "/static/a%00b"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusNotFound, rec.Code, path)
	}

	// A browser revalidates the assets rather than loading them again.
	for _, path := range []string{"/graph", "/static/app.js"} {
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		etag := rec.Header().Get("ETag")
		require.Regexp(t, `^"[0-9a-f]{64}"$`, etag, path)
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("If-None-Match", etag)
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusNotModified, rec.Code, path)
	}

	// The bundle goes gzipped to a browser that accepts it.
	plain := httptest.NewRecorder()
	h.ServeHTTP(plain, httptest.NewRequest(http.MethodGet, "/static/app.js", nil))
	req := httptest.NewRequest(http.MethodGet, "/static/app.js", nil)
	req.Header.Set("Accept-Encoding", "gzip, deflate, br")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "gzip", rec.Header().Get("Content-Encoding"))
	require.Contains(t, rec.Header().Get("Content-Type"), "javascript")
	require.NotEqual(t, plain.Header().Get("ETag"), rec.Header().Get("ETag"))
	zr, err := gzip.NewReader(rec.Body)
	require.NoError(t, err)
	unzipped, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.Equal(t, plain.Body.Bytes(), unzipped)
	require.Less(t, rec.Body.Len(), plain.Body.Len()/2)
}

// TestMetricsBoundedByMaxMetrics: without metric=, the explorer counts at
// most --query.max-metrics metrics, the first in byte order, and says so
// (truncated, the total, a warning); a named metric is counted whatever
// the bound.
func TestMetricsBoundedByMaxMetrics(t *testing.T) {
	h, s := newUIMax(t, 2)
	app := s.NewAppender()
	for _, name := range []string{"c", "a", "b"} {
		_, err := app.Append(0, labels.FromStrings("__name__", name), 10, 1)
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit(context.Background()))
	names := func(body map[string]any) []string {
		var out []string
		for _, m := range body["data"].(map[string]any)["metrics"].([]any) {
			out = append(out, m.(map[string]any)["name"].(string))
		}
		return out
	}

	code, body := get(t, h, "/api/v1/status/metrics?start=0&end=3599")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, []string{"a", "b"}, names(body))
	require.Equal(t, true, body["data"].(map[string]any)["truncated"])
	require.Equal(t, 3.0, body["data"].(map[string]any)["metricsTotal"])
	require.Equal(t, []any{"results truncated: 2 of 3 metrics counted (--query.max-metrics); name one with metric= to count it"}, body["warnings"])

	code, body = get(t, h, "/api/v1/status/metrics?start=0&end=3599&metric=c")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, []string{"c"}, names(body))
	require.Equal(t, false, body["data"].(map[string]any)["truncated"])
	require.Nil(t, body["warnings"])

	h, _ = newUIMax(t, 3)
	_, body = get(t, h, "/api/v1/status/metrics?start=0&end=3599")
	require.Equal(t, false, body["data"].(map[string]any)["truncated"], "at the bound: not truncated")
}

// TestStatusCacheBytes: the status reports the kept row_keys listings in
// bytes against their budget once a read kept one.
func TestStatusCacheBytes(t *testing.T) {
	h, s := newUI(t)
	app := s.NewAppender()
	_, err := app.Append(0, labels.FromStrings("__name__", "a", "i", "1"), 10, 1)
	require.NoError(t, err)
	require.NoError(t, app.Commit(context.Background()))
	_, body := get(t, h, "/api/v1/status/adapter")
	listings := func(body map[string]any) map[string]any {
		return body["data"].(map[string]any)["store"].(map[string]any)["row_keys_listings"].(map[string]any)
	}
	require.Equal(t, 0.0, listings(body)["bytes"])
	for range 2 { // a window is kept from its second listing
		q, err := s.Querier(0, 3599)
		require.NoError(t, err)
		ss := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "a"))
		for ss.Next() {
		}
		require.NoError(t, ss.Err())
		require.NoError(t, q.Close())
	}
	// The listing is built beside the read and cached when done.
	var kept map[string]any
	require.Eventually(t, func() bool {
		_, body = get(t, h, "/api/v1/status/adapter")
		kept = listings(body)
		return kept["listings"] == 1.0
	}, 30*time.Second, 10*time.Millisecond)
	require.Greater(t, kept["bytes"], 0.0)
	require.LessOrEqual(t, kept["bytes"], kept["max_bytes"])
	require.Equal(t, float64(64<<20), kept["max_bytes"])
	require.Equal(t, 2.0, kept["lookups"].(map[string]any)["miss"], "the index reads its own lookup counter: both reads missed, the second kept its listing")
}

// panicCounts is the store whose series counts panic.
type panicCounts struct{ web.Store }

func (panicCounts) SeriesCounts(context.Context, string, int64, int64, func(int64, string, int, bool)) error {
	panic("no codec expected this")
}

// TestExplorerPanicAnswers500: a series count that panics on the
// explorer's own goroutine fails the request as the adapter's fault, 500
// internal naming the panic, not 503 as a store that cannot answer yet;
// the process serves on.
func TestExplorerPanicAnswers500(t *testing.T) {
	_, s := newUI(t)
	ui := web.New(web.Options{Store: func() web.Store { return panicCounts{s} }, API: api(s)})
	mux := http.NewServeMux()
	ui.Register(func(pattern, _ string, h http.Handler) { mux.Handle(pattern, h) })
	code, body := get(t, mux, "/api/v1/status/metrics?metric=a")
	require.Equal(t, http.StatusInternalServerError, code, body)
	require.Equal(t, "internal", body["errorType"])
	require.Contains(t, body["error"], "the series count of a panicked: no codec expected this")
}
