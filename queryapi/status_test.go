package queryapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRuntimeInfoAndFlags: /api/v1/status/runtimeinfo answers with every
// key of Prometheus's RuntimeInfo, and /api/v1/status/flags with the flags
// it was given, in the envelope.
func TestRuntimeInfoAndFlags(t *testing.T) {
	start := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	h := newTestAPI(t, Options{Runtime: Runtime{StartTime: start, Retention: "30d", Flags: map[string]string{"query.timeout": "2m"}}})
	got := get(t, h, http.MethodGet, "/api/v1/status/runtimeinfo", nil)
	require.Equal(t, http.StatusOK, got.code, got.body)
	var r struct {
		Status string         `json:"status"`
		Data   map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(got.body), &r))
	require.Equal(t, "success", r.Status)
	keys := make([]string, 0, len(r.Data))
	for k := range r.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// Prometheus's web/api/v1.RuntimeInfo, v0.313.
	require.Equal(t, []string{"CWD", "GODEBUG", "GOGC", "GOMAXPROCS", "GOMEMLIMIT", "corruptionCount", "goroutineCount", "hostname",
		"lastConfigTime", "reloadConfigSuccess", "serverTime", "startTime", "storageRetention"}, keys)
	require.Equal(t, "2026-11-27T03:00:00Z", r.Data["startTime"])
	require.Equal(t, "30d", r.Data["storageRetention"])
	require.Equal(t, true, r.Data["reloadConfigSuccess"])
	require.Positive(t, r.Data["goroutineCount"])

	got = get(t, h, http.MethodGet, "/api/v1/status/flags", nil)
	require.Equal(t, http.StatusOK, got.code, got.body)
	require.JSONEq(t, `{"status":"success","data":{"query.timeout":"2m"}}`, got.body)

	got = get(t, newTestAPI(t, Options{}), http.MethodGet, "/api/v1/status/flags", nil)
	require.JSONEq(t, `{"status":"success","data":{}}`, got.body)
}
