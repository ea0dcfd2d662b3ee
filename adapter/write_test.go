package adapter

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	gsnappy "github.com/golang/snappy"
	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/rwtest"
	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
)

// testHistogram, v1Request and v2Request are the requests remotewrite's
// tests decode too.
var (
	testHistogram = rwtest.Histogram
	v1Request     = rwtest.V1Request
	v2Request     = rwtest.V2Request
)

// requireStoredRequest checks what v1Request/v2Request store.
func requireStoredRequest(t *testing.T, s *fakeStore) {
	t.Helper()
	require.Equal(t, 1, s.commits)
	fs := s.get(`{__name__="http_requests_total", job="api"}`)
	require.NotNil(t, fs)
	require.Equal(t, []fakeSample{{t: 1000, f: 1}, {t: 2000, f: 2}}, fs.samples)
	require.Len(t, fs.exemplars, 1)
	require.Equal(t, labels.FromStrings("trace_id", "abc"), fs.exemplars[0].Labels)
	require.Equal(t, int64(1500), fs.exemplars[0].Ts)

	hs := s.get(`{__name__="latency_seconds", job="api"}`)
	require.NotNil(t, hs)
	require.Len(t, hs.samples, 2)
	require.Equal(t, testHistogram(1), hs.samples[0].h)
	require.Nil(t, hs.samples[0].fh)
	require.Equal(t, testHistogram(2).ToFloat(nil), hs.samples[1].fh)
	require.Equal(t, []metadata.Metadata{{Type: model.MetricTypeCounter, Help: "Requests."}}, s.meta["http_requests_total"])
}

func TestWriteV1(t *testing.T) {
	for _, path := range []string{"/api/v1/write", "/write"} {
		t.Run(path, func(t *testing.T) {
			s := newFakeStore()
			h, _ := newTestHandler(t, s, Options{})
			rec := post(h, path, ctV1, "snappy", encode(t, v1Request()))
			require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			require.Empty(t, rec.Body.String())
			requireNoWrittenHeaders(t, rec)
			requireStoredRequest(t, s)
		})
	}
}

// TestWriteSeriesCache sends the same series again, over both protocols and
// with the labels of a 1.0 series split around its samples: each distinct
// encoding of a series (1.0 label fields, 2.0 symbols) is translated once,
// and every sample lands in the series its labels name.
func TestWriteSeriesCache(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	a := []string{"__name__", "up", "instance", "a:9100", "job", "node"}
	b := []string{"__name__", "up", "instance", "b:9100", "job", "node"}
	first := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		v1Series(a, prompb.Sample{Timestamp: 1000, Value: 1}),
		v1Series(b, prompb.Sample{Timestamp: 1000, Value: 2}),
	}}
	rec := writeV1Req(h, first)
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	require.Equal(t, 2, s.refs)

	// The same series again, 15 s later: no label is decoded again.
	for i := range first.Timeseries {
		first.Timeseries[i].Samples[0].Timestamp = 16000
	}
	rec = writeV1Req(h, first)
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	require.Equal(t, 2, s.refs)

	// 2.0 refs mean something only within a request: the second request
	// numbers its symbols differently, and still hits the first's entry.
	v2 := newV2Builder()
	v2.add(writev2.TimeSeries{LabelsRefs: v2.refs(a...), Samples: []writev2.Sample{{Timestamp: 31000, Value: 3}}})
	rec = writeV2Req(h, v2.build())
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	require.Equal(t, 3, s.refs)
	v2 = newV2Builder()
	v2.refs("job", "other", "instance", "z")
	v2.add(writev2.TimeSeries{LabelsRefs: v2.refs(a...), Samples: []writev2.Sample{{Timestamp: 32000, Value: 3.5}}})
	rec = writeV2Req(h, v2.build())
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	require.Equal(t, 3, s.refs)

	// Label fields after the sample, and out of order: a new encoding,
	// decoded once, gathered and sorted into the same series.
	var body []byte
	sample := prompb.Sample{Timestamp: 46000, Value: 4}
	for _, part := range []marshaler{&prompb.Label{Name: "job", Value: "node"}, &sample, &prompb.Label{Name: "instance", Value: "b:9100"}, &prompb.Label{Name: "__name__", Value: "up"}} {
		raw, err := part.Marshal()
		require.NoError(t, err)
		field := byte(1<<3 | 2)
		if part == &sample {
			field = 2<<3 | 2
		}
		body = append(append(append(body, field), byte(len(raw))), raw...)
	}
	for range 2 {
		raw := append([]byte{1<<3 | 2, byte(len(body))}, body...)
		rec = post(h, "/api/v1/write", ctV1, "snappy", gsnappy.Encode(nil, raw))
		require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
		require.Equal(t, 4, s.refs)
	}

	require.Equal(t, []fakeSample{{t: 1000, f: 1}, {t: 16000, f: 1}, {t: 31000, f: 3}, {t: 32000, f: 3.5}}, s.get(`{__name__="up", instance="a:9100", job="node"}`).samples)
	require.Equal(t, []fakeSample{{t: 1000, f: 2}, {t: 16000, f: 2}, {t: 46000, f: 4}}, s.get(`{__name__="up", instance="b:9100", job="node"}`).samples)
	require.Equal(t, 2, s.numSeries())
}

func TestWriteV2(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	rec := writeV2Req(h, v2Request())
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	require.Empty(t, rec.Body.String())
	requireWritten(t, rec, 2, 2, 1)
	requireStoredRequest(t, s)
	// RW2 metadata is recorded under the series' __name__ as is.
	require.Equal(t, []metadata.Metadata{{Type: model.MetricTypeHistogram, Help: "Latency.", Unit: "seconds"}}, s.meta["latency_seconds"])
}

func TestWriteV2MetadataOncePerFamily(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	b := newV2Builder()
	md := writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: b.st.Symbolize("Up.")}
	for i := range 3 {
		b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "up", "i", fmt.Sprint(i)), Samples: []writev2.Sample{{Timestamp: 1, Value: 1}}, Metadata: md})
	}
	// No metadata at all: nothing to record.
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "other"), Samples: []writev2.Sample{{Timestamp: 1, Value: 1}}})
	rec := writeV2Req(h, b.build())
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	requireWritten(t, rec, 4, 0, 0)
	require.Equal(t, map[string][]metadata.Metadata{"up": {{Type: model.MetricTypeGauge, Help: "Up."}}}, s.meta)
}

