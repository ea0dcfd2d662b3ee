package e2e

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// absentAggregations are the queries over a metric that does not exist
// that the PromQL compliance tester asks: every aggregation, function and
// operator must answer an empty result as Prometheus writes it ([]), not
// null, or clients built on Prometheus's Go client fail to decode it.
var absentAggregations = []string{
	`sum(nonexistent_metric)`, `avg(nonexistent_metric)`, `min(nonexistent_metric)`, `max(nonexistent_metric)`,
	`count(nonexistent_metric)`, `stddev(nonexistent_metric)`, `stdvar(nonexistent_metric)`, `group(nonexistent_metric)`,
	`quantile(0.5, nonexistent_metric)`, `topk(3, nonexistent_metric)`, `bottomk(3, nonexistent_metric)`,
	`count_values("v", nonexistent_metric)`, `limitk(2, nonexistent_metric)`, `limit_ratio(0.5, nonexistent_metric)`,
	`sum by (job) (nonexistent_metric)`, `avg without (instance) (nonexistent_metric)`,
	`nonexistent_metric`, `rate(nonexistent_metric[5m])`, `sum(rate(nonexistent_metric[5m]))`,
	`histogram_quantile(0.9, rate(nonexistent_metric[5m]))`, `abs(nonexistent_metric)`, `timestamp(nonexistent_metric)`,
	`nonexistent_metric > 1`, `1 + nonexistent_metric`, `nonexistent_metric * on (job) temperature`,
	`temperature and nonexistent_metric`, `temperature unless temperature`, `label_replace(nonexistent_metric, "a", "b", "c", "d")`,
	`max_over_time(nonexistent_metric[5m:1m])`, `sort(nonexistent_metric)`, `scalar(nonexistent_metric)`,
}

// compareBytes requires the adapter's answer to be Prometheus's, status and
// body byte for byte, for answers that depend on nothing but the request:
// how floats are written (1e+300, not 301 digits), empty results ([], not
// null), forms that are multipart or malformed.
func compareBytes(t *testing.T, prom, adapterURL string, t0 time.Time) {
	sec := func(d time.Duration) string { return strconv.FormatInt(t0.Add(d).Unix(), 10) }
	get := func(path string, params url.Values) request {
		return request{method: http.MethodGet, path: path + "?" + params.Encode()}
	}
	inst := func(q string) request { return get("/api/v1/query", url.Values{"query": {q}, "time": {sec(0)}}) }
	rng := func(q string) request {
		return get("/api/v1/query_range", url.Values{"query": {q}, "start": {sec(-50 * time.Minute)}, "end": {sec(0)}, "step": {"300"}})
	}
	var reqs []request
	for _, v := range []string{"1e300", "-1e-300", "1e21", "1e20", "123456789.125", "0.000001", "0.0000001", "-0", "NaN", "Inf", "-Inf", "5e-324", "1.7976931348623157e308"} {
		reqs = append(reqs, inst("vector("+v+")"), inst(v), rng("vector("+v+")"))
	}
	for _, q := range absentAggregations {
		reqs = append(reqs, inst(q))
		if !strings.HasPrefix(q, "sort") {
			reqs = append(reqs, rng(q))
		}
	}
	for _, q := range []string{`temperature`, `http_requests_total{instance="a"} * 1e-9`, `native_latency_seconds`, `label_replace(vector(1), "a", "<b>&'\"", "", "")`, `temperature * 1e25`, `sum by (room) (temperature)`} {
		reqs = append(reqs, inst(q), rng(q))
	}
	reqs = append(reqs,
		get("/api/v1/series", url.Values{"match[]": {"nonexistent_metric"}}),
		get("/api/v1/labels", url.Values{"match[]": {"nonexistent_metric"}}),
		get("/api/v1/label/nothing/values", nil),
		get("/api/v1/label/job/values", url.Values{"match[]": {"nonexistent_metric"}}),
		get("/api/v1/query_exemplars", url.Values{"query": {"nonexistent_metric"}}),
		// The envelope of /api/v1/metadata, now the query API's.
		get("/api/v1/metadata", url.Values{"metric": {"nonexistent_metric"}}),
		get("/api/v1/metadata", url.Values{"limit": {"abc"}}),
		// Malformed parts of a form are ignored, except by /series.
		request{method: http.MethodGet, path: "/api/v1/query?query=vector(1)&x=%zz&time=" + sec(0)},
		request{method: http.MethodGet, path: "/api/v1/series?match[]=temperature&x=%zz"},
		request{method: http.MethodGet, path: "/api/v1/labels?x=%zz&match[]=temperature"},
		request{method: http.MethodPost, path: "/api/v1/query", contentType: "application/x-www-form-urlencoded", body: "query=vector(2)&x=%zz&time=" + sec(0)},
		request{method: http.MethodPost, path: "/api/v1/query", contentType: "foo/;;", body: "query=vector(3)&time=" + sec(0)},
		request{method: http.MethodPost, path: "/api/v1/query?time=" + sec(0), contentType: "application/x-www-form-urlencoded", body: "query=vector(4)%"},
	)
	// A multipart form, as curl -F sends it. max, not sum: a range query
	// of a sum is sharded, and a sum of sums may differ from Prometheus's
	// in the last digit (README, "Range queries in parts"), which this
	// byte-for-byte comparison of form parsing is not about.
	for _, path := range []string{"/api/v1/query", "/api/v1/query_range", "/api/v1/series", "/api/v1/format_query"} {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		for k, v := range map[string]string{"query": "max(temperature)", "match[]": "temperature", "time": sec(0), "start": sec(-10 * time.Minute), "end": sec(0), "step": "60"} {
			require.NoError(t, mw.WriteField(k, v))
		}
		require.NoError(t, mw.Close())
		reqs = append(reqs, request{method: http.MethodPost, path: path, contentType: mw.FormDataContentType(), body: body.String()})
	}
	for _, r := range reqs {
		codeA, bodyA := r.do(t, prom)
		codeB, bodyB := r.do(t, adapterURL)
		require.Equal(t, codeA, codeB, "%s: status; Prometheus answered %s, the adapter %s", r, bodyA, bodyB)
		require.Equal(t, bodyA, bodyB, "%s: body", r)
	}
	t.Logf("%d answers equal to Prometheus's byte for byte", len(reqs))
}

type request struct {
	method, path, contentType, body string
}

func (r request) String() string {
	return r.method + " " + r.path + " " + r.contentType + " " + r.body[:min(len(r.body), 80)]
}

func (r request) do(t *testing.T, base string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.method, base+r.path, strings.NewReader(r.body))
	require.NoError(t, err)
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, r.String())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
