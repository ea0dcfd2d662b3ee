package adapter

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func serve(h http.Handler, method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

func TestRouting(t *testing.T) {
	h, _ := newTestHandler(t, newFakeStore(), Options{})
	for _, tc := range []struct {
		method, path string
		wantCode     int
		wantAllow    string
	}{
		{method: http.MethodGet, path: "/api/v1/write", wantCode: http.StatusMethodNotAllowed, wantAllow: "POST"},
		{method: http.MethodPut, path: "/write", wantCode: http.StatusMethodNotAllowed, wantAllow: "POST"},
		{method: http.MethodGet, path: "/api/v1/read", wantCode: http.StatusMethodNotAllowed, wantAllow: "POST"},
		{method: http.MethodDelete, path: "/read", wantCode: http.StatusMethodNotAllowed, wantAllow: "POST"},
		{method: http.MethodPost, path: "/metrics", wantCode: http.StatusMethodNotAllowed, wantAllow: "GET, HEAD"},
		{method: http.MethodPost, path: "/-/healthy", wantCode: http.StatusMethodNotAllowed, wantAllow: "GET, HEAD"},
		{method: http.MethodGet, path: "/", wantCode: http.StatusNotFound},
		{method: http.MethodPost, path: "/api/v2/write", wantCode: http.StatusNotFound},
		{method: http.MethodPost, path: "/api/v1/write/", wantCode: http.StatusNotFound},
		{method: http.MethodGet, path: "/-/healthy", wantCode: http.StatusOK},
		{method: http.MethodHead, path: "/-/healthy", wantCode: http.StatusOK},
		{method: http.MethodGet, path: "/-/ready", wantCode: http.StatusOK},
		{method: http.MethodGet, path: "/metrics", wantCode: http.StatusOK},
		{method: http.MethodGet, path: "/debug/pprof/", wantCode: http.StatusOK},
		{method: http.MethodGet, path: "/debug/pprof/heap", wantCode: http.StatusOK},
		{method: http.MethodPost, path: "/debug/pprof/heap", wantCode: http.StatusMethodNotAllowed, wantAllow: "GET, HEAD"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := serve(h, tc.method, tc.path)
			require.Equal(t, tc.wantCode, rec.Code, rec.Body.String())
			require.Equal(t, tc.wantAllow, rec.Header().Get("Allow"))
		})
	}
}

func TestReady(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	rec := serve(h, http.MethodGet, "/-/ready")
	require.Equal(t, http.StatusOK, rec.Code)

	s.readyErr = errors.New("no Cassandra host reachable")
	rec = serve(h, http.MethodGet, "/-/ready")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Contains(t, rec.Body.String(), "no Cassandra host reachable")
	// Health is about the process only.
	require.Equal(t, http.StatusOK, serve(h, http.MethodGet, "/-/healthy").Code)
}

func TestMetricsEndpoint(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	require.Equal(t, http.StatusNoContent, writeV2Req(h, v2Request()).Code)

	rec := serve(h, http.MethodGet, "/metrics")
	require.Equal(t, http.StatusOK, rec.Code)
	body := rec.Body.String()
	require.Contains(t, body, `kairos_adapter_written_samples_total{protocol="2.0"} 2`)
	require.Contains(t, body, `kairos_adapter_written_histograms_total{protocol="2.0"} 2`)
	require.Contains(t, body, `kairos_adapter_written_exemplars_total{protocol="2.0"} 1`)
	require.Contains(t, body, `kairos_adapter_request_duration_seconds_count{code="204",handler="write"} 1`)
	// Series labels never become metric labels.
	require.NotContains(t, body, "http_requests_total")

	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Contains(t, rec.Header().Get("Content-Type"), "application/openmetrics-text")
	require.True(t, strings.HasSuffix(rec.Body.String(), "# EOF\n"))

	// An explicit Gatherer wins; without any, /metrics is not served.
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "other_total", Help: "Other."}))
	h2 := New(s, Options{Gatherer: other}, nil, prometheus.NewRegistry())
	require.Contains(t, serve(h2, http.MethodGet, "/metrics").Body.String(), "other_total 0")
	h3 := New(s, Options{}, nil, nil)
	require.Equal(t, http.StatusNotFound, serve(h3, http.MethodGet, "/metrics").Code)
}
