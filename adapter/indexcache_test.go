package adapter_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/adapter"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/queryapi"
)

// TestAdminDeleteThenWriteIndexesAtOnce: the write handler keeps handles on
// the store's series across requests, and the store marks a handle's row
// indexed for the index-cache TTL. A delete through the admin API removes
// the index rows, so the next write must write them again at once, not a
// TTL later, although it goes through a handle kept from before.
func TestAdminDeleteThenWriteIndexesAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) engine.Engine
	}{
		{"pebble", openPebbleEngine},
		{"cassandra", openCassandraEngine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eng := tc.open(t)
			require.NoError(t, eng.Setup(t.Context()))
			// An hour: only the delete can make the store write the
			// index rows again.
			store, err := kairosstore.Open(t.Context(), eng, kairosstore.Options{IndexCacheTTL: time.Hour}, nil, nil)
			require.NoError(t, err)
			// The admin API is the query API's, in the route table beside
			// the adapter's as main.go puts it.
			rt := adapter.NewRoutes(nil)
			adapter.NewHandlers(kairosStore{store}, adapter.Options{SeriesCacheTTL: time.Hour}, nil, prometheus.NewRegistry()).Register(rt.Handle)
			queryapi.New(store, queryapi.Options{EnableAdminAPI: true}, nil, prometheus.NewRegistry()).Register(rt.Handle)
			srv := httptest.NewServer(rt)
			defer srv.Close()

			ts := time.Now().UnixMilli()
			remoteWrite(t, srv.URL, ts, 1)
			remoteWrite(t, srv.URL, ts+1000, 2) // through the handle the first request left
			require.Equal(t, []string{
				fmt.Sprintf(`{__name__="reindexed", job="x"} @%d 1`, ts),
				fmt.Sprintf(`{__name__="reindexed", job="x"} @%d 2`, ts+1000),
			}, readStored(t, srv.Client(), srv.URL))

			resp, err := srv.Client().PostForm(srv.URL+"/api/v1/admin/tsdb/delete_series", url.Values{"match[]": {`{__name__="reindexed"}`}})
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusNoContent, resp.StatusCode)
			require.Empty(t, readStored(t, srv.Client(), srv.URL))

			remoteWrite(t, srv.URL, ts+2000, 3)
			require.Equal(t, []string{fmt.Sprintf(`{__name__="reindexed", job="x"} @%d 3`, ts+2000)}, readStored(t, srv.Client(), srv.URL),
				"the write right after the delete wrote the index rows again")
		})
	}
}

// remoteWrite sends one remote-write 1.0 request of one float sample.
func remoteWrite(t *testing.T, url string, ts int64, v float64) {
	t.Helper()
	req := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  []prompb.Label{{Name: "__name__", Value: "reindexed"}, {Name: "job", Value: "x"}},
		Samples: []prompb.Sample{{Timestamp: ts, Value: v}},
	}}}
	b, err := req.Marshal()
	require.NoError(t, err)
	hreq, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/api/v1/write", bytes.NewReader(snappy.Encode(nil, b)))
	require.NoError(t, err)
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	hreq.Header.Set("Content-Encoding", "snappy")
	resp, err := http.DefaultClient.Do(hreq)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusNoContent, resp.StatusCode, string(body))
}
