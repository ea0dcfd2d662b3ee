package adapter

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
)

var (
	samplesOnly  = []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES}
	streamedOnly = []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS}
	// What Prometheus >= 2.55 sends.
	prometheusTypes = []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS, prompb.ReadRequest_SAMPLES}
)

// wireSample is a sample as a client sees it, comparable with require.Equal
// even for NaN (floats as bits). Histogram counter-reset hints are zeroed:
// chunk encoding legitimately rewrites them.
type wireSample struct {
	T  int64
	F  uint64
	H  *histogram.Histogram
	FH *histogram.FloatHistogram
}

// wireSeries is one series of a query result.
type wireSeries struct {
	Labels  string
	Samples []wireSample
}

func floatSample(t int64, v float64) wireSample { return wireSample{T: t, F: math.Float64bits(v)} }

// readFixture fills a store with float series (with a stale marker and
// NaN), a long series spanning several chunks, and int and float histogram
// series; it returns what a query over everything must return, sorted.
func readFixture(s *fakeStore) []wireSeries {
	type entry struct {
		ls labels.Labels
		ws wireSeries
	}
	var entries []entry
	addFloats := func(ls labels.Labels, n int, special map[int]float64) {
		var fs []fakeSample
		var ws []wireSample
		for i := range n {
			v := float64(i) * 1.5
			if sv, ok := special[i]; ok {
				v = sv
			}
			fs = append(fs, fakeSample{t: int64(i) * 1000, f: v})
			ws = append(ws, floatSample(int64(i)*1000, v))
		}
		s.add(ls, fs...)
		entries = append(entries, entry{ls, wireSeries{Labels: ls.String(), Samples: ws}})
	}
	addFloats(labels.FromStrings("__name__", "up", "job", "a"), 10, map[int]float64{3: math.Float64frombits(value.StaleNaN), 5: math.Float64frombits(value.NormalNaN)})
	addFloats(labels.FromStrings("__name__", "up", "job", "b"), 10, map[int]float64{9: math.Float64frombits(value.StaleNaN)})
	addFloats(labels.FromStrings("__name__", "up", "instance", "x"), 5, nil)
	addFloats(labels.FromStrings("__name__", "http_requests_total", "code", "200", "job", "a"), 300, nil)

	var hs, fhs []fakeSample
	var hw, fhw []wireSample
	for i := range 5 {
		hs = append(hs, fakeSample{t: int64(i) * 1000, h: testHistogram(int64(i))})
		hw = append(hw, wireSample{T: int64(i) * 1000, H: testHistogram(int64(i))})
		fh := testHistogram(int64(i)).ToFloat(nil)
		fhs = append(fhs, fakeSample{t: int64(i) * 1000, fh: fh})
		fhw = append(fhw, wireSample{T: int64(i) * 1000, FH: testHistogram(int64(i)).ToFloat(nil)})
	}
	hls := labels.FromStrings("__name__", "latency_seconds", "job", "a")
	s.add(hls, hs...)
	entries = append(entries, entry{hls, wireSeries{Labels: hls.String(), Samples: hw}})
	fhls := labels.FromStrings("__name__", "latency_float_seconds", "job", "a")
	s.add(fhls, fhs...)
	entries = append(entries, entry{fhls, wireSeries{Labels: fhls.String(), Samples: fhw}})

	slices.SortFunc(entries, func(a, b entry) int { return labels.Compare(a.ls, b.ls) })
	want := make([]wireSeries, 0, len(entries))
	for _, e := range entries {
		want = append(want, e.ws)
	}
	return want
}

func readRequest(h http.Handler, types []prompb.ReadRequest_ResponseType, queries ...*prompb.Query) *httptest.ResponseRecorder {
	req := &prompb.ReadRequest{Queries: queries, AcceptedResponseTypes: types}
	b, err := req.Marshal()
	if err != nil {
		panic(err)
	}
	return post(h, "/api/v1/read", "application/x-protobuf", "snappy", snappy.Encode(nil, b))
}

