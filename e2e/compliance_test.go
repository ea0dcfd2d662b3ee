package e2e

import (
	"encoding/json"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kairos-remote/kairos-adapter/internal/promqltest"
)

// compareCompliance asks the adapter and Prometheus every compliance query,
// as an instant query at two times and as a range query: the same answers,
// and the same refusals.
func compareCompliance(t *testing.T, prom, adapterURL string, t0 time.Time) {
	sec := func(d time.Duration) string { return strconv.FormatInt(t0.Add(d).Unix(), 10) }
	exprs, shouldFail := promqltest.ComplianceExprs()
	compare := func(path string, params url.Values) {
		t.Helper()
		a := rawGet(t, prom+path+"?"+params.Encode())
		if a.code == 200 && len(a.Warnings) == 0 {
			compareAnswers(t, prom, adapterURL, path, params)
			return
		}
		// Refusals and answers with warnings: the same status, error
		// type, warnings and data.
		b := rawGet(t, adapterURL+path+"?"+params.Encode())
		if a.code != b.code || a.errorType != b.errorType || !slices.Equal(a.Warnings, b.Warnings) || !jsonEqual(a.data, b.data) {
			t.Fatalf("%s?%s: Prometheus answered %d %s, the adapter %d %s", path, params.Encode(), a.code, a.body, b.code, b.body)
		}
	}
	for _, expr := range exprs {
		for _, at := range []time.Duration{0, -17*time.Minute - 30*time.Second} {
			compare("/api/v1/query", url.Values{"query": {expr}, "time": {sec(at)}})
		}
		// Twice: the second answer comes from the adapter's results
		// cache.
		for range 2 {
			compare("/api/v1/query_range", url.Values{"query": {expr}, "start": {sec(-45 * time.Minute)}, "end": {sec(0)}, "step": {"90"}})
		}
	}
	for _, expr := range shouldFail {
		for _, path := range []string{"/api/v1/query", "/api/v1/query_range"} {
			q := "query=" + url.QueryEscape(expr) + "&time=" + sec(0) + "&start=" + sec(-10*time.Minute) + "&end=" + sec(0) + "&step=60"
			pa, pb := rawGet(t, prom+path+"?"+q), rawGet(t, adapterURL+path+"?"+q)
			if pa.code == 200 {
				t.Fatalf("%s %s: Prometheus accepted it: %s", path, expr, pa.body)
			}
			if pa.code != pb.code || pa.errorType != pb.errorType {
				t.Fatalf("%s %s: Prometheus answered %d %s, the adapter %d %s", path, expr, pa.code, pa.body, pb.code, pb.body)
			}
		}
	}
	t.Logf("%d compliance queries and %d refusals answered as Prometheus answers them", len(exprs), len(shouldFail))
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && reflect.DeepEqual(sortedResult(va), sortedResult(vb))
}

// sortedResult orders the series of a query answer: the engine's order
// is that of a map for some functions (histogram_quantile), in Prometheus
// too.
func sortedResult(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if items, ok := m["result"].([]any); ok {
		slices.SortFunc(items, func(x, y any) int {
			bx, _ := json.Marshal(x)
			by, _ := json.Marshal(y)
			return strings.Compare(string(bx), string(by))
		})
	}
	return m
}
