package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"
)

// This file is a small remote-write and remote-read client written from the
// protocol (docs/remote-protocols.md §2, §3, §5), independent of the
// adapter's code, so the tests check the wire format, not our own helpers.

// sample is one float sample; the value is kept as bits so that NaN
// payloads, the stale marker and -0 compare exactly.
type sample struct {
	T    int64
	Bits uint64
}

func (s sample) String() string {
	return fmt.Sprintf("t=%d v=%#016x (%g)", s.T, s.Bits, math.Float64frombits(s.Bits))
}

// hsample is one native histogram sample: exactly one of H (integer
// counts) and FH (float counts) is set.
type hsample struct {
	T  int64
	H  *histogram.Histogram
	FH *histogram.FloatHistogram
}

// series is a label set with its float samples and its histogram samples,
// each in time order; a series may switch between the two over time.
// Exemplars are written only: remote read has no place for them.
type series struct {
	Labels     labels.Labels
	Samples    []sample
	Histograms []hsample
	Exemplars  []exemplar.Exemplar
}

var httpClient = &http.Client{Timeout: 2 * time.Minute}

// writeResponse is what a remote-write answer says.
type writeResponse struct {
	Status int
	Body   string
	// The 2.0 headers; "" on 1.0 answers.
	SamplesWritten, HistogramsWritten, ExemplarsWritten string
}

func encodeWriteV1(ss []series) []byte {
	req := &prompb.WriteRequest{}
	for _, s := range ss {
		ts := prompb.TimeSeries{}
		s.Labels.Range(func(l labels.Label) {
			ts.Labels = append(ts.Labels, prompb.Label{Name: l.Name, Value: l.Value})
		})
		for _, smp := range s.Samples {
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: smp.T, Value: math.Float64frombits(smp.Bits)})
		}
		// 1.0 allows samples and histograms in one TimeSeries.
		for _, h := range s.Histograms {
			if h.H != nil {
				ts.Histograms = append(ts.Histograms, prompb.FromIntHistogram(h.T, h.H))
			} else {
				ts.Histograms = append(ts.Histograms, prompb.FromFloatHistogram(h.T, h.FH))
			}
		}
		for _, e := range s.Exemplars {
			ts.Exemplars = append(ts.Exemplars, prompb.Exemplar{
				Labels: prompb.FromLabels(e.Labels, nil), Value: e.Value, Timestamp: e.Ts})
		}
		req.Timeseries = append(req.Timeseries, ts)
	}
	b, err := req.Marshal()
	if err != nil {
		panic(err) // only fails on programming errors
	}
	return b
}

func encodeWriteV2(ss []series) []byte {
	st := writev2.NewSymbolTable()
	req := &writev2.Request{}
	for _, s := range ss {
		// 2.0 forbids samples and histograms in one TimeSeries: a series
		// that has both is sent as two with the same labels, as
		// Prometheus does.
		if len(s.Samples) > 0 || len(s.Histograms) == 0 {
			ts := writev2.TimeSeries{
				LabelsRefs: st.SymbolizeLabels(s.Labels, nil),
				Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: st.Symbolize("an e2e test series")},
			}
			for _, smp := range s.Samples {
				ts.Samples = append(ts.Samples, writev2.Sample{Timestamp: smp.T, Value: math.Float64frombits(smp.Bits)})
			}
			req.Timeseries = append(req.Timeseries, ts)
		}
		if len(s.Histograms) > 0 {
			ts := writev2.TimeSeries{
				LabelsRefs: st.SymbolizeLabels(s.Labels, nil),
				Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_HISTOGRAM, HelpRef: st.Symbolize("an e2e test histogram")},
			}
			for _, h := range s.Histograms {
				if h.H != nil {
					ts.Histograms = append(ts.Histograms, writev2.FromIntHistogram(0, h.T, h.H))
				} else {
					ts.Histograms = append(ts.Histograms, writev2.FromFloatHistogram(0, h.T, h.FH))
				}
			}
			req.Timeseries = append(req.Timeseries, ts)
		}
		last := &req.Timeseries[len(req.Timeseries)-1]
		for _, e := range s.Exemplars {
			last.Exemplars = append(last.Exemplars, writev2.Exemplar{
				LabelsRefs: st.SymbolizeLabels(e.Labels, nil), Value: e.Value, Timestamp: e.Ts})
		}
	}
	req.Symbols = st.Symbols()
	b, err := req.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}