func matcher(t prompb.LabelMatcher_Type, name, val string) *prompb.LabelMatcher {
	return &prompb.LabelMatcher{Type: t, Name: name, Value: val}
}

func allQuery() *prompb.Query {
	return &prompb.Query{StartTimestampMs: 0, EndTimestampMs: math.MaxInt64, Matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_RE, "__name__", ".+")}}
}

// decodeSamples decodes a SAMPLES answer into series per query.
func decodeSamples(t *testing.T, rec *httptest.ResponseRecorder) [][]wireSeries {
	t.Helper()
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "application/x-protobuf", rec.Header().Get("Content-Type"))
	require.Equal(t, "snappy", rec.Header().Get("Content-Encoding"))
	raw, err := snappy.Decode(nil, rec.Body.Bytes())
	require.NoError(t, err)
	var resp prompb.ReadResponse
	require.NoError(t, resp.Unmarshal(raw))
	var out [][]wireSeries
	sb := labels.NewScratchBuilder(0)
	for _, res := range resp.Results {
		var qs []wireSeries
		for _, ts := range res.Timeseries {
			ws := wireSeries{Labels: ts.ToLabels(&sb, nil).String()}
			for _, s := range ts.Samples {
				ws.Samples = append(ws.Samples, floatSample(s.Timestamp, s.Value))
			}
			for _, hp := range ts.Histograms {
				if hp.IsFloatHistogram() {
					ws.Samples = append(ws.Samples, wireSample{T: hp.Timestamp, FH: hp.ToFloatHistogram()})
				} else {
					ws.Samples = append(ws.Samples, wireSample{T: hp.Timestamp, H: hp.ToIntHistogram()})
				}
			}
			qs = append(qs, ws)
		}
		out = append(out, qs)
	}
	return out
}

// frame is one decoded STREAMED_XOR_CHUNKS frame.
type frame struct {
	queryIndex int64
	labels     labels.Labels
	samples    []wireSample
}

// readFrames is a client-side frame reader: uvarint length, big-endian
// CRC-32C, message; it checks the checksum, one series per frame, and at
// most 120 samples per chunk with correct min/max times.
func readFrames(t *testing.T, body []byte) []frame {
	t.Helper()
	table := crc32.MakeTable(crc32.Castagnoli)
	r := bytes.NewReader(body)
	var frames []frame
	sb := labels.NewScratchBuilder(0)
	for {
		size, err := binary.ReadUvarint(r)
		if errors.Is(err, io.EOF) {
			return frames
		}
		require.NoError(t, err)
		var sum [4]byte
		_, err = io.ReadFull(r, sum[:])
		require.NoError(t, err)
		msg := make([]byte, size)
		_, err = io.ReadFull(r, msg)
		require.NoError(t, err, "truncated frame")
		require.Equal(t, binary.BigEndian.Uint32(sum[:]), crc32.Checksum(msg, table), "frame checksum")

		var resp prompb.ChunkedReadResponse
		require.NoError(t, resp.Unmarshal(msg))
		require.Len(t, resp.ChunkedSeries, 1, "exactly one series per frame")
		cs := resp.ChunkedSeries[0]
		f := frame{queryIndex: resp.QueryIndex, labels: cs.ToLabels(&sb, nil)}
		for _, c := range cs.Chunks {
			require.Contains(t, []prompb.Chunk_Encoding{prompb.Chunk_XOR, prompb.Chunk_HISTOGRAM, prompb.Chunk_FLOAT_HISTOGRAM}, c.Type)
			chk, err := chunkenc.FromData(chunkenc.Encoding(c.Type), c.Data)
			require.NoError(t, err)
			require.LessOrEqual(t, chk.NumSamples(), 120, "samples per chunk")
			var ts []int64
			it := chk.Iterator(nil)
			for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
				switch vt {
				case chunkenc.ValFloat:
					tt, v := it.At()
					f.samples = append(f.samples, floatSample(tt, v))
				case chunkenc.ValHistogram:
					tt, h := it.AtHistogram(nil)
					h.CounterResetHint = histogram.UnknownCounterReset
					f.samples = append(f.samples, wireSample{T: tt, H: h})
				case chunkenc.ValFloatHistogram:
					tt, fh := it.AtFloatHistogram(nil)
					fh.CounterResetHint = histogram.UnknownCounterReset
					f.samples = append(f.samples, wireSample{T: tt, FH: fh})
				}
				ts = append(ts, it.AtT())
			}
			require.NoError(t, it.Err())
			require.Equal(t, chk.NumSamples(), len(ts))
			require.Equal(t, c.MinTimeMs, ts[0])
			require.Equal(t, c.MaxTimeMs, ts[len(ts)-1])
		}
		frames = append(frames, f)
	}
}

