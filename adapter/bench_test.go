package adapter

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"testing"

	gsnappy "github.com/golang/snappy"
	"github.com/klauspost/compress/s2"
	ksnappy "github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/stretchr/testify/require"
)

// benchSamples is the size of a benchmarked write request.
const benchSamples = 10_000

// benchLabels is a realistic label set, what a node_exporter scrape looks
// like (~100 bytes of labels), one sample per series as Prometheus batches.
func benchLabels(i int) labels.Labels {
	return labels.FromStrings(
		"__name__", fmt.Sprintf("node_cpu_seconds_total_%d", i%200),
		"cpu", fmt.Sprint(i%64),
		"instance", fmt.Sprintf("10.0.%d.%d:9100", i/64/256, i/64%256),
		"job", "node",
		"mode", []string{"idle", "user", "system", "iowait"}[i%4],
	)
}

func benchV1Request() *prompb.WriteRequest {
	req := &prompb.WriteRequest{}
	for i := range benchSamples {
		req.Timeseries = append(req.Timeseries, prompb.TimeSeries{
			Labels:  prompb.FromLabels(benchLabels(i), nil),
			Samples: []prompb.Sample{{Timestamp: 1_700_000_000_000 + int64(i), Value: float64(i) * 1.37}},
		})
	}
	return req
}

func benchV2Request() *writev2.Request {
	st := writev2.NewSymbolTable()
	req := &writev2.Request{}
	help := st.Symbolize("Seconds the CPUs spent in each mode.")
	for i := range benchSamples {
		req.Timeseries = append(req.Timeseries, writev2.TimeSeries{
			LabelsRefs: st.SymbolizeLabels(benchLabels(i), nil),
			Samples:    []writev2.Sample{{Timestamp: 1_700_000_000_000 + int64(i), Value: float64(i) * 1.37}},
			Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_COUNTER, HelpRef: help},
		})
	}
	req.Symbols = st.Symbols()
	return req
}

// BenchmarkSnappy compares the two snappy packages in go.mod on a realistic
// ~1 MB remote-write payload (10,000 samples, one per series).
func BenchmarkSnappy(b *testing.B) {
	raw, err := benchV1Request().Marshal()
	require.NoError(b, err)
	b.Logf("payload: %d bytes raw, %d golang/snappy, %d klauspost/snappy, %d s2 fast", len(raw), len(gsnappy.Encode(nil, raw)), len(ksnappy.Encode(nil, raw)), len(s2.EncodeSnappy(nil, raw)))
	for _, lib := range []struct {
		name   string
		encode func(dst, src []byte) []byte
		decode func(dst, src []byte) ([]byte, error)
	}{
		{name: "golang", encode: gsnappy.Encode, decode: gsnappy.Decode},
		{name: "klauspost", encode: ksnappy.Encode, decode: ksnappy.Decode},
		// s2's fast snappy-compatible mode; klauspost's snappy.Encode is
		// s2.EncodeSnappyBetter.
		{name: "klauspost-s2fast", encode: s2.EncodeSnappy, decode: ksnappy.Decode},
	} {
		enc := lib.encode(nil, raw)
		b.Run(lib.name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			dst := make([]byte, gsnappy.MaxEncodedLen(len(raw)))
			for b.Loop() {
				lib.encode(dst, raw)
			}
		})
		b.Run(lib.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			dst := make([]byte, len(raw))
			for b.Loop() {
				if _, err := lib.decode(dst, enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// nopStore accepts everything and stores nothing.
type nopStore struct{ series []storage.Series }

func (nopStore) NewAppender() Appender { return nopAppender{} }
func (s nopStore) Querier(int64, int64) (storage.Querier, error) {
	return &benchQuerier{series: s.series}, nil
}
func (s nopStore) ChunkQuerier(int64, int64) (storage.ChunkQuerier, error) {
	return encodingQuerier{&benchQuerier{series: s.series}}, nil
}

func (nopStore) Metadata(context.Context, string, int) (map[string][]metadata.Metadata, error) {
	return nil, nil
}
func (nopStore) Ready(context.Context) error { return nil }

type nopAppender struct{}

func (nopAppender) Append(SeriesRef, labels.Labels, int64, float64) (SeriesRef, error) {
	return 0, nil
}
func (nopAppender) AppendHistogram(SeriesRef, labels.Labels, int64, *histogram.Histogram, *histogram.FloatHistogram) (SeriesRef, error) {
	return 0, nil
}
func (nopAppender) AppendExemplar(SeriesRef, labels.Labels, exemplar.Exemplar) (SeriesRef, error) {
	return 0, nil
}
func (nopAppender) SetMetadata(string, metadata.Metadata) error { return nil }
func (nopAppender) Grow(int)                                    {}
func (nopAppender) Commit(context.Context) error                { return nil }

// discardWriter is a ResponseWriter that keeps nothing, so benchmarks
// measure the handler and not a recorder.
type discardWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }
func (*discardWriter) Flush()                        {}

func (w *discardWriter) reset() {
	clear(w.h)
	w.code, w.n = 0, 0
}

func benchWrite(b *testing.B, contentType string, body []byte) {
	h := New(nopStore{}, Options{}, nil, nil)
	w := &discardWriter{h: http.Header{}}
	req := httptest.NewRequest(http.MethodPost, "/api/v1/write", nil)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Content-Encoding", "snappy")
	rd := bytes.NewReader(body)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		w.reset()
		rd.Reset(body)
		req.Body = readCloser{rd}
		req.ContentLength = int64(len(body))
		h.ServeHTTP(w, req)
		if w.code != http.StatusNoContent {
			b.Fatalf("status %d", w.code)
		}
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchSamples), "ns/sample")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N*benchSamples), "allocs/sample")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N*benchSamples), "B/sample")
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// BenchmarkWrite measures decode + translate-to-Append of a 10,000-sample
// request (snappy, protobuf, labels, Append on a no-op appender) through the
// whole handler.
func BenchmarkWrite(b *testing.B) {
	b.Run("v1", func(b *testing.B) { benchWrite(b, ctV1, encode(b, benchV1Request())) })
	b.Run("v2", func(b *testing.B) { benchWrite(b, ctV2, encode(b, benchV2Request())) })
}