// remoteWrite posts one request; v2 selects remote write 2.0.
func remoteWrite(t testing.TB, a *adapter, v2 bool, ss []series) writeResponse {
	t.Helper()
	var body []byte
	contentType, version := "application/x-protobuf", "0.1.0"
	if v2 {
		body = encodeWriteV2(ss)
		contentType, version = "application/x-protobuf;proto=io.prometheus.write.v2.Request", "2.0.0"
	} else {
		body = encodeWriteV1(ss)
	}
	req, err := http.NewRequest(http.MethodPost, a.url("/api/v1/write"), bytes.NewReader(snappy.Encode(nil, body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", version)
	req.Header.Set("User-Agent", "kairos-adapter-e2e")
	resp, err := httpClient.Do(req)
	require.NoError(t, err, "remote write to %s", a.addr)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return writeResponse{
		Status:            resp.StatusCode,
		Body:              string(b),
		SamplesWritten:    resp.Header.Get("X-Prometheus-Remote-Write-Samples-Written"),
		HistogramsWritten: resp.Header.Get("X-Prometheus-Remote-Write-Histograms-Written"),
		ExemplarsWritten:  resp.Header.Get("X-Prometheus-Remote-Write-Exemplars-Written"),
	}
}

// mustWrite writes ss and requires full success: 204 and, for 2.0, every
// sample, histogram and exemplar confirmed.
func mustWrite(t testing.TB, a *adapter, v2 bool, ss []series) {
	t.Helper()
	res := remoteWrite(t, a, v2, ss)
	require.Equal(t, http.StatusNoContent, res.Status, "remote write (v2=%v) answered: %s", v2, res.Body)
	if v2 {
		require.Equal(t, countItems(ss), res.written(), "2.0 written headers")
	} else {
		require.Equal(t, [3]string{}, res.written(), "a 1.0 answer must not carry 2.0 headers")
	}
}

// written returns the three 2.0 headers: samples, histograms, exemplars.
func (r writeResponse) written() [3]string {
	return [3]string{r.SamplesWritten, r.HistogramsWritten, r.ExemplarsWritten}
}

// countItems returns what the 2.0 headers must confirm for ss: samples,
// histograms, exemplars.
func countItems(ss []series) [3]string {
	var n [3]int
	for _, s := range ss {
		n[0] += len(s.Samples)
		n[1] += len(s.Histograms)
		n[2] += len(s.Exemplars)
	}
	return [3]string{strconv.Itoa(n[0]), strconv.Itoa(n[1]), strconv.Itoa(n[2])}
}

// readQuery is one query of a remote-read request.
type readQuery struct {
	Start, End int64 // inclusive, ms
	Matchers   []*labels.Matcher
}

// remoteRead sends one ReadRequest with the given queries, accepting only
// the response type rt, and returns the series of every query (by query
// index) as text, ready for comparison with expectRead.
func remoteRead(t testing.TB, a *adapter, rt prompb.ReadRequest_ResponseType, queries ...readQuery) [][]string {
	t.Helper()
	got := remoteReadSeries(t, a, rt, queries...)
	out := make([][]string, len(got))
	for i, ss := range got {
		out[i] = formatSeries(ss, rt)
	}
	return out
}

// remoteReadSeries is remoteRead returning the decoded series.
func remoteReadSeries(t testing.TB, a *adapter, rt prompb.ReadRequest_ResponseType, queries ...readQuery) [][]series {
	t.Helper()
	rr := &prompb.ReadRequest{AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{rt}}
	for _, q := range queries {
		pq := &prompb.Query{StartTimestampMs: q.Start, EndTimestampMs: q.End}
		for _, m := range q.Matchers {
			pq.Matchers = append(pq.Matchers, &prompb.LabelMatcher{Type: matchTypes[m.Type], Name: m.Name, Value: m.Value})
		}
		rr.Queries = append(rr.Queries, pq)
	}
	body, err := rr.Marshal()
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, a.url("/api/v1/read"), bytes.NewReader(snappy.Encode(nil, body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("Accept-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Read-Version", "0.1.0")
	resp, err := httpClient.Do(req)
	require.NoError(t, err, "remote read from %s", a.addr)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("remote read (%v) answered %d: %s", rt, resp.StatusCode, b)
	}
	switch rt {
	case prompb.ReadRequest_SAMPLES:
		return decodeSamplesResponse(t, resp, len(queries))
	case prompb.ReadRequest_STREAMED_XOR_CHUNKS:
		return decodeStreamedResponse(t, resp, queries)
	}
	t.Fatalf("unsupported response type %v", rt)
	return nil
}

var matchTypes = map[labels.MatchType]prompb.LabelMatcher_Type{
	labels.MatchEqual:     prompb.LabelMatcher_EQ,
	labels.MatchNotEqual:  prompb.LabelMatcher_NEQ,
	labels.MatchRegexp:    prompb.LabelMatcher_RE,
	labels.MatchNotRegexp: prompb.LabelMatcher_NRE,
}

func decodeSamplesResponse(t testing.TB, resp *http.Response, nQueries int) [][]series {
	t.Helper()
	require.Equal(t, "application/x-protobuf", resp.Header.Get("Content-Type"))
	require.Equal(t, "snappy", resp.Header.Get("Content-Encoding"))
	compressed, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	raw, err := snappy.Decode(nil, compressed)
	require.NoError(t, err, "SAMPLES response is not block snappy")
	var rr prompb.ReadResponse
	require.NoError(t, rr.Unmarshal(raw))
	require.Len(t, rr.Results, nQueries, "one QueryResult per query")
	out := make([][]series, nQueries)
	for i, qr := range rr.Results {
		for _, ts := range qr.Timeseries {
			s := series{Labels: labelsOf(t, ts.Labels)}
			for _, smp := range ts.Samples {
				s.Samples = append(s.Samples, sample{T: smp.Timestamp, Bits: math.Float64bits(smp.Value)})
			}
			// A series that switched between floats and histograms has
			// both lists, each in time order.
			for _, hp := range ts.Histograms {
				if hp.IsFloatHistogram() {
					s.Histograms = append(s.Histograms, hsample{T: hp.Timestamp, FH: hp.ToFloatHistogram()})
				} else {
					s.Histograms = append(s.Histograms, hsample{T: hp.Timestamp, H: hp.ToIntHistogram()})
				}
			}
			require.True(t, slices.IsSortedFunc(s.Samples, func(a, b sample) int { return cmp.Compare(a.T, b.T) }),
				"%s: samples not in time order", s.Labels)
			require.True(t, slices.IsSortedFunc(s.Histograms, func(a, b hsample) int { return cmp.Compare(a.T, b.T) }),
				"%s: histograms not in time order", s.Labels)
			out[i] = append(out[i], s)
		}
	}
	return out
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// chunkEncodings are the chunk types a reader before Prometheus 3.11 can
// decode, and the sample type each holds.
var chunkEncodings = map[prompb.Chunk_Encoding]struct {
	enc chunkenc.Encoding
	vt  chunkenc.ValueType
}{
	prompb.Chunk_XOR:             {chunkenc.EncXOR, chunkenc.ValFloat},
	prompb.Chunk_HISTOGRAM:       {chunkenc.EncHistogram, chunkenc.ValHistogram},
	prompb.Chunk_FLOAT_HISTOGRAM: {chunkenc.EncFloatHistogram, chunkenc.ValFloatHistogram},
}

// decodeStreamedResponse reads STREAMED_XOR_CHUNKS frames: uvarint length,
// big-endian CRC-32C of the message, then a ChunkedReadResponse. It checks
// what the Prometheus client relies on: one series per frame, series of a
// query sorted by labels and in query order, XOR, HISTOGRAM and
// FLOAT_HISTOGRAM chunks whose bounds are right. Samples outside the query
// range are dropped, as the client does.
func decodeStreamedResponse(t testing.TB, resp *http.Response, queries []readQuery) [][]series {
	t.Helper()
	require.Equal(t, "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse", resp.Header.Get("Content-Type"))
	require.Empty(t, resp.Header.Get("Content-Encoding"), "streamed frames are not compressed")
	out := make([][]series, len(queries))
	br := bufio.NewReader(resp.Body)
	lastQuery := int64(0)
	for frame := 0; ; frame++ {
		size, err := binary.ReadUvarint(br)
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "frame %d: length", frame)
		var crc [4]byte
		_, err = io.ReadFull(br, crc[:])
		require.NoError(t, err, "frame %d: checksum", frame)
		msg := make([]byte, size)
		_, err = io.ReadFull(br, msg)
		require.NoError(t, err, "frame %d: message of %d bytes", frame, size)
		require.Equal(t, binary.BigEndian.Uint32(crc[:]), crc32.Checksum(msg, castagnoli), "frame %d: CRC-32C", frame)

		var cr prompb.ChunkedReadResponse
		require.NoError(t, cr.Unmarshal(msg), "frame %d", frame)
		require.Len(t, cr.ChunkedSeries, 1, "frame %d: the Prometheus client reads one series per frame", frame)
		qi := cr.QueryIndex
		require.True(t, qi >= lastQuery && qi < int64(len(queries)), "frame %d: query index %d after %d", frame, qi, lastQuery)
		lastQuery = qi

		cs := cr.ChunkedSeries[0]
		s := series{Labels: labelsOf(t, cs.Labels)}
		for _, c := range cs.Chunks {
			decodeChunk(t, &s, c, queries[qi])
		}
		ss := &out[qi]
		if k := len(*ss); k > 0 && labels.Equal((*ss)[k-1].Labels, s.Labels) {
			// A long series may continue in the next frame.
			(*ss)[k-1].Samples = append((*ss)[k-1].Samples, s.Samples...)
			(*ss)[k-1].Histograms = append((*ss)[k-1].Histograms, s.Histograms...)
			continue
		}
		if k := len(*ss); k > 0 {
			require.Negative(t, labels.Compare((*ss)[k-1].Labels, s.Labels), "query %d: series not sorted: %s before %s", qi, (*ss)[k-1].Labels, s.Labels)
		}
		*ss = append(*ss, s)
	}
	for qi := range out {
		for _, s := range out[qi] {
			require.True(t, slices.IsSortedFunc(s.Samples, func(a, b sample) int { return cmp.Compare(a.T, b.T) }),
				"%s: samples not in time order", s.Labels)
			require.True(t, slices.IsSortedFunc(s.Histograms, func(a, b hsample) int { return cmp.Compare(a.T, b.T) }),
				"%s: histograms not in time order", s.Labels)
		}
		// The client drops series left without samples in the range.
		out[qi] = slices.DeleteFunc(out[qi], func(s series) bool { return len(s.Samples) == 0 && len(s.Histograms) == 0 })
	}
	return out
}

// decodeChunk appends the samples of c within q's range to s.
func decodeChunk(t testing.TB, s *series, c prompb.Chunk, q readQuery) {
	t.Helper()
	ce, ok := chunkEncodings[c.Type]
	require.True(t, ok, "%s: chunk type %v", s.Labels, c.Type)
	chk, err := chunkenc.FromData(ce.enc, c.Data)
	require.NoError(t, err, "%s: %v chunk", s.Labels, c.Type)
	// A histogram chunk keeps a counter reset hint only in its header;
	// its iterator reports the first histogram as "unknown" whatever the
	// header says, so restore an explicit reset from it.
	var header chunkenc.CounterResetHeader
	switch hc := chk.(type) {
	case *chunkenc.HistogramChunk:
		header = hc.GetCounterResetHeader()
	case *chunkenc.FloatHistogramChunk:
		header = hc.GetCounterResetHeader()
	}
	it := chk.Iterator(nil)
	var first, last int64
	n := 0
	for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
		require.Equal(t, ce.vt, vt, "%s: sample type in a %v chunk", s.Labels, c.Type)
		var ts int64
		switch vt {
		case chunkenc.ValFloat:
			var v float64
			ts, v = it.At()
			if ts >= q.Start && ts <= q.End {
				s.Samples = append(s.Samples, sample{T: ts, Bits: math.Float64bits(v)})
			}
		case chunkenc.ValHistogram:
			var h *histogram.Histogram
			ts, h = it.AtHistogram(nil)
			h = h.Copy()
			if n == 0 && header == chunkenc.CounterReset {
				h.CounterResetHint = histogram.CounterReset
			}
			if ts >= q.Start && ts <= q.End {
				s.Histograms = append(s.Histograms, hsample{T: ts, H: h})
			}
		case chunkenc.ValFloatHistogram:
			var fh *histogram.FloatHistogram
			ts, fh = it.AtFloatHistogram(nil)
			fh = fh.Copy()
			if n == 0 && header == chunkenc.CounterReset {
				fh.CounterResetHint = histogram.CounterReset
			}
			if ts >= q.Start && ts <= q.End {
				s.Histograms = append(s.Histograms, hsample{T: ts, FH: fh})
			}
		}
		if n == 0 {
			first = ts
		}
		last = ts
		n++
	}
	require.NoError(t, it.Err(), "%s: %v chunk", s.Labels, c.Type)
	require.Positive(t, n, "%s: empty chunk", s.Labels)
	require.Equal(t, []int64{c.MinTimeMs, c.MaxTimeMs}, []int64{first, last}, "%s: chunk min/max time", s.Labels)
}

// labelsOf converts wire labels, requiring them sorted and unique as the
// Prometheus client does.
func labelsOf(t testing.TB, pls []prompb.Label) labels.Labels {
	t.Helper()
	b := labels.NewScratchBuilder(len(pls))
	for i, l := range pls {
		if i > 0 {
			require.Less(t, pls[i-1].Name, l.Name, "labels not sorted or duplicated")
		}
		b.Add(l.Name, l.Value)
	}
	return b.Labels()
}

// expectRead answers a query from the series known to be written, as
// SAMPLES shows them (and STREAMED_XOR_CHUNKS too if they have no
// histograms).
func expectRead(written []series, q readQuery) []string {
	return expectReadAs(written, q, prompb.ReadRequest_SAMPLES)
}

// expectReadAs answers a query from the series known to be written, as
// response type rt shows them.
func expectReadAs(written []series, q readQuery, rt prompb.ReadRequest_ResponseType) []string {
	var out []series
	for _, s := range written {
		if !matchesAll(q.Matchers, s.Labels) {
			continue
		}
		in := series{Labels: s.Labels}
		for _, smp := range s.Samples {
			if smp.T >= q.Start && smp.T <= q.End {
				in.Samples = append(in.Samples, smp)
			}
		}
		for _, h := range s.Histograms {
			if h.T >= q.Start && h.T <= q.End {
				in.Histograms = append(in.Histograms, h)
			}
		}
		if len(in.Samples) > 0 || len(in.Histograms) > 0 {
			out = append(out, in)
		}
	}
	return formatSeries(out, rt)
}

func matchesAll(ms []*labels.Matcher, ls labels.Labels) bool {
	for _, m := range ms {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// formatSeries renders series as sorted text lines, one per sample or
// histogram, so that a mismatch shows as a readable diff naming the series
// and the sample. Histograms are shown as response type rt can carry them
// (see chunkedView).
func formatSeries(ss []series, rt prompb.ReadRequest_ResponseType) []string {
	out := []string{}
	for _, s := range ss {
		name := strconv.Quote(s.Labels.String())
		type line struct {
			t    int64
			text string
		}
		var lines []line
		for _, smp := range s.Samples {
			lines = append(lines, line{smp.T, smp.String()})
		}
		for _, h := range s.Histograms {
			if rt == prompb.ReadRequest_STREAMED_XOR_CHUNKS {
				h = chunkedView(h)
			}
			lines = append(lines, line{h.T, h.String()})
		}
		// A series that switched between floats and histograms shows
		// them interleaved in time order.
		slices.SortStableFunc(lines, func(a, b line) int { return cmp.Compare(a.t, b.t) })
		for _, l := range lines {
			out = append(out, name+" "+l.text)
		}
	}
	// Sorting by text keeps the per-series time order only for equal-width
	// timestamps, so sort series by labels and samples by time explicitly.
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Compare(a[:strings.LastIndex(a, " t=")], b[:strings.LastIndex(b, " t=")])
	})
	return out
}

// String shows every field of the histogram; floats that must keep their
// bits (the sum, which is the stale marker of a histogram series) as bits.
func (h hsample) String() string {
	if x := h.H; x != nil {
		return fmt.Sprintf("t=%d histogram{hint=%d schema=%d count=%d sum=%#016x (%g) zero=%g/%d pos=%v%v neg=%v%v custom=%v}",
			h.T, x.CounterResetHint, x.Schema, x.Count, math.Float64bits(x.Sum), x.Sum, x.ZeroThreshold, x.ZeroCount,
			x.PositiveSpans, x.PositiveBuckets, x.NegativeSpans, x.NegativeBuckets, x.CustomValues)
	}
	x := h.FH
	return fmt.Sprintf("t=%d float_histogram{hint=%d schema=%d count=%g sum=%#016x (%g) zero=%g/%g pos=%v%v neg=%v%v custom=%v}",
		h.T, x.CounterResetHint, x.Schema, x.Count, math.Float64bits(x.Sum), x.Sum, x.ZeroThreshold, x.ZeroCount,
		x.PositiveSpans, x.PositiveBuckets, x.NegativeSpans, x.NegativeBuckets, x.CustomValues)
}

// chunkedView is what of a histogram a Prometheus chunk (tsdb/chunkenc)
// keeps, so what STREAMED_XOR_CHUNKS can carry: a chunk stores the counter
// reset hint once, in its header, and reads every histogram after its first
// as "no reset"; and it stores all its histograms in one bucket layout,
// adding empty buckets to those that lack some. So histograms compare with
// empty buckets removed and the hint reduced to gauge, reset, or not a reset:
// a written reset must still read as one (decodeChunk restores it from the
// header), and nothing else may.
func chunkedView(h hsample) hsample {
	hint := func(h histogram.CounterResetHint) histogram.CounterResetHint {
		if h == histogram.UnknownCounterReset {
			return histogram.NotCounterReset
		}
		return h
	}
	if h.H != nil {
		h.H = h.H.Copy()
		h.H.CounterResetHint = hint(h.H.CounterResetHint)
		h.H.Compact(0)
	} else {
		h.FH = h.FH.Copy()
		h.FH.CounterResetHint = hint(h.FH.CounterResetHint)
		h.FH.Compact(0)
	}
	return h
}

func mustMatcher(t labels.MatchType, name, value string) *labels.Matcher {
	return labels.MustNewMatcher(t, name, value)
}
