package adapter

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/rwtest"
)

// timeout and tick pace require.Eventually.
const (
	timeout = 5 * time.Second
	tick    = 5 * time.Millisecond
)

const (
	ctV1 = "application/x-protobuf;proto=prometheus.WriteRequest"
	ctV2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
)

// marshaler is any gogo-generated message.
type marshaler interface{ Marshal() ([]byte, error) }

// encode marshals and snappy-compresses a message with klauspost's snappy,
// as client_golang's remote-write client does, so tests also check
// interoperability with golang/snappy, which the handlers use.
func encode(t testing.TB, m marshaler) []byte {
	t.Helper()
	b, err := m.Marshal()
	require.NoError(t, err)
	return snappy.Encode(nil, b)
}

func newTestHandler(t testing.TB, s Store, opts Options) (http.Handler, *prometheus.Registry) {
	t.Helper()
	if opts.SampleLimit == nil {
		opts.SampleLimit = withFakeBudget // the fake store's, as main.go passes the store's
	}
	reg := prometheus.NewRegistry()
	return New(s, opts, nil, reg), reg
}

// post sends a request through the handler with the given headers ("" leaves
// a header out).
func post(h http.Handler, path, contentType, encoding string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func writeV1Req(h http.Handler, req *prompb.WriteRequest) *httptest.ResponseRecorder {
	b, err := req.Marshal()
	if err != nil {
		panic(err)
	}
	return post(h, "/api/v1/write", ctV1, "snappy", snappy.Encode(nil, b))
}

func writeV2Req(h http.Handler, req *writev2.Request) *httptest.ResponseRecorder {
	b, err := req.Marshal()
	if err != nil {
		panic(err)
	}
	return post(h, "/api/v1/write", ctV2, "snappy", snappy.Encode(nil, b))
}

// requireWritten checks the three RW2 headers.
func requireWritten(t *testing.T, rec *httptest.ResponseRecorder, samples, histograms, exemplars int) {
	t.Helper()
	require.Equal(t, strconv.Itoa(samples), rec.Header().Get(headerSamplesWritten), "samples header; body: %s", rec.Body)
	require.Equal(t, strconv.Itoa(histograms), rec.Header().Get(headerHistogramsWritten), "histograms header")
	require.Equal(t, strconv.Itoa(exemplars), rec.Header().Get(headerExemplarsWritten), "exemplars header")
}

// requireNoWrittenHeaders checks a 1.0 (or unknown-version) answer carries
// none of the RW2 headers.
func requireNoWrittenHeaders(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	for _, hd := range []string{headerSamplesWritten, headerHistogramsWritten, headerExemplarsWritten} {
		require.Empty(t, rec.Header().Values(hd), hd)
	}
}

var v1Series = rwtest.V1Series

// v2Builder builds 2.0 requests with a symbol table.
type v2Builder struct {
	st  writev2.SymbolsTable
	req writev2.Request
}

func newV2Builder() *v2Builder { return &v2Builder{st: writev2.NewSymbolTable()} }

func (b *v2Builder) refs(lbls ...string) []uint32 {
	return b.st.SymbolizeLabels(labels.FromStrings(lbls...), nil)
}

func (b *v2Builder) add(ts writev2.TimeSeries) *v2Builder {
	b.req.Timeseries = append(b.req.Timeseries, ts)
	return b
}

func (b *v2Builder) build() *writev2.Request {
	b.req.Symbols = b.st.Symbols()
	return &b.req
}

// metricValue returns the value of the counter or gauge name with exactly the
// given label pairs, or 0 when that series does not exist.
func metricValue(t testing.TB, g prometheus.Gatherer, name string, labelPairs ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel())*2 != len(labelPairs) {
				continue
			}
			for i, lp := range m.GetLabel() {
				if lp.GetName() != labelPairs[2*i] || lp.GetValue() != labelPairs[2*i+1] {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}