func TestWriteContentType(t *testing.T) {
	v1 := encode(t, v1Request())
	v2 := encode(t, v2Request())
	for _, tc := range []struct {
		name, contentType string
		body              []byte
		wantCode          int
		wantV2            bool
	}{
		{name: "missing means 1.0", contentType: "", body: v1, wantCode: http.StatusNoContent},
		{name: "bare protobuf means 1.0", contentType: "application/x-protobuf", body: v1, wantCode: http.StatusNoContent},
		{name: "explicit 1.0", contentType: ctV1, body: v1, wantCode: http.StatusNoContent},
		{name: "explicit 1.0 spaced", contentType: "application/x-protobuf; proto=prometheus.WriteRequest", body: v1, wantCode: http.StatusNoContent},
		{name: "2.0", contentType: ctV2, body: v2, wantCode: http.StatusNoContent, wantV2: true},
		{name: "2.0 spaced", contentType: "application/x-protobuf; proto=io.prometheus.write.v2.Request", body: v2, wantCode: http.StatusNoContent, wantV2: true},
		{name: "2.0 quoted", contentType: `application/x-protobuf;proto="io.prometheus.write.v2.Request"`, body: v2, wantCode: http.StatusNoContent, wantV2: true},
		{name: "2.0 quoted and spaced", contentType: `application/x-protobuf;  proto="io.prometheus.write.v2.Request"`, body: v2, wantCode: http.StatusNoContent, wantV2: true},
		{name: "2.0 upper-case media type", contentType: "Application/X-Protobuf; proto=io.prometheus.write.v2.Request", body: v2, wantCode: http.StatusNoContent, wantV2: true},
		{name: "2.0 with another parameter", contentType: "application/x-protobuf; charset=utf-8; proto=io.prometheus.write.v2.Request", body: v2, wantCode: http.StatusNoContent, wantV2: true},
		{name: "json", contentType: "application/json", body: v1, wantCode: http.StatusUnsupportedMediaType},
		{name: "png", contentType: "image/png", body: v1, wantCode: http.StatusUnsupportedMediaType},
		{name: "text", contentType: "text/plain", body: v1, wantCode: http.StatusUnsupportedMediaType},
		{name: "unknown proto", contentType: "application/x-protobuf;proto=io.prometheus.write.v3.Request", body: v2, wantCode: http.StatusUnsupportedMediaType},
		{name: "read request proto", contentType: "application/x-protobuf;proto=prometheus.ReadRequest", body: v1, wantCode: http.StatusUnsupportedMediaType},
		{name: "empty proto", contentType: `application/x-protobuf;proto=""`, body: v1, wantCode: http.StatusUnsupportedMediaType},
		{name: "unparsable", contentType: "application/x-protobuf;proto", body: v1, wantCode: http.StatusUnsupportedMediaType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeStore()
			h, _ := newTestHandler(t, s, Options{})
			rec := post(h, "/api/v1/write", tc.contentType, "snappy", tc.body)
			require.Equal(t, tc.wantCode, rec.Code, rec.Body.String())
			if tc.wantV2 {
				requireWritten(t, rec, 2, 2, 1)
			} else {
				// 1.0, or a version we could not tell.
				requireNoWrittenHeaders(t, rec)
			}
			if tc.wantCode == http.StatusNoContent {
				requireStoredRequest(t, s)
			} else {
				require.Zero(t, s.numSeries())
				require.Contains(t, rec.Body.String(), "Content-Type")
			}
		})
	}
}

func TestWriteContentEncoding(t *testing.T) {
	for _, tc := range []struct {
		encoding string
		wantCode int
	}{
		{encoding: "snappy", wantCode: http.StatusNoContent},
		{encoding: "Snappy", wantCode: http.StatusNoContent},
		{encoding: "gzip", wantCode: http.StatusUnsupportedMediaType},
		{encoding: "deflate", wantCode: http.StatusUnsupportedMediaType},
		{encoding: "zstd", wantCode: http.StatusUnsupportedMediaType},
		{encoding: "snappy, gzip", wantCode: http.StatusUnsupportedMediaType},
		{encoding: "", wantCode: http.StatusUnsupportedMediaType}, // identity: uncompressed protobuf is not remote write
	} {
		t.Run("v1 "+tc.encoding, func(t *testing.T) {
			s := newFakeStore()
			h, _ := newTestHandler(t, s, Options{})
			rec := post(h, "/api/v1/write", ctV1, tc.encoding, encode(t, v1Request()))
			require.Equal(t, tc.wantCode, rec.Code, rec.Body.String())
			requireNoWrittenHeaders(t, rec)
		})
		t.Run("v2 "+tc.encoding, func(t *testing.T) {
			s := newFakeStore()
			h, _ := newTestHandler(t, s, Options{})
			rec := post(h, "/api/v1/write", ctV2, tc.encoding, encode(t, v2Request()))
			require.Equal(t, tc.wantCode, rec.Code, rec.Body.String())
			if tc.wantCode == http.StatusNoContent {
				requireWritten(t, rec, 2, 2, 1)
			} else {
				requireWritten(t, rec, 0, 0, 0)
				require.Zero(t, s.numSeries())
			}
		})
	}
}