// decodeStreamed decodes a STREAMED_XOR_CHUNKS answer into series per query,
// joining frames of a split series and checking the sort order.
func decodeStreamed(t *testing.T, rec *httptest.ResponseRecorder, nQueries int) [][]wireSeries {
	t.Helper()
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse", rec.Header().Get("Content-Type"))
	require.Empty(t, rec.Header().Get("Content-Encoding"))
	out := make([][]wireSeries, nQueries)
	var prev *frame
	for _, f := range readFrames(t, rec.Body.Bytes()) {
		if prev != nil {
			require.GreaterOrEqual(t, f.queryIndex, prev.queryIndex, "queries answered in order")
		}
		q := &out[f.queryIndex]
		if prev != nil && prev.queryIndex == f.queryIndex && labels.Equal(prev.labels, f.labels) {
			// Continuation of a series split over frames.
			(*q)[len(*q)-1].Samples = append((*q)[len(*q)-1].Samples, f.samples...)
		} else {
			if prev != nil && prev.queryIndex == f.queryIndex {
				require.Negative(t, labels.Compare(prev.labels, f.labels), "series sorted: %s then %s", prev.labels, f.labels)
			}
			*q = append(*q, wireSeries{Labels: f.labels.String(), Samples: f.samples})
		}
		prev = &f
	}
	return out
}

// decodeAny decodes either response type.
func decodeAny(t *testing.T, rec *httptest.ResponseRecorder, streamed bool, nQueries int) [][]wireSeries {
	t.Helper()
	if streamed {
		return decodeStreamed(t, rec, nQueries)
	}
	res := decodeSamples(t, rec)
	require.Len(t, res, nQueries, "one QueryResult per query")
	return res
}

var responseTypes = []struct {
	name     string
	types    []prompb.ReadRequest_ResponseType
	streamed bool
}{
	{name: "samples", types: samplesOnly},
	{name: "streamed", types: streamedOnly, streamed: true},
}

func TestReadAll(t *testing.T) {
	for _, rt := range responseTypes {
		t.Run(rt.name, func(t *testing.T) {
			s := newFakeStore()
			want := readFixture(s)
			h, reg := newTestHandler(t, s, Options{})
			rec := readRequest(h, rt.types, allQuery())
			got := decodeAny(t, rec, rt.streamed, 1)
			require.Equal(t, want, got[0])
			require.True(t, s.selects[0].sorted)

			typ := map[bool]string{false: "samples", true: "streamed_xor_chunks"}[rt.streamed]
			require.Equal(t, 1.0, metricValue(t, reg, "kairos_adapter_read_queries_total", "code", "200", "response_type", typ))
			require.Equal(t, float64(len(want)), metricValue(t, reg, "kairos_adapter_read_series_returned_total", "response_type", typ))
			require.Equal(t, float64(10+10+5+300+5+5), metricValue(t, reg, "kairos_adapter_read_samples_returned_total", "response_type", typ))
		})
	}
}

