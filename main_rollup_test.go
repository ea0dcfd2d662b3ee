package main

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"
)

// TestRollupJobWired: the program runs the rollup job over its store, the
// store's changes reach it, and the recomputation endpoint is mounted. A
// write into a closed unit (which the job found empty on start) is rolled
// up once its mark is old enough (rollupjob.Config.MarkSlack, 30 s), and the
// rollup series reads back through remote read.
func TestRollupJobWired(t *testing.T) {
	p := startRun(t, "--storage.path="+filepath.Join(t.TempDir(), "data"), "--rollup.delay=0s", "--web.enable-admin-api")
	base := "http://" + p.addr
	now := time.Now().UnixMilli()
	end := now - now%(6*time.Hour).Milliseconds() // a unit of the default 6h closed at once with no delay
	ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "wired"}, {Name: "job", Value: "a"}}}
	for i := int64(0); i < 60; i++ {
		ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: end - 59*60_000 + i*60_000, Value: float64(i)})
	}
	body, err := (&prompb.WriteRequest{Timeseries: []prompb.TimeSeries{ts}}).Marshal()
	require.NoError(t, err)
	post := func(path, contentType string, b []byte) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, bytes.NewReader(b))
		require.NoError(t, err)
		req.Header.Set("Content-Type", contentType)
		if contentType == "application/x-protobuf" {
			req.Header.Set("Content-Encoding", "snappy")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(out)
	}
	// The job's first unit is done, empty, before the write: only the
	// store's change report can make it roll the unit up again.
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return strings.Contains(string(b), `kairos_adapter_rollup_lag_seconds{resolution="6h"}`)
	}, time.Minute, 50*time.Millisecond)
	code, msg := post("/api/v1/write", "application/x-protobuf", snappy.Encode(nil, body))
	require.Equal(t, http.StatusNoContent, code, msg)

	read := func() []*prompb.TimeSeries {
		rr, err := (&prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: end - time.Hour.Milliseconds(), EndTimestampMs: end,
			Matchers: []*prompb.LabelMatcher{{Type: prompb.LabelMatcher_EQ, Name: "__name__", Value: "wired_rollup"}}}}}).Marshal()
		require.NoError(t, err)
		code, out := post("/api/v1/read", "application/x-protobuf", snappy.Encode(nil, rr))
		require.Equal(t, http.StatusOK, code, out)
		dec, err := snappy.Decode(nil, []byte(out))
		require.NoError(t, err)
		var res prompb.ReadResponse
		require.NoError(t, res.Unmarshal(dec))
		return res.Results[0].Timeseries
	}
	require.Eventually(t, func() bool { return len(read()) == 15 }, time.Minute, 100*time.Millisecond,
		"fifteen rollup series (the three default resolutions, five aggregates); log:\n%s", p.log)
	counts := 0
	for _, s := range read() {
		if r := labelValue(s, "rollup_resolution"); (r == "1h" || r == "6h") && labelValue(s, "rollup_aggregate") == "count" {
			require.Equal(t, []prompb.Sample{{Timestamp: end, Value: 60}}, s.Samples, r)
			counts++
		}
	}
	require.Equal(t, 2, counts)

	code, msg = post("/api/v1/admin/rollups/recompute", "application/x-www-form-urlencoded", []byte(url.Values{"match[]": {"wired"}}.Encode()))
	require.Equal(t, http.StatusOK, code, msg)
	require.Contains(t, msg, `"metrics":["wired"]`)
	require.Contains(t, p.stop(t), "Rollup job started")
}

func labelValue(s *prompb.TimeSeries, name string) string {
	for _, l := range s.Labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}