// A refused header is quoted in the answer and in the log: a header of
// hundreds of kilobytes must not be echoed whole.
func TestWriteHugeHeaderQuotedShort(t *testing.T) {
	huge := strings.Repeat("x", 512<<10)
	for _, tc := range []struct{ name, ct, ce string }{
		{"content-encoding", ctV1, huge},
		{"content-type", "text/" + huge, "snappy"},
		{"unparsable content-type", huge + ";;", "snappy"},
		{"proto", "application/x-protobuf;proto=" + huge, "snappy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeStore()
			h, _ := newTestHandler(t, s, Options{})
			rec := post(h, "/api/v1/write", tc.ct, tc.ce, encode(t, v1Request()))
			require.Equal(t, http.StatusUnsupportedMediaType, rec.Code)
			require.Less(t, rec.Body.Len(), 1024, "the answer echoes the header whole")
			require.Contains(t, rec.Body.String(), "xxx...")
			require.Zero(t, s.numSeries())
		})
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func framedSnappy(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	sw := gsnappy.NewBufferedWriter(&buf)
	_, err := sw.Write(b)
	require.NoError(t, err)
	require.NoError(t, sw.Close())
	return buf.Bytes()
}

func TestWriteBadBody(t *testing.T) {
	raw, err := v1Request().Marshal()
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		body    []byte
		wantMsg string
	}{
		{name: "framed snappy", body: framedSnappy(t, raw), wantMsg: "framed"},
		{name: "gzip body labelled snappy", body: gzipped(t, raw), wantMsg: "gzip"},
		{name: "uncompressed protobuf", body: raw, wantMsg: "snappy"},
		{name: "zero bytes", body: nil, wantMsg: "empty body"},
		{name: "garbage", body: []byte("\x10this is not snappy at all"), wantMsg: "snappy"},
		{name: "truncated snappy", body: encode(t, v1Request())[:40], wantMsg: "snappy"},
		{name: "snappy of garbage protobuf", body: snappy.Encode(nil, []byte{0x0a, 0xff, 0xff, 0xff}), wantMsg: "not a valid"},
	} {
		t.Run(tc.name+" v1", func(t *testing.T) {
			s := newFakeStore()
			h, _ := newTestHandler(t, s, Options{})
			rec := post(h, "/api/v1/write", ctV1, "snappy", tc.body)
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tc.wantMsg)
			requireNoWrittenHeaders(t, rec)
			require.Zero(t, s.numSeries())
		})
		t.Run(tc.name+" v2", func(t *testing.T) {
			s := newFakeStore()
			h, _ := newTestHandler(t, s, Options{})
			rec := post(h, "/api/v1/write", ctV2, "snappy", tc.body)
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			requireWritten(t, rec, 0, 0, 0)
			require.Zero(t, s.numSeries())
		})
	}
}

func TestWriteSizeLimits(t *testing.T) {
	const limit = 1 << 10
	// Incompressible: the snappy block is larger than the limit.
	big := make([]byte, 4*limit)
	for i := range big {
		big[i] = byte(i*7919 + i>>3)
	}
	bigBody := snappy.Encode(nil, big)
	require.Greater(t, len(bigBody), limit)
	// Highly compressible: a small body whose decoded size is over the limit.
	bomb := snappy.Encode(nil, make([]byte, 4*limit))
	require.Less(t, len(bomb), limit)

	t.Run("compressed body with Content-Length", func(t *testing.T) {
		h, _ := newTestHandler(t, newFakeStore(), Options{MaxRequestBytes: limit})
		rec := post(h, "/api/v1/write", ctV2, "snappy", bigBody)
		require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
		require.Contains(t, rec.Body.String(), "exceeds the 1024 bytes limit")
		requireWritten(t, rec, 0, 0, 0)
	})
	t.Run("compressed body without Content-Length", func(t *testing.T) {
		h, _ := newTestHandler(t, newFakeStore(), Options{MaxRequestBytes: limit})
		req := httptest.NewRequest(http.MethodPost, "/api/v1/write", bytes.NewReader(bigBody))
		req.ContentLength = -1 // chunked transfer
		req.Header.Set("Content-Type", ctV1)
		req.Header.Set("Content-Encoding", "snappy")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
		requireNoWrittenHeaders(t, rec)
	})
	t.Run("decoded size", func(t *testing.T) {
		h, _ := newTestHandler(t, newFakeStore(), Options{MaxRequestBytes: limit})
		rec := post(h, "/api/v1/write", ctV1, "snappy", bomb)
		require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
		require.Contains(t, rec.Body.String(), "decoded body of 4096 bytes")
	})
	t.Run("read endpoint", func(t *testing.T) {
		h, _ := newTestHandler(t, newFakeStore(), Options{MaxRequestBytes: limit})
		require.Equal(t, http.StatusRequestEntityTooLarge, post(h, "/api/v1/read", "application/x-protobuf", "snappy", bigBody).Code)
		require.Equal(t, http.StatusRequestEntityTooLarge, post(h, "/api/v1/read", "application/x-protobuf", "snappy", bomb).Code)
	})
}

// A 6-byte body whose snappy header declares 4 GiB - 1 decoded bytes (the
// largest length snappy can declare) must be refused before allocating.
func TestWriteDeclaredSizeNotAllocated(t *testing.T) {
	body := []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x00} // uvarint(0xffffffff), then junk
	n, err := snappy.DecodedLen(body)
	require.NoError(t, err)
	require.Equal(t, math.MaxUint32, n)

	h, _ := newTestHandler(t, newFakeStore(), Options{})
	post(h, "/api/v1/write", ctV1, "snappy", body) // warm up pools and lazy init

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rec := post(h, "/api/v1/write", ctV1, "snappy", body)
	runtime.ReadMemStats(&after)
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	require.Contains(t, rec.Body.String(), "decoded body of 4294967295 bytes")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated while refusing")

	// One more and snappy itself calls the header corrupt: 400.
	rec = post(h, "/api/v1/write", ctV1, "snappy", []byte{0x80, 0x80, 0x80, 0x80, 0x10, 0x00})
	require.Equal(t, http.StatusBadRequest, rec.Code)
}

func TestWriteWrongMessage(t *testing.T) {
	readReq := &prompb.ReadRequest{
		Queries: []*prompb.Query{{
			StartTimestampMs: 1000, EndTimestampMs: 2000,
			Matchers: []*prompb.LabelMatcher{{Type: prompb.LabelMatcher_EQ, Name: "__name__", Value: "up"}},
		}},
		AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS},
	}
	// Without timestamps or matchers a ReadRequest decodes "successfully" as
	// a 1.0 WriteRequest with one empty series.
	bareReadReq := &prompb.ReadRequest{
		Queries:               []*prompb.Query{{}},
		AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES},
	}
	metadataOnly := &prompb.WriteRequest{Metadata: []prompb.MetricMetadata{{Type: prompb.MetricMetadata_GAUGE, MetricFamilyName: "up"}}}
	for _, tc := range []struct {
		name, contentType string
		body              []byte
		wantMsg           string
	}{
		{name: "2.0 body as 1.0", contentType: ctV1, body: encode(t, v2Request()), wantMsg: "looks like a io.prometheus.write.v2.Request"},
		{name: "1.0 body as 2.0", contentType: ctV2, body: encode(t, v1Request()), wantMsg: "looks like a prometheus.WriteRequest"},
		{name: "1.0 metadata-only body as 2.0", contentType: ctV2, body: encode(t, metadataOnly), wantMsg: "looks like a prometheus.WriteRequest"},
		{name: "read request as 1.0", contentType: ctV1, body: encode(t, readReq), wantMsg: "looks like a remote-read request"},
		{name: "bare read request as 1.0", contentType: ctV1, body: encode(t, bareReadReq), wantMsg: "looks like a remote-read request"},
		{name: "read request as 2.0", contentType: ctV2, body: encode(t, readReq), wantMsg: "looks like a remote-read request"},
		{name: "bare read request as 2.0", contentType: ctV2, body: encode(t, bareReadReq), wantMsg: "looks like a remote-read request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeStore()
			h, _ := newTestHandler(t, s, Options{})
			rec := post(h, "/api/v1/write", tc.contentType, "snappy", tc.body)
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tc.wantMsg)
			if tc.contentType == ctV2 {
				requireWritten(t, rec, 0, 0, 0)
			} else {
				requireNoWrittenHeaders(t, rec)
			}
			require.Zero(t, s.numSeries())
			require.Zero(t, s.appended)
			require.Zero(t, s.commits)
			require.Empty(t, s.meta)
		})
	}
}