func TestReadStreamedChunking(t *testing.T) {
	s := newFakeStore()
	readFixture(s)
	h, _ := newTestHandler(t, s, Options{})
	rec := readRequest(h, streamedOnly, &prompb.Query{EndTimestampMs: math.MaxInt64, Matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_EQ, "__name__", "http_requests_total")}})
	frames := readFrames(t, rec.Body.Bytes())
	// 300 samples fit one frame of 1 MiB, in chunks of 120, 120, 60.
	require.Len(t, frames, 1)
	require.Len(t, frames[0].samples, 300)
}

// A series larger than MaxBytesInFrame is split over consecutive frames
// with identical labels, each frame holding whole chunks.
func TestReadStreamedSplitsLongSeries(t *testing.T) {
	s := newFakeStore()
	ls := labels.FromStrings("__name__", "long", "job", "a")
	var fs []fakeSample
	var want []wireSample
	for i := range 1000 {
		v := math.Sin(float64(i))
		if i == 500 {
			v = math.Float64frombits(value.StaleNaN)
		}
		fs = append(fs, fakeSample{t: int64(i) * 15000, f: v})
		want = append(want, floatSample(int64(i)*15000, v))
	}
	s.add(ls, fs...)
	s.add(labels.FromStrings("__name__", "long", "job", "b"), fakeSample{t: 1, f: 1})
	h, _ := newTestHandler(t, s, Options{MaxBytesInFrame: 256})
	rec := readRequest(h, streamedOnly, &prompb.Query{EndTimestampMs: math.MaxInt64, Matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_EQ, "__name__", "long")}})
	frames := readFrames(t, rec.Body.Bytes())
	require.Len(t, frames, 9+1) // ceil(1000/120) chunks, one per frame at this budget, then job="b"
	var got []wireSample
	for _, f := range frames[:9] {
		require.Equal(t, ls, f.labels)
		got = append(got, f.samples...)
	}
	require.Equal(t, want, got)
	require.Equal(t, labels.FromStrings("__name__", "long", "job", "b"), frames[9].labels)
}

func TestReadSeveralQueriesInOrder(t *testing.T) {
	for _, rt := range responseTypes {
		t.Run(rt.name, func(t *testing.T) {
			s := newFakeStore()
			want := readFixture(s)
			byLabels := map[string]wireSeries{}
			for _, w := range want {
				byLabels[w.Labels] = w
			}
			h, _ := newTestHandler(t, s, Options{})
			q := func(job string) *prompb.Query {
				return &prompb.Query{EndTimestampMs: math.MaxInt64, Matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_EQ, "__name__", "up"), matcher(prompb.LabelMatcher_EQ, "job", job)}}
			}
			rec := readRequest(h, rt.types, q("b"), q("a"), q("nope"), q("b"))
			got := decodeAny(t, rec, rt.streamed, 4)
			upA := byLabels[`{__name__="up", job="a"}`]
			upB := byLabels[`{__name__="up", job="b"}`]
			require.Equal(t, [][]wireSeries{{upB}, {upA}, nil, {upB}}, got)
		})
	}
}

// The time range of the query bounds the samples (the fake filters by the
// Querier's mint/maxt, as the real store does).
func TestReadTimeRange(t *testing.T) {
	for _, rt := range responseTypes {
		t.Run(rt.name, func(t *testing.T) {
			s := newFakeStore()
			readFixture(s)
			h, _ := newTestHandler(t, s, Options{})
			rec := readRequest(h, rt.types, &prompb.Query{StartTimestampMs: 2000, EndTimestampMs: 4000, Matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_EQ, "job", "b")}})
			got := decodeAny(t, rec, rt.streamed, 1)
			require.Equal(t, [][]wireSeries{{{Labels: `{__name__="up", job="b"}`, Samples: []wireSample{floatSample(2000, 3), floatSample(3000, 4.5), floatSample(4000, 6)}}}}, got)
		})
	}
}

