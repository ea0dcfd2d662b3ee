package adapter_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/adapter"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
)

// gatedStore is the real store whose first commit closes reached and waits
// for gate, so one request can be held in flight.
type gatedStore struct {
	kairosStore
	gate, reached chan struct{}
	first         *sync.Once
}

func (s gatedStore) NewAppender() adapter.Appender {
	a := gatedAppender{Appender: s.Store.NewAppender()}
	s.first.Do(func() { a.gate, a.reached = s.gate, s.reached })
	return a
}

type gatedAppender struct {
	adapter.Appender
	gate, reached chan struct{}
}

func (a gatedAppender) Commit(ctx context.Context) error {
	if a.gate != nil {
		close(a.reached)
		<-a.gate
	}
	return a.Appender.Commit(ctx)
}

// TestWriteByteBudget holds one write in flight on the real store and sends
// a second that does not fit the rest of the budget: it is answered 503,
// counted, and stores nothing, and is stored when retried after the first.
// A request larger than the whole budget is served alone.
func TestWriteByteBudget(t *testing.T) {
	t.Run("pebble", func(t *testing.T) { testWriteByteBudget(t, openPebbleStore(t)) })
	t.Run("cassandra", func(t *testing.T) { testWriteByteBudget(t, openCassandraStore(t)) })
}

func testWriteByteBudget(t *testing.T, s *kairosstore.Store) {
	body := func(metric string, samples int) []byte {
		ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: metric}, {Name: "job", Value: "budget"}}}
		for i := range samples {
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: int64(1000 * (i + 1)), Value: float64(i)})
		}
		b, err := (&prompb.WriteRequest{Timeseries: []prompb.TimeSeries{ts}}).Marshal()
		require.NoError(t, err)
		return snappy.Encode(nil, b)
	}
	first, second, huge := body("first", 100), body("second", 100), body("huge", 1000)
	limit := adapter.WriteCost(first, 1<<20) + adapter.WriteCost(second, 1<<20) - 1
	require.Greater(t, adapter.WriteCost(huge, 1<<20), limit)

	gate, reached := make(chan struct{}), make(chan struct{})
	reg := prometheus.NewRegistry()
	h := adapter.New(gatedStore{kairosStore{s}, gate, reached, new(sync.Once)}, adapter.Options{MaxWriteBytesInFlight: limit}, nil, reg)
	send := func(b []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/write", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/x-protobuf;proto=prometheus.WriteRequest")
		req.Header.Set("Content-Encoding", "snappy")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	stored := func(metric string) int {
		q, err := s.Querier(0, 1<<40)
		require.NoError(t, err)
		defer q.Close()
		ss := q.Select(t.Context(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", metric))
		n := 0
		for ss.Next() {
			it := ss.At().Iterator(nil)
			for it.Next() != 0 {
				n++
			}
		}
		require.NoError(t, ss.Err())
		return n
	}

	var wg sync.WaitGroup
	held := make(chan int, 1)
	wg.Go(func() { held <- send(first).Code })
	// The first request holds its reservation once it commits. (Being
	// counted in flight is not enough: the count comes before the
	// reservation, and a second request sent in between got the gated
	// commit and waited for ever.)
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not reach its commit")
	}
	require.Equal(t, 1.0, handlerMetric(t, reg, "kairos_adapter_inflight_requests", "write"))

	rec := send(second)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "would exceed the")
	require.Contains(t, rec.Body.String(), "--web.max-write-bytes-in-flight")
	require.Equal(t, 1.0, handlerMetric(t, reg, "kairos_adapter_concurrency_limit_rejections_total", "write_bytes"))
	// Larger than the whole budget, while something else is in flight.
	require.Equal(t, http.StatusServiceUnavailable, send(huge).Code)

	close(gate)
	wg.Wait()
	require.Equal(t, http.StatusNoContent, <-held)
	require.Equal(t, 100, stored("first"))
	require.Zero(t, stored("second"), "a refused request stores nothing")
	require.Zero(t, stored("huge"))

	// Retried, as Prometheus does, once the budget has room.
	require.Equal(t, http.StatusNoContent, send(second).Code)
	require.Equal(t, 100, stored("second"))
	// Alone, a request larger than the budget is served.
	require.Equal(t, http.StatusNoContent, send(huge).Code)
	require.Equal(t, 1000, stored("huge"))
}

// handlerMetric is the value of a gauge or counter of one handler label.
func handlerMetric(t *testing.T, g prometheus.Gatherer, name, handler string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == handler {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

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