func TestWriteEmptyRequest(t *testing.T) {
	// An empty message snappy-encodes to one 0x00 byte: valid, nothing to
	// store, 204, as Prometheus's own receiver answers. (A zero-byte body is
	// not a snappy block: 400, see TestWriteBadBody.)
	t.Run("v1", func(t *testing.T) {
		h, _ := newTestHandler(t, newFakeStore(), Options{})
		rec := writeV1Req(h, &prompb.WriteRequest{})
		require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
		requireNoWrittenHeaders(t, rec)
	})
	for _, req := range []*writev2.Request{{}, {Symbols: []string{""}}} {
		t.Run(fmt.Sprintf("v2 %d symbols", len(req.Symbols)), func(t *testing.T) {
			h, _ := newTestHandler(t, newFakeStore(), Options{})
			rec := writeV2Req(h, req)
			require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			requireWritten(t, rec, 0, 0, 0)
		})
	}
}

func TestWriteV2SymbolTable(t *testing.T) {
	valid := writev2.TimeSeries{LabelsRefs: []uint32{1, 2}, Samples: []writev2.Sample{{Timestamp: 1, Value: 1}}}
	symbols := []string{"", "__name__", "up"}
	for _, tc := range []struct {
		name    string
		req     *writev2.Request
		wantMsg string
	}{
		{
			name:    "symbols[0] not empty",
			req:     &writev2.Request{Symbols: []string{"x", "__name__", "up"}, Timeseries: []writev2.TimeSeries{valid}},
			wantMsg: `symbols[0] must be the empty string, got "x"`,
		},
		{
			name:    "empty table with series",
			req:     &writev2.Request{Timeseries: []writev2.TimeSeries{{Samples: []writev2.Sample{{Timestamp: 1, Value: 1}}}}},
			wantMsg: "symbols table is empty but the request has 1 series",
		},
		{
			name:    "label ref out of range",
			req:     &writev2.Request{Symbols: symbols, Timeseries: []writev2.TimeSeries{valid, {LabelsRefs: []uint32{1, 3}, Samples: valid.Samples}}},
			wantMsg: "series 1: ref 3 outside the symbols table (size 3)",
		},
		{
			name:    "odd labels_refs",
			req:     &writev2.Request{Symbols: symbols, Timeseries: []writev2.TimeSeries{valid, {LabelsRefs: []uint32{1, 2, 1}, Samples: valid.Samples}}},
			wantMsg: "series 1: labels_refs has odd length 3",
		},
		{
			name: "exemplar ref out of range",
			req: &writev2.Request{Symbols: symbols, Timeseries: []writev2.TimeSeries{
				{LabelsRefs: []uint32{1, 2}, Samples: valid.Samples, Exemplars: []writev2.Exemplar{{LabelsRefs: []uint32{1, 9}, Timestamp: 1}}},
			}},
			wantMsg: "series 0 exemplar 0: ref 9 outside",
		},
		{
			name: "exemplar odd labels_refs",
			req: &writev2.Request{Symbols: symbols, Timeseries: []writev2.TimeSeries{
				{LabelsRefs: []uint32{1, 2}, Samples: valid.Samples, Exemplars: []writev2.Exemplar{{LabelsRefs: []uint32{1}, Timestamp: 1}}},
			}},
			wantMsg: "series 0 exemplar 0: labels_refs has odd length 1",
		},
		{
			name: "help ref out of range",
			req: &writev2.Request{Symbols: symbols, Timeseries: []writev2.TimeSeries{
				{LabelsRefs: []uint32{1, 2}, Samples: valid.Samples, Metadata: writev2.Metadata{HelpRef: 3}},
			}},
			wantMsg: "help_ref 3",
		},
		{
			name: "unit ref out of range",
			req: &writev2.Request{Symbols: symbols, Timeseries: []writev2.TimeSeries{
				{LabelsRefs: []uint32{1, 2}, Samples: valid.Samples, Metadata: writev2.Metadata{UnitRef: 100}},
			}},
			wantMsg: "unit_ref 100",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeStore()
			h, reg := newTestHandler(t, s, Options{})
			rec := writeV2Req(h, tc.req)
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tc.wantMsg)
			require.Contains(t, rec.Body.String(), "nothing stored")
			requireWritten(t, rec, 0, 0, 0)
			// The whole request is refused: not even the valid series
			// reached the appender.
			require.Zero(t, s.appended)
			require.Zero(t, s.commits)
			require.Zero(t, s.numSeries())
			total := 0
			for _, ts := range tc.req.Timeseries {
				total += len(ts.Samples)
			}
			require.Equal(t, float64(total), metricValue(t, reg, "kairos_adapter_failed_samples_total", "protocol", "2.0", "reason", reasonInvalid))
		})
	}
}

