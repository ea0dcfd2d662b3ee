package adapter_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/adapter"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
)

// TestReadSampleLimitOnStore: a remote read's --query.max-samples is the
// store's budget (kairosstore.WithSampleLimit, as main.go wires it), the
// same mechanism as a PromQL query's: on a real store, a query of 300
// samples is refused at 299, both response types, and answered at 300.
func TestReadSampleLimitOnStore(t *testing.T) {
	store := openPebbleStore(t)
	app := store.NewAppender()
	ls := labels.FromStrings("__name__", "limited")
	for i := range 300 {
		_, err := app.Append(0, ls, int64(i)*1000, float64(i))
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit(t.Context()))
	rr, err := (&prompb.ReadRequest{Queries: []*prompb.Query{{
		StartTimestampMs: 0, EndTimestampMs: 300_000,
		Matchers: []*prompb.LabelMatcher{{Type: prompb.LabelMatcher_EQ, Name: "__name__", Value: "limited"}},
	}}}).Marshal()
	require.NoError(t, err)
	for _, streamed := range []bool{false, true} {
		for limit, code := range map[int]int{299: http.StatusBadRequest, 300: http.StatusOK} {
			srv := httptest.NewServer(adapter.New(kairosStore{store}, adapter.Options{MaxSamplesPerQuery: limit, SampleLimit: kairosstore.WithSampleLimit}, nil, prometheus.NewRegistry()))
			body := rr
			if streamed {
				var req prompb.ReadRequest
				require.NoError(t, req.Unmarshal(rr))
				req.AcceptedResponseTypes = []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS}
				body, err = req.Marshal()
				require.NoError(t, err)
			}
			hreq, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/api/v1/read", bytes.NewReader(snappy.Encode(nil, body)))
			require.NoError(t, err)
			hreq.Header.Set("Content-Type", "application/x-protobuf")
			hreq.Header.Set("Content-Encoding", "snappy")
			resp, err := srv.Client().Do(hreq)
			require.NoError(t, err)
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			srv.Close()
			require.Equal(t, code, resp.StatusCode, "streamed %v, limit %d: %s", streamed, limit, got)
			if code != http.StatusOK {
				require.Contains(t, string(got), "exceeded sample limit (299)")
			}
		}
	}
}