func TestReadNegotiation(t *testing.T) {
	for _, tc := range []struct {
		name         string
		types        []prompb.ReadRequest_ResponseType
		wantCode     int
		wantStreamed bool
	}{
		{name: "empty means samples", types: nil, wantCode: http.StatusOK},
		{name: "samples", types: samplesOnly, wantCode: http.StatusOK},
		{name: "prometheus order picks streamed", types: prometheusTypes, wantCode: http.StatusOK, wantStreamed: true},
		{name: "first supported wins", types: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS}, wantCode: http.StatusOK},
		{name: "unknown skipped", types: []prompb.ReadRequest_ResponseType{7, prompb.ReadRequest_STREAMED_XOR_CHUNKS}, wantCode: http.StatusOK, wantStreamed: true},
		{name: "none supported", types: []prompb.ReadRequest_ResponseType{7, 8}, wantCode: http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeStore()
			want := readFixture(s)
			h, _ := newTestHandler(t, s, Options{})
			rec := readRequest(h, tc.types, allQuery())
			require.Equal(t, tc.wantCode, rec.Code, rec.Body.String())
			if tc.wantCode != http.StatusOK {
				require.Contains(t, rec.Body.String(), "none of the accepted response types")
				return
			}
			require.Equal(t, want, decodeAny(t, rec, tc.wantStreamed, 1)[0])
		})
	}
}

func TestReadMatchers(t *testing.T) {
	s := newFakeStore()
	readFixture(s)
	h, _ := newTestHandler(t, s, Options{})
	for _, tc := range []struct {
		name     string
		matchers []*prompb.LabelMatcher
		want     []string
	}{
		{name: "regex is anchored", matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_RE, "__name__", "u")}, want: nil},
		{name: "regex alternation", matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_RE, "__name__", "up|http_requests_total"), matcher(prompb.LabelMatcher_EQ, "job", "a")}, want: []string{
			`{__name__="http_requests_total", code="200", job="a"}`, `{__name__="up", job="a"}`,
		}},
		{name: "empty value matches absent label", matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_EQ, "__name__", "up"), matcher(prompb.LabelMatcher_EQ, "job", "")}, want: []string{`{__name__="up", instance="x"}`}},
		{name: "NEQ keeps absent label", matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_EQ, "__name__", "up"), matcher(prompb.LabelMatcher_NEQ, "job", "a")}, want: []string{`{__name__="up", instance="x"}`, `{__name__="up", job="b"}`}},
		{name: "NRE", matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_EQ, "__name__", "up"), matcher(prompb.LabelMatcher_NRE, "job", ".+")}, want: []string{`{__name__="up", instance="x"}`}},
		{name: "no name matcher", matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_EQ, "code", "200")}, want: []string{`{__name__="http_requests_total", code="200", job="a"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := readRequest(h, samplesOnly, &prompb.Query{EndTimestampMs: math.MaxInt64, Matchers: tc.matchers})
			var got []string
			for _, ws := range decodeSamples(t, rec)[0] {
				got = append(got, ws.Labels)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestReadInvalidMatcher(t *testing.T) {
	for _, rt := range responseTypes {
		t.Run(rt.name, func(t *testing.T) {
			s := newFakeStore()
			readFixture(s)
			h, reg := newTestHandler(t, s, Options{})
			// The bad matcher is in the second query: still a clean 400,
			// nothing streamed, no query run.
			bad := &prompb.Query{EndTimestampMs: 10, Matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_RE, "job", "a(")}}
			rec := readRequest(h, rt.types, allQuery(), bad)
			require.Equal(t, http.StatusBadRequest, rec.Code)
			require.Contains(t, rec.Body.String(), `query 1: invalid matcher job=~"a(": error parsing regexp`)
			require.Empty(t, s.selects)
			typ := map[bool]string{false: "samples", true: "streamed_xor_chunks"}[rt.streamed]
			require.Equal(t, 2.0, metricValue(t, reg, "kairos_adapter_read_queries_total", "code", "400", "response_type", typ))

			rec = readRequest(h, rt.types, &prompb.Query{Matchers: []*prompb.LabelMatcher{{Type: 9, Name: "job", Value: "a"}}})
			require.Equal(t, http.StatusBadRequest, rec.Code)
			require.Contains(t, rec.Body.String(), `query 0: unknown matcher type 9 for label "job"`)
		})
	}
}

func TestReadHugeInvalidMatcherQuotedShort(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	huge := "(" + strings.Repeat("a", 512<<10)
	rec := readRequest(h, responseTypes[0].types, &prompb.Query{EndTimestampMs: 10, Matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_RE, "job", huge)}})
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Less(t, rec.Body.Len(), 2048, "the answer echoes the matcher whole")
	require.Contains(t, rec.Body.String(), `query 0: invalid matcher job=~"(aaa`)
}