func TestWriteInvalidSeriesV1(t *testing.T) {
	s := newFakeStore()
	h, reg := newTestHandler(t, s, Options{})
	dup := v1Series([]string{"__name__", "a", "job", "x", "job", "y"}, prompb.Sample{Timestamp: 1, Value: 1})
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		v1Series([]string{"job", "no_name"}, prompb.Sample{Timestamp: 1, Value: 1}, prompb.Sample{Timestamp: 2, Value: 2}),
		v1Series([]string{"__name__", "good", "job", "x"}, prompb.Sample{Timestamp: 1, Value: 1}),
		dup,
		v1Series(nil, prompb.Sample{Timestamp: 1, Value: 1}),
		// Unsorted labels are sorted, as Prometheus does.
		v1Series([]string{"job", "x", "__name__", "unsorted"}, prompb.Sample{Timestamp: 1, Value: 3}),
	}}
	rec := writeV1Req(h, req)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	requireNoWrittenHeaders(t, rec)
	body := rec.Body.String()
	require.Contains(t, body, "3 invalid series, metadata entries or items rejected (4 samples, 0 histograms, 0 exemplars not stored)")
	require.Contains(t, body, "the rest (2 samples, 0 histograms, 0 exemplars) was stored")
	require.Contains(t, body, `{job="no_name"}: missing metric name`)
	require.Contains(t, body, `label "job" appears more than once`)
	require.Contains(t, body, "{}: series has no labels")

	require.Equal(t, 1, s.commits)
	require.Equal(t, 2, s.numSeries())
	require.NotNil(t, s.get(`{__name__="good", job="x"}`))
	require.Equal(t, []fakeSample{{t: 1, f: 3}}, s.get(`{__name__="unsorted", job="x"}`).samples)

	require.Equal(t, 6.0, metricValue(t, reg, "kairos_adapter_received_samples_total", "protocol", "1.0"))
	require.Equal(t, 2.0, metricValue(t, reg, "kairos_adapter_written_samples_total", "protocol", "1.0"))
	require.Equal(t, 4.0, metricValue(t, reg, "kairos_adapter_failed_samples_total", "protocol", "1.0", "reason", reasonInvalid))
}

func TestWriteInvalidSeriesV2(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	b := newV2Builder()
	one := []writev2.Sample{{Timestamp: 1, Value: 1}}
	hist := []writev2.Histogram{writev2.FromIntHistogram(0, 1, testHistogram(1))}
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("job", "no_name"), Samples: one, Exemplars: []writev2.Exemplar{{Value: 1, Timestamp: 1}}})
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "good"), Samples: one, Exemplars: []writev2.Exemplar{{Value: 1, Timestamp: 1}}})
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "both"), Samples: one, Histograms: hist})
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "neither")})
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "good_hist"), Histograms: hist})
	b.add(writev2.TimeSeries{Samples: one}) // no labels
	dupRefs := append(b.refs("__name__", "dup", "a", "1"), b.refs("a", "2")...)
	b.add(writev2.TimeSeries{LabelsRefs: dupRefs, Samples: one})
	// Spans claim more buckets than there are: an invalid histogram.
	bad := testHistogram(1)
	bad.PositiveBuckets = bad.PositiveBuckets[:1]
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "bad_hist"), Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, 1, bad)}})

	rec := writeV2Req(h, b.build())
	require.Equal(t, http.StatusBadRequest, rec.Code)
	requireWritten(t, rec, 1, 1, 1)
	body := rec.Body.String()
	require.Contains(t, body, "6 invalid series, metadata entries or items rejected (4 samples, 2 histograms, 1 exemplars not stored)")
	require.Contains(t, body, `{job="no_name"}: missing metric name`)
	require.Contains(t, body, `{__name__="both"}: series has both samples and histograms`)
	require.Contains(t, body, `{__name__="neither"}: series has neither samples nor histograms`)
	require.Contains(t, body, "{}: series has no labels")
	require.Contains(t, body, `label "a" appears more than once`)
	require.Contains(t, body, `{__name__="bad_hist"}: invalid native histogram at 1`)
	require.Equal(t, 2, s.numSeries())
	require.Len(t, s.get(`{__name__="good"}`).exemplars, 1)
	require.NotNil(t, s.get(`{__name__="good_hist"}`))
}

func TestWriteRejectionListIsBounded(t *testing.T) {
	h, _ := newTestHandler(t, newFakeStore(), Options{})
	req := &prompb.WriteRequest{}
	for i := range 25 {
		req.Timeseries = append(req.Timeseries, v1Series([]string{"i", fmt.Sprint(i)}, prompb.Sample{Timestamp: 1, Value: 1}))
	}
	rec := writeV1Req(h, req)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	body := rec.Body.String()
	require.Equal(t, 10, strings.Count(body, "missing metric name"))
	require.Contains(t, body, "25 invalid series")
	require.Contains(t, body, "and 15 more")
}

// A series rejected on its second sample stores nothing at all, and is not
// counted as written.
func TestWriteSeriesRejectedMidway(t *testing.T) {
	s := newFakeStore()
	calls := 0
	s.appendErr = func(ls labels.Labels) error {
		if ls.Get("__name__") != "flaky" {
			return nil
		}
		if calls++; calls == 2 {
			return errors.New("value out of range")
		}
		return nil
	}
	h, _ := newTestHandler(t, s, Options{})
	b := newV2Builder()
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "flaky"), Samples: []writev2.Sample{{Timestamp: 1, Value: 1}, {Timestamp: 2, Value: 2}, {Timestamp: 3, Value: 3}}})
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "ok"), Samples: []writev2.Sample{{Timestamp: 1, Value: 1}}})
	rec := writeV2Req(h, b.build())
	require.Equal(t, http.StatusBadRequest, rec.Code)
	requireWritten(t, rec, 1, 0, 0)
	require.Nil(t, s.get(`{__name__="flaky"}`))
	require.Contains(t, rec.Body.String(), `{__name__="flaky"}: value out of range`)
}

func TestWriteMetadataOnlyV1(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	req := &prompb.WriteRequest{Metadata: []prompb.MetricMetadata{
		{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "http_requests_total", Help: "Requests."},
		{Type: prompb.MetricMetadata_HISTOGRAM, MetricFamilyName: "latency_seconds", Help: "Latency.", Unit: "seconds"},
		{Type: prompb.MetricMetadata_STATESET, MetricFamilyName: "state"},
		{Type: prompb.MetricMetadata_UNKNOWN, MetricFamilyName: "mystery"},
	}}
	rec := writeV1Req(h, req)
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	requireNoWrittenHeaders(t, rec)
	require.Equal(t, map[string][]metadata.Metadata{
		"http_requests_total": {{Type: model.MetricTypeCounter, Help: "Requests."}},
		"latency_seconds":     {{Type: model.MetricTypeHistogram, Help: "Latency.", Unit: "seconds"}},
		"state":               {{Type: model.MetricTypeStateset}},
		"mystery":             {{Type: model.MetricTypeUnknown}},
	}, s.meta)

	// Metadata the store refuses is reported like a bad series.
	rec = writeV1Req(h, &prompb.WriteRequest{Metadata: []prompb.MetricMetadata{{Type: prompb.MetricMetadata_GAUGE}}})
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "metadata of : empty metric family name")
}

