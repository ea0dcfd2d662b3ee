package adapter_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/adapter"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/queryapi"
	"github.com/kairos-remote/kairos-adapter/rollup"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

// TestRollupsThroughRemoteRead: the rollup job's series are ordinary series
// of their own name to remote read: a selector of x_rollup returns them
// with their tags, and one of x returns x's raw series alone. The
// recomputation endpoint marks a metric's units in service_index and
// refuses bad input with 400.
func TestRollupsThroughRemoteRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) engine.Engine
	}{
		{"pebble", openPebbleEngine},
		{"cassandra", openCassandraEngine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := openStore(t, tc.open(t))
			now := time.Now()
			hour := time.Hour.Milliseconds()
			end := now.UnixMilli() - now.UnixMilli()%hour - hour // a closed unit's end
			app := store.NewAppender()
			ls := labels.FromStrings("__name__", "x", "job", "a")
			for ts := end - hour + 60_000; ts <= end; ts += 60_000 {
				_, err := app.Append(0, ls, ts, float64((ts-end+hour)/60_000)) // 1 to 60, rising
				require.NoError(t, err)
			}
			require.NoError(t, app.Commit(t.Context()))

			j, err := rollupjob.New(store, rollupjob.Config{
				Resolutions: []rollup.Resolution{rollup.Resolution(5 * time.Minute), rollup.Resolution(time.Hour)},
				Delay:       10 * time.Minute, Owner: "test",
			}, nil, prometheus.NewRegistry())
			require.NoError(t, err)
			for {
				worked, err := j.Step(t.Context())
				require.NoError(t, err)
				if !worked {
					break
				}
			}

			// The recomputation endpoint is the query API's, mounted as
			// main.go mounts it.
			rt := adapter.NewRoutes(nil)
			adapter.NewHandlers(kairosStore{store}, adapter.Options{}, nil, prometheus.NewRegistry()).Register(rt.Handle)
			queryapi.New(store, queryapi.Options{EnableAdminAPI: true, Rollups: func() queryapi.Recomputer { return j }}, nil, prometheus.NewRegistry()).Register(rt.Handle)
			srv := httptest.NewServer(rt)
			defer srv.Close()

			got := remoteRead(t, srv.Client(), srv.URL, end-hour, end,
				&prompb.LabelMatcher{Type: prompb.LabelMatcher_EQ, Name: "__name__", Value: "x_rollup"},
				&prompb.LabelMatcher{Type: prompb.LabelMatcher_EQ, Name: "rollup_aggregate", Value: "max"})
			require.Len(t, got, 2, "5m and 1h")
			var fiveMin *prompb.TimeSeries
			for _, s := range got {
				if labelOf(s, "rollup_resolution") == "5m" {
					fiveMin = s
				}
			}
			require.Equal(t, []prompb.Label{
				{Name: "__name__", Value: "x_rollup"}, {Name: "job", Value: "a"}, {Name: "rollup_aggregate", Value: "max"},
				{Name: "rollup_resolution", Value: "5m"}, {Name: "saved_from", Value: "x"},
			}, fiveMin.Labels)
			require.Len(t, fiveMin.Samples, 12)
			for i, s := range fiveMin.Samples {
				bucketEnd := end - hour + int64(i+1)*5*60_000
				require.Equal(t, bucketEnd, s.Timestamp)
				require.Equal(t, float64((bucketEnd-end+hour)/60_000), s.Value, "the max of a rising count is the bucket's last")
			}

			raw := remoteRead(t, srv.Client(), srv.URL, end-hour, end, &prompb.LabelMatcher{Type: prompb.LabelMatcher_EQ, Name: "__name__", Value: "x"})
			require.Len(t, raw, 1, "rollups are not series of x")
			require.Len(t, raw[0].Samples, 60)

			// The recomputation endpoint.
			post := func(form url.Values) (int, string) {
				resp, err := srv.Client().PostForm(srv.URL+"/api/v1/admin/rollups/recompute", form)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp.StatusCode, string(b)
			}
			code, body := post(url.Values{"match[]": {"{__name__=~\"x|y\"}"}, "start": {"0"}, "end": {"4102444800"}})
			require.Equal(t, http.StatusOK, code, body)
			var res struct {
				Data struct{ Metrics []string }
			}
			require.NoError(t, json.Unmarshal([]byte(body), &res))
			require.Equal(t, []string{"x"}, res.Data.Metrics)
			var marks []string
			require.NoError(t, store.ServiceKeys(t.Context(), rollup.Service, rollup.ServiceKey, "dirty.", func(k string) error {
				marks = append(marks, k)
				return nil
			}))
			require.Len(t, marks, 1)
			require.True(t, strings.HasSuffix(marks[0], ".x"), marks[0])
			for _, bad := range []url.Values{
				{"match[]": {"{"}},
				{"start": {"10"}, "end": {"5"}},
				{"start": {"yesterday"}},
			} {
				code, body := post(bad)
				require.Equal(t, http.StatusBadRequest, code, "%v: %s", bad, body)
			}
		})
	}
}

func labelOf(s *prompb.TimeSeries, name string) string {
	for _, l := range s.Labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// remoteRead sends one remote-read query and returns its series.
func remoteRead(t *testing.T, client *http.Client, url string, start, end int64, ms ...*prompb.LabelMatcher) []*prompb.TimeSeries {
	t.Helper()
	rr := prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: start, EndTimestampMs: end, Matchers: ms}}}
	b, err := rr.Marshal()
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/api/v1/read", bytes.NewReader(snappy.Encode(nil, b)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "read: %s", body)
	dec, err := snappy.Decode(nil, body)
	require.NoError(t, err)
	var res prompb.ReadResponse
	require.NoError(t, res.Unmarshal(dec))
	require.Len(t, res.Results, 1)
	return res.Results[0].Timeseries
}