func TestReadLimits(t *testing.T) {
	// Series in labels order: http_requests_total (300 samples),
	// latency_float_seconds (5), latency_seconds (5), up{instance} (5),
	// up{job="a"} (10), up{job="b"} (10).
	for _, tc := range []struct {
		name      string
		opts      Options
		maxSeries int // the store's
		wantMsg   string
		wantAbort bool // streamed only: the limit hits after the first frame
	}{
		{name: "sample limit in first series", opts: Options{MaxSamplesPerQuery: 200}, wantMsg: "exceeded sample limit (200)"},
		{name: "sample limit later", opts: Options{MaxSamplesPerQuery: 310}, wantMsg: "exceeded sample limit (310)", wantAbort: true},
		// The store refuses the query before it returns a series.
		{name: "series limit", maxSeries: 1, wantMsg: "the query selects 6 series, more than the limit of 1 (--query.max-series)"},
	} {
		t.Run(tc.name+" samples", func(t *testing.T) {
			s := newFakeStore()
			s.maxSeries = tc.maxSeries
			readFixture(s)
			h, _ := newTestHandler(t, s, tc.opts)
			rec := readRequest(h, samplesOnly, allQuery())
			require.Equal(t, http.StatusBadRequest, rec.Code)
			require.Contains(t, rec.Body.String(), tc.wantMsg)
		})
		t.Run(tc.name+" streamed", func(t *testing.T) {
			s := newFakeStore()
			s.maxSeries = tc.maxSeries
			readFixture(s)
			h, reg := newTestHandler(t, s, tc.opts)
			if !tc.wantAbort {
				rec := readRequest(h, streamedOnly, allQuery())
				require.Equal(t, http.StatusBadRequest, rec.Code)
				require.Contains(t, rec.Body.String(), tc.wantMsg)
				return
			}
			rec := requireAborted(t, h, streamedOnly, allQuery())
			// What was streamed before the abort is well-formed.
			require.NotEmpty(t, readFrames(t, rec.Body.Bytes()))
			require.Equal(t, 1.0, metricValue(t, reg, "kairos_adapter_read_streams_aborted_total"))
			require.Equal(t, 1.0, metricValue(t, reg, "kairos_adapter_request_duration_seconds", "code", "aborted", "handler", "read"))
			require.Equal(t, 1.0, metricValue(t, reg, "kairos_adapter_read_queries_total", "code", "aborted", "response_type", "streamed_xor_chunks"))
		})
	}
}