// Stale markers and other NaNs must reach the store with their exact bits
// (docs/remote-protocols.md §2.8): compare bits, never with == or math.IsNaN. (-0 is not
// in the list: proto3 omits a double equal to 0, so every sender turns it
// into +0 on the wire.)
func TestWriteStaleMarkersAndNaN(t *testing.T) {
	values := []float64{math.Float64frombits(value.StaleNaN), math.Float64frombits(value.NormalNaN), math.NaN(), math.Inf(1), math.Inf(-1), 0, 1.5}
	for _, proto := range []string{"v1", "v2"} {
		t.Run(proto, func(t *testing.T) {
			s := newFakeStore()
			h, _ := newTestHandler(t, s, Options{})
			var rec *httptest.ResponseRecorder
			if proto == "v1" {
				ts := v1Series([]string{"__name__", "x"})
				for i, v := range values {
					ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: int64(i), Value: v})
				}
				rec = writeV1Req(h, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{ts}})
			} else {
				b := newV2Builder()
				ts := writev2.TimeSeries{LabelsRefs: b.refs("__name__", "x")}
				for i, v := range values {
					ts.Samples = append(ts.Samples, writev2.Sample{Timestamp: int64(i), Value: v})
				}
				rec = writeV2Req(h, b.add(ts).build())
				requireWritten(t, rec, len(values), 0, 0)
			}
			require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			var got []float64
			for _, s := range s.get(`{__name__="x"}`).samples {
				got = append(got, s.f)
			}
			require.Equal(t, floatBits(values), floatBits(got))
			require.True(t, value.IsStaleNaN(got[0]))
		})
	}
}

// Schemas 9..52 are reduced to 8, as Prometheus does on ingest.
func TestWriteHistogramSchemaReduced(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	hi := testHistogram(1)
	hi.Schema = 10
	b := newV2Builder()
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "h"), Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, 1, hi)}})
	rec := writeV2Req(h, b.build())
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	require.Equal(t, int32(8), s.get(`{__name__="h"}`).samples[0].h.Schema)
}

func TestWriteBackendErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		commitErr error
		appendErr error
		wantCode  int
	}{
		{name: "commit error", commitErr: errors.New("cassandra: no hosts available"), wantCode: http.StatusInternalServerError},
		{name: "commit deadline", commitErr: fmt.Errorf("write batch: %w", context.DeadlineExceeded), wantCode: http.StatusServiceUnavailable},
		{name: "commit unavailable", commitErr: fmt.Errorf("wrapped: %w", storeerr.Unavailable(errors.New("overloaded"))), wantCode: http.StatusServiceUnavailable},
		{name: "append unavailable", appendErr: storeerr.Unavailable(errors.New("cache lookup timed out")), wantCode: http.StatusServiceUnavailable},
		{name: "append invalid", appendErr: storeerr.Invalid(errors.New("series limit")), wantCode: http.StatusBadRequest},
	} {
		for _, proto := range []string{"v1", "v2"} {
			t.Run(tc.name+" "+proto, func(t *testing.T) {
				s := newFakeStore()
				s.commitErr = tc.commitErr
				if tc.appendErr != nil {
					s.appendErr = func(labels.Labels) error { return tc.appendErr }
				}
				h, reg := newTestHandler(t, s, Options{})
				// One invalid series too: a backend failure wins over 400.
				var rec *httptest.ResponseRecorder
				if proto == "v1" {
					req := v1Request()
					req.Timeseries = append(req.Timeseries, v1Series([]string{"job", "x"}, prompb.Sample{Timestamp: 1, Value: 1}))
					rec = writeV1Req(h, req)
					requireNoWrittenHeaders(t, rec)
				} else {
					req := v2Request()
					req.Symbols = append(req.Symbols, "job", "x")
					n := uint32(len(req.Symbols))
					req.Timeseries = append(req.Timeseries, writev2.TimeSeries{LabelsRefs: []uint32{n - 2, n - 1}, Samples: []writev2.Sample{{Timestamp: 1, Value: 1}}})
					rec = writeV2Req(h, req)
					if tc.wantCode >= 500 {
						// Nothing is confirmed after a failed commit.
						requireWritten(t, rec, 0, 0, 0)
					}
				}
				require.Equal(t, tc.wantCode, rec.Code, rec.Body.String())
				require.Zero(t, s.numSeries())
				if tc.wantCode >= 500 {
					require.Contains(t, rec.Body.String(), "cannot store the request, retry it")
					p := map[string]string{"v1": "1.0", "v2": "2.0"}[proto]
					require.Positive(t, metricValue(t, reg, "kairos_adapter_failed_samples_total", "protocol", p, "reason", reasonBackend))
				}
			})
		}
	}
}

func TestWriteConcurrencyLimit(t *testing.T) {
	s := newFakeStore()
	s.commitGate = make(chan struct{})
	h, reg := newTestHandler(t, s, Options{MaxConcurrentWrites: 1})

	var wg sync.WaitGroup
	first := make(chan *httptest.ResponseRecorder, 1)
	wg.Go(func() { first <- writeV1Req(h, v1Request()) })
	waitAtGate(t, s) // the first request holds the slot

	rec := writeV2Req(h, v2Request())
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Contains(t, rec.Body.String(), "too many concurrent write requests (limit 1)")
	requireWritten(t, rec, 0, 0, 0)
	rec = writeV1Req(h, v1Request())
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	requireNoWrittenHeaders(t, rec)
	require.Equal(t, 2.0, metricValue(t, reg, "kairos_adapter_concurrency_limit_rejections_total", "handler", "write"))

	close(s.commitGate)
	wg.Wait()
	require.Equal(t, http.StatusNoContent, (<-first).Code)
	// The slot is free again.
	require.Equal(t, http.StatusNoContent, writeV2Req(h, v2Request()).Code)
}