// benchQuerier serves pre-built series, sorted, so the read benchmark
// measures the encoding and not a fake store.
type benchQuerier struct{ series []storage.Series }

func (q *benchQuerier) Select(context.Context, bool, *storage.SelectHints, ...*labels.Matcher) storage.SeriesSet {
	return &listSeriesSet{series: q.series, i: -1}
}

func (*benchQuerier) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (*benchQuerier) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}
func (*benchQuerier) Close() error { return nil }

// BenchmarkRead encodes 1,000 series × 1,000 samples (15 s apart, gauge-like
// values) in both response types to a discarding writer.
func BenchmarkRead(b *testing.B) {
	const nSeries, nSamples = 1000, 1000
	series := make([]storage.Series, nSeries)
	for i := range series {
		samples := make([]chunks.Sample, nSamples)
		for j := range samples {
			samples[j] = fakeSample{t: 1_700_000_000_000 + int64(j)*15_000, f: math.Round(100*math.Sin(float64(i+j)/50)) / 4}
		}
		series[i] = storage.NewListSeries(benchLabels(i), samples)
	}
	// The streamed answer refuses series out of order, as a store must sort.
	slices.SortFunc(series, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	for _, rt := range []struct {
		name  string
		types []prompb.ReadRequest_ResponseType
	}{
		{name: "samples", types: samplesOnly},
		{name: "streamed", types: streamedOnly},
	} {
		b.Run(rt.name, func(b *testing.B) {
			h := New(nopStore{series: series}, Options{}, nil, nil)
			body := encode(b, &prompb.ReadRequest{Queries: []*prompb.Query{allQuery()}, AcceptedResponseTypes: rt.types})
			w := &discardWriter{h: http.Header{}}
			req := httptest.NewRequest(http.MethodPost, "/api/v1/read", nil)
			req.Header.Set("Content-Encoding", "snappy")
			rd := bytes.NewReader(body)
			b.ReportAllocs()
			for b.Loop() {
				w.reset()
				rd.Reset(body)
				req.Body = readCloser{rd}
				req.ContentLength = int64(len(body))
				h.ServeHTTP(w, req)
				if w.code != 0 && w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
			}
			b.ReportMetric(float64(nSeries*nSamples)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
			b.ReportMetric(float64(w.n), "resp-bytes")
		})
	}
}