// requireAborted serves a read that must abort the connection after the
// first frame: net/http turns panic(http.ErrAbortHandler) into a reset
// connection, so the handler must panic with exactly that value.
func requireAborted(t *testing.T, h http.Handler, types []prompb.ReadRequest_ResponseType, queries ...*prompb.Query) *httptest.ResponseRecorder {
	t.Helper()
	b, err := (&prompb.ReadRequest{Queries: queries, AcceptedResponseTypes: types}).Marshal()
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "/api/v1/read", bytes.NewReader(snappy.Encode(nil, b)))
	req.Header.Set("Content-Encoding", "snappy")
	rec := httptest.NewRecorder()
	require.PanicsWithValue(t, http.ErrAbortHandler, func() { h.ServeHTTP(rec, req) })
	require.Equal(t, http.StatusOK, rec.Code)
	return rec
}

func TestReadStoreErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(*fakeStore)
		opts     Options
		wantCode int
		wantMsg  string
	}{
		{name: "querier error", setup: func(s *fakeStore) { s.querierErr = errors.New("no hosts") }, wantCode: http.StatusInternalServerError, wantMsg: "query 0: no hosts"},
		{name: "select error", setup: func(s *fakeStore) { s.selectErr = errors.New("read timeout on row_keys") }, wantCode: http.StatusInternalServerError, wantMsg: "read timeout on row_keys"},
		{name: "select error with status", setup: func(s *fakeStore) {
			s.selectErr = fmt.Errorf("plan: %w", storeerr.Invalid(errors.New("query touches more than 100 metrics")))
		}, wantCode: http.StatusBadRequest, wantMsg: "query touches more than 100 metrics"},
		{name: "select deadline", setup: func(s *fakeStore) { s.selectErr = context.DeadlineExceeded }, wantCode: http.StatusServiceUnavailable},
		{name: "read timeout option", opts: Options{ReadTimeout: 1}, wantCode: http.StatusServiceUnavailable, wantMsg: "deadline exceeded"},
	} {
		for _, rt := range responseTypes {
			t.Run(tc.name+" "+rt.name, func(t *testing.T) {
				s := newFakeStore()
				readFixture(s)
				if tc.setup != nil {
					tc.setup(s)
				}
				h, _ := newTestHandler(t, s, tc.opts)
				rec := readRequest(h, rt.types, allQuery())
				require.Equal(t, tc.wantCode, rec.Code, rec.Body.String())
				require.Contains(t, rec.Body.String(), tc.wantMsg)
				require.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
				require.Empty(t, rec.Header().Get("Content-Encoding"))
			})
		}
	}
}

// An error in a later query, after frames went out, aborts the stream.
func TestReadStreamedErrorAfterFirstFrameAborts(t *testing.T) {
	s := newFakeStore()
	readFixture(s)
	// The second query's Querier fails, after the first query streamed.
	h, _ := newTestHandler(t, &failingSecondQuery{fakeStore: s}, Options{})
	second := &prompb.Query{EndTimestampMs: math.MaxInt64, Matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_EQ, "__name__", "up")}}
	rec := requireAborted(t, h, streamedOnly, allQuery(), second)
	frames := readFrames(t, rec.Body.Bytes())
	require.Len(t, frames, 6)
	for _, f := range frames {
		require.Zero(t, f.queryIndex)
	}
}

type failingSecondQuery struct {
	*fakeStore
	calls int
}

func (f *failingSecondQuery) ChunkQuerier(mint, maxt int64) (storage.ChunkQuerier, error) {
	if f.calls++; f.calls > 1 {
		return nil, errors.New("cassandra went away")
	}
	return f.fakeStore.ChunkQuerier(mint, maxt)
}

// Series out of order from the store would corrupt the client's merge: the
// streamed answer refuses them (here after the first frame: abort).
func TestReadStreamedUnsortedStore(t *testing.T) {
	s := newFakeStore()
	readFixture(s)
	s.unsorted = true
	h, _ := newTestHandler(t, s, Options{})
	rec := requireAborted(t, h, streamedOnly, allQuery())
	require.Len(t, readFrames(t, rec.Body.Bytes()), 1)
}