// Every 2.0 answer carries the three headers, every 1.0 answer none
// (docs/remote-protocols.md §3.4, §8 item 10).
func TestWriteHeadersOnEveryResponse(t *testing.T) {
	type scenario struct {
		name     string
		store    func(*fakeStore)
		opts     Options
		encoding string
		body     func(v2 bool) []byte
		wantCode int
	}
	v1Body := encode(t, v1Request())
	v2Body := encode(t, v2Request())
	valid := func(v2 bool) []byte {
		if v2 {
			return v2Body
		}
		return v1Body
	}
	for _, sc := range []scenario{
		{name: "success", body: valid, wantCode: http.StatusNoContent},
		{name: "415 encoding", encoding: "gzip", body: valid, wantCode: http.StatusUnsupportedMediaType},
		{name: "400 snappy", body: func(bool) []byte { return []byte("nope") }, wantCode: http.StatusBadRequest},
		{name: "400 wrong message", body: func(v2 bool) []byte { return valid(!v2) }, wantCode: http.StatusBadRequest},
		{name: "400 partial", store: func(s *fakeStore) {
			s.appendErr = func(ls labels.Labels) error {
				if ls.Get("__name__") == "latency_seconds" {
					return errors.New("bad")
				}
				return nil
			}
		}, body: valid, wantCode: http.StatusBadRequest},
		{name: "413", opts: Options{MaxRequestBytes: 10}, body: valid, wantCode: http.StatusRequestEntityTooLarge},
		{name: "500", store: func(s *fakeStore) { s.commitErr = errors.New("boom") }, body: valid, wantCode: http.StatusInternalServerError},
		{name: "503", store: func(s *fakeStore) { s.commitErr = context.DeadlineExceeded }, body: valid, wantCode: http.StatusServiceUnavailable},
	} {
		for _, v2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s v2=%v", sc.name, v2), func(t *testing.T) {
				s := newFakeStore()
				if sc.store != nil {
					sc.store(s)
				}
				h, _ := newTestHandler(t, s, sc.opts)
				ct := ctV1
				if v2 {
					ct = ctV2
				}
				rec := post(h, "/api/v1/write", ct, cmp.Or(sc.encoding, "snappy"), sc.body(v2))
				require.Equal(t, sc.wantCode, rec.Code, rec.Body.String())
				if !v2 {
					requireNoWrittenHeaders(t, rec)
					return
				}
				for _, hd := range []string{headerSamplesWritten, headerHistogramsWritten, headerExemplarsWritten} {
					require.Len(t, rec.Header().Values(hd), 1, hd)
				}
				if sc.name == "400 partial" {
					requireWritten(t, rec, 2, 0, 1)
				}
			})
		}
	}
}

// TestWriteExemplarRejectedKeepsSamples: a store that cannot keep a series'
// exemplars still stores its samples, and the answer counts them as written.
func TestWriteExemplarRejectedKeepsSamples(t *testing.T) {
	for _, proto := range []string{"1.0", "2.0"} {
		t.Run(proto, func(t *testing.T) {
			s := newFakeStore()
			s.exemplarErr = storeerr.Invalid(errors.New("exemplars are not supported"))
			h, _ := newTestHandler(t, s, Options{})
			var rec *httptest.ResponseRecorder
			if proto == "1.0" {
				ts := v1Series([]string{"__name__", "ex"}, prompb.Sample{Timestamp: 1, Value: 1}, prompb.Sample{Timestamp: 2, Value: 2})
				ts.Exemplars = []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: "t"}}, Value: 1, Timestamp: 1}}
				rec = writeV1Req(h, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{ts}})
				requireNoWrittenHeaders(t, rec)
			} else {
				b := newV2Builder()
				b.add(writev2.TimeSeries{
					LabelsRefs: b.refs("__name__", "ex"),
					Samples:    []writev2.Sample{{Timestamp: 1, Value: 1}, {Timestamp: 2, Value: 2}},
					Exemplars:  []writev2.Exemplar{{LabelsRefs: b.refs("trace_id", "t"), Value: 1, Timestamp: 1}},
				})
				rec = writeV2Req(h, b.build())
				requireWritten(t, rec, 2, 0, 0)
			}
			require.Equal(t, http.StatusBadRequest, rec.Code)
			require.Contains(t, rec.Body.String(), "(0 samples, 0 histograms, 1 exemplars not stored)")
			require.Equal(t, []fakeSample{{t: 1, f: 1}, {t: 2, f: 2}}, s.get(`{__name__="ex"}`).samples)
		})
	}
}

// TestWriteV2ExemplarOnlySeries: Prometheus 3.x sends each exemplar in a 2.0
// series of its own, without samples; the exemplars are stored.
func TestWriteV2ExemplarOnlySeries(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	b := newV2Builder()
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "ex_only"), Samples: []writev2.Sample{{Timestamp: 1, Value: 1}}})
	b.add(writev2.TimeSeries{
		LabelsRefs: b.refs("__name__", "ex_only"),
		Exemplars:  []writev2.Exemplar{{LabelsRefs: b.refs("trace_id", "t"), Value: 1, Timestamp: 1}},
	})
	rec := writeV2Req(h, b.build())
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	requireWritten(t, rec, 1, 0, 1)
	require.Len(t, s.get(`{__name__="ex_only"}`).exemplars, 1)
}

// TestWriteAnnouncesRequestSize: the appender learns a request's item count
// before the first Append, on both protocols.
func TestWriteAnnouncesRequestSize(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	ts := v1Series([]string{"__name__", "a"}, prompb.Sample{Timestamp: 1, Value: 1}, prompb.Sample{Timestamp: 2, Value: 2})
	require.Equal(t, http.StatusNoContent, writeV1Req(h, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{ts, ts}}).Code)
	b := newV2Builder()
	b.add(writev2.TimeSeries{
		LabelsRefs: b.refs("__name__", "b"),
		Samples:    []writev2.Sample{{Timestamp: 1, Value: 1}},
		Exemplars:  []writev2.Exemplar{{LabelsRefs: b.refs("trace_id", "t"), Value: 1, Timestamp: 1}},
	})
	require.Equal(t, http.StatusNoContent, writeV2Req(h, b.build()).Code)
	require.Equal(t, []int{4, 2}, s.grown)
}

