package queryapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FuzzQuery sends any expression with any parameters to the query
// endpoints: the handler must not crash, must answer JSON in Prometheus's
// envelope with a status that matches it, and must answer by the timeout
// plus a small slack, however the expression is built.
func FuzzQuery(f *testing.F) {
	for _, q := range []string{
		`count_over_time(vector(1)[1y:1ms])`,
		`rate(c_total[7d:1ms])`,
		`max_over_time(rate(c_total[5m])[30d:1m])`,
		`sum by (i) (rate(c_total[5m]))`,
		`histogram_quantile(0.9, rate(h[5m]))`,
		`label_replace(c_total, "x", "$1$1", "i", "(.*)")`,
		`((((((1))))))`,
		`x + x + x + x`,
		`topk(1e18, c_total)`,
		`quantile_over_time(0.5, c_total[1y])`,
		`count_values("v", c_total)`,
		`c_total @ 1e15 offset -1000y`,
		`vector(1e300) * -1e-300`,
		`"str"`,
		`sort_desc(d)`,
	} {
		f.Add(q, "600", "0", "600", "15", "")
	}
	f.Add(`sum(`, "x", "1", "0", "-1", "1ms")
	h := mount(New(newTestStore(f), withBudget(Options{Timeout: time.Second, MaxSamples: 100_000, Limits: Limits{MaxSubquerySteps: 200_000}}), nil, prometheus.NewRegistry()), http.NotFoundHandler())
	const slack = time.Second
	f.Fuzz(func(t *testing.T, q, ts, start, end, step, timeout string) {
		for _, c := range []struct {
			path string
			form url.Values
		}{
			{"/api/v1/query", url.Values{"query": {q}, "time": {ts}, "timeout": {timeout}}},
			{"/api/v1/query_range", url.Values{"query": {q}, "start": {start}, "end": {end}, "step": {step}, "timeout": {timeout}}},
			{"/api/v1/format_query", url.Values{"query": {q}}},
			{"/api/v1/parse_query", url.Values{"query": {q}}},
		} {
			began := time.Now()
			got := get(t, h, http.MethodPost, c.path, c.form)
			if took := time.Since(began); took > time.Second+slack {
				t.Fatalf("%s %q: answered after %v, past the 1 s timeout and %v slack", c.path, q, took, slack)
			}
			var r response
			if err := json.Unmarshal([]byte(got.body), &r); err != nil {
				t.Fatalf("%s %q: not JSON (%v): %.200s", c.path, q, err, got.body)
			}
			switch {
			case r.Status == "success" && got.code == http.StatusOK:
			case r.Status == "error" && got.code == r.ErrorType.status():
			default:
				t.Fatalf("%s %q: status %d with %s", c.path, q, got.code, strconv.Quote(got.body[:min(200, len(got.body))]))
			}
		}
	})
}