func TestReadBadRequests(t *testing.T) {
	good := encode(t, &prompb.ReadRequest{Queries: []*prompb.Query{allQuery()}})
	raw, err := (&prompb.ReadRequest{Queries: []*prompb.Query{allQuery()}}).Marshal()
	require.NoError(t, err)
	for _, tc := range []struct {
		name, encoding string
		body           []byte
		wantCode       int
		wantMsg        string
	}{
		{name: "valid", encoding: "snappy", body: good, wantCode: http.StatusOK},
		{name: "missing encoding is snappy", encoding: "", body: good, wantCode: http.StatusOK},
		{name: "gzip encoding", encoding: "gzip", body: gzipped(t, raw), wantCode: http.StatusUnsupportedMediaType},
		{name: "framed snappy", encoding: "snappy", body: framedSnappy(t, raw), wantCode: http.StatusBadRequest, wantMsg: "framed"},
		{name: "uncompressed", encoding: "snappy", body: raw, wantCode: http.StatusBadRequest, wantMsg: "snappy"},
		{name: "bad protobuf", encoding: "snappy", body: snappy.Encode(nil, []byte{0x0a, 0xff}), wantCode: http.StatusBadRequest, wantMsg: "not a valid prometheus.ReadRequest"},
		{name: "empty body", encoding: "snappy", body: nil, wantCode: http.StatusBadRequest, wantMsg: "empty body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeStore()
			readFixture(s)
			h, _ := newTestHandler(t, s, Options{})
			rec := post(h, "/api/v1/read", "application/x-protobuf", tc.encoding, tc.body)
			require.Equal(t, tc.wantCode, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tc.wantMsg)
		})
	}
}

func TestReadConcurrencyLimit(t *testing.T) {
	s := newFakeStore()
	readFixture(s)
	s.selectGate = make(chan struct{})
	h, reg := newTestHandler(t, s, Options{MaxConcurrentReads: 1})
	var wg sync.WaitGroup
	first := make(chan *httptest.ResponseRecorder, 1)
	wg.Go(func() { first <- readRequest(h, samplesOnly, allQuery()) })
	waitAtGate(t, s) // the first request holds the slot

	rec := readRequest(h, streamedOnly, allQuery())
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Contains(t, rec.Body.String(), "too many concurrent read requests (limit 1)")
	require.Equal(t, 1.0, metricValue(t, reg, "kairos_adapter_concurrency_limit_rejections_total", "handler", "read"))

	close(s.selectGate)
	wg.Wait()
	require.Equal(t, http.StatusOK, (<-first).Code)
	require.Equal(t, http.StatusOK, readRequest(h, streamedOnly, allQuery()).Code)
}

// Written through the write endpoint, read back through both response
// types: stale markers and NaN survive bit for bit.
func TestWriteThenReadRoundTrip(t *testing.T) {
	s := newFakeStore()
	h, _ := newTestHandler(t, s, Options{})
	values := []float64{1, math.Float64frombits(value.StaleNaN), math.Float64frombits(value.NormalNaN), math.Inf(-1), 2}
	ts := v1Series([]string{"__name__", "rt", "job", "x"})
	var want []wireSample
	for i, v := range values {
		ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: int64(i) * 1000, Value: v})
		want = append(want, floatSample(int64(i)*1000, v))
	}
	require.Equal(t, http.StatusNoContent, writeV1Req(h, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{ts}}).Code)
	for _, rt := range responseTypes {
		t.Run(rt.name, func(t *testing.T) {
			rec := readRequest(h, rt.types, &prompb.Query{EndTimestampMs: math.MaxInt64, Matchers: []*prompb.LabelMatcher{matcher(prompb.LabelMatcher_EQ, "__name__", "rt")}})
			require.Equal(t, [][]wireSeries{{{Labels: `{__name__="rt", job="x"}`, Samples: want}}}, decodeAny(t, rec, rt.streamed, 1))
		})
	}
}