// TestWriteUnknownRefs: when the store no longer knows the refs the
// handler cached (an UnknownRefError), each series' labels are built and its
// items appended again through them: nothing is lost or misfiled, over both
// protocols and for every kind of item.
func TestWriteUnknownRefs(t *testing.T) {
	for _, proto := range []string{"1.0", "2.0"} {
		t.Run(proto, func(t *testing.T) {
			s := newFakeStore()
			h, _ := newTestHandler(t, s, Options{})
			send := func() {
				t.Helper()
				var rec *httptest.ResponseRecorder
				if proto == "1.0" {
					rec = writeV1Req(h, v1Request())
				} else {
					rec = writeV2Req(h, v2Request())
				}
				require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			}
			send()
			looked := s.refs
			s.mu.Lock()
			s.forgetRefs = true
			s.mu.Unlock()
			send()
			require.Greater(t, s.refs, looked, "series looked up by their labels again")
			fs := s.get(`{__name__="http_requests_total", job="api"}`)
			require.Equal(t, []fakeSample{{t: 1000, f: 1}, {t: 2000, f: 2}}, fs.samples)
			require.Len(t, fs.exemplars, 2, "one per request: the fake keeps them all")
			require.Len(t, s.get(`{__name__="latency_seconds", job="api"}`).samples, 2)
			require.Equal(t, 2, s.numSeries())
		})
	}
}

// TestWriteRefusesOnlyOutOfRangeItems: an item the store refuses alone (an
// ItemError, such as a timestamp before the layout's range) costs only that
// item: the series' other samples and exemplars, and the other series, are
// stored, the answer is 400 naming the series and the timestamp, and the
// 2.0 headers count what was stored. Both a series of floats and a series
// with exemplars are covered.
func TestWriteRefusesOnlyOutOfRangeItems(t *testing.T) {
	const bad = math.MinInt64
	minTime := int64(math.MinInt64 + 1000)
	floats := []prompb.Sample{{Timestamp: bad, Value: 9}, {Timestamp: 1000, Value: 1}, {Timestamp: 2000, Value: 2}}
	for _, proto := range []string{"1.0", "2.0"} {
		t.Run(proto, func(t *testing.T) {
			s := newFakeStore()
			s.minTime = &minTime
			h, _ := newTestHandler(t, s, Options{})
			var rec *httptest.ResponseRecorder
			if proto == "1.0" {
				withEx := v1Series([]string{"__name__", "ex"}, floats...)
				withEx.Exemplars = []prompb.Exemplar{
					{Labels: []prompb.Label{{Name: "trace_id", Value: "old"}}, Value: 1, Timestamp: bad},
					{Labels: []prompb.Label{{Name: "trace_id", Value: "new"}}, Value: 1, Timestamp: 1000},
				}
				rec = writeV1Req(h, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
					v1Series([]string{"__name__", "floats"}, floats...), withEx,
				}})
			} else {
				b := newV2Builder()
				var v2floats []writev2.Sample
				for _, f := range floats {
					v2floats = append(v2floats, writev2.Sample{Timestamp: f.Timestamp, Value: f.Value})
				}
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "floats"), Samples: v2floats})
				b.add(writev2.TimeSeries{
					LabelsRefs: b.refs("__name__", "ex"), Samples: v2floats,
					Exemplars: []writev2.Exemplar{
						{LabelsRefs: b.refs("trace_id", "old"), Value: 1, Timestamp: bad},
						{LabelsRefs: b.refs("trace_id", "new"), Value: 1, Timestamp: 1000},
					},
				})
				rec = writeV2Req(h, b.build())
				requireWritten(t, rec, 4, 0, 1)
			}
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			body := rec.Body.String()
			require.Contains(t, body, "3 invalid series, metadata entries or items rejected (2 samples, 0 histograms, 1 exemplars not stored); the rest (4 samples, 0 histograms, 1 exemplars) was stored")
			require.Contains(t, body, `{__name__="floats"}: timestamp -9223372036854775808 is out of range`)
			require.Contains(t, body, `{__name__="ex"}: timestamp -9223372036854775808 is out of range`)
			require.Contains(t, body, `{__name__="ex"}: exemplar: timestamp -9223372036854775808 is out of range`)
			want := []fakeSample{{t: 1000, f: 1}, {t: 2000, f: 2}}
			require.Equal(t, want, s.get(`{__name__="floats"}`).samples)
			require.Equal(t, want, s.get(`{__name__="ex"}`).samples)
			require.Len(t, s.get(`{__name__="ex"}`).exemplars, 1)
			require.Equal(t, int64(1000), s.get(`{__name__="ex"}`).exemplars[0].Ts)
		})
	}
}

// TestWriteHistogramAfterCustomBuckets: histograms are decoded one after
// the other into reused buffers; an exponential histogram decoded after a
// custom-buckets one (NHCB) must not inherit its custom bounds, in one
// request as across requests, on both protocols.
func TestWriteHistogramAfterCustomBuckets(t *testing.T) {
	nhcb := &histogram.Histogram{
		Schema: histogram.CustomBucketsSchema, Count: 3, Sum: 1,
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{1, 1},
		CustomValues: []float64{1, 2},
	}
	exp := testHistogram(1)
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	for range 2 {
		rec := writeV1Req(h, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			{Labels: []prompb.Label{{Name: "__name__", Value: "nhcb"}}, Histograms: []prompb.Histogram{prompb.FromIntHistogram(1, nhcb)}},
			{Labels: []prompb.Label{{Name: "__name__", Value: "exp"}}, Histograms: []prompb.Histogram{prompb.FromIntHistogram(1, exp), prompb.FromFloatHistogram(2, exp.ToFloat(nil))}},
		}})
		require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
		b := newV2Builder()
		b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "nhcb_v2"), Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, 1, nhcb)}})
		b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "exp_v2"), Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, 1, exp), writev2.FromFloatHistogram(0, 2, exp.ToFloat(nil))}})
		rec = writeV2Req(h, b.build())
		require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
		requireWritten(t, rec, 0, 3, 0)
	}
	for _, name := range []string{"exp", "exp_v2"} {
		got := s.get(`{__name__="` + name + `"}`).samples
		require.Len(t, got, 2, name)
		require.Nil(t, got[0].h.CustomValues, name)
		require.Equal(t, exp.PositiveBuckets, got[0].h.PositiveBuckets, name)
		require.Nil(t, got[1].fh.CustomValues, name)
	}
	require.Equal(t, []float64{1, 2}, s.get(`{__name__="nhcb_v2"}`).samples[0].h.CustomValues)
}
