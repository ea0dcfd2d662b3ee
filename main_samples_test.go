package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"
)

// TestQueryMaxSamplesWired: --query.max-samples reaches the store's sample
// budget: a query reading 2 series of 30 samples is refused with
// Prometheus's answer at --query.max-samples=59 and answered at 60. The
// engine holds one series' 30 samples at a time, so without the budget
// wired it would answer both.
func TestQueryMaxSamplesWired(t *testing.T) {
	for limit, code := range map[int]int{59: http.StatusUnprocessableEntity, 60: http.StatusOK} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			p := startRun(t, "--storage=embedded", "--storage.path="+filepath.Join(t.TempDir(), "data"), fmt.Sprintf("--query.max-samples=%d", limit))
			var samples []prompb.Sample
			for i := range 30 {
				samples = append(samples, prompb.Sample{Timestamp: int64(i) * 2000, Value: float64(i)})
			}
			b, err := (&prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
				{Labels: []prompb.Label{{Name: "__name__", Value: "m"}, {Name: "i", Value: "a"}}, Samples: samples},
				{Labels: []prompb.Label{{Name: "__name__", Value: "m"}, {Name: "i", Value: "b"}}, Samples: samples},
			}}).Marshal()
			require.NoError(t, err)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+p.addr+"/api/v1/write", bytes.NewReader(snappy.Encode(nil, b)))
			require.NoError(t, err)
			req.Header.Set("Content-Encoding", "snappy")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusNoContent, resp.StatusCode)

			resp, err = http.Get("http://" + p.addr + "/api/v1/query?" + url.Values{"query": {"sum(count_over_time(m[1m]))"}, "time": {"59"}}.Encode())
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, code, resp.StatusCode, string(body))
			if code == http.StatusOK {
				require.Contains(t, string(body), `"value":[59,"60"]`)
			} else {
				require.JSONEq(t, `{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory in query execution"}`, string(body))
			}
		})
	}
}
