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
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"
)

// This file is a small remote-write and remote-read client written from the
// protocol (prometheus-remote-protocols.md §2, §3, §5), independent of the
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

// series is a label set with its samples in time order.
type series struct {
	Labels  labels.Labels
	Samples []sample
}

var httpClient = &http.Client{Timeout: 2 * time.Minute}

// writeResponse is what a remote-write answer says.
type writeResponse struct {
	Status         int
	Body           string
	SamplesWritten string // 2.0 header; "" on 1.0 answers
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
		ts := writev2.TimeSeries{
			LabelsRefs: st.SymbolizeLabels(s.Labels, nil),
			Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: st.Symbolize("an e2e test series")},
		}
		for _, smp := range s.Samples {
			ts.Samples = append(ts.Samples, writev2.Sample{Timestamp: smp.T, Value: math.Float64frombits(smp.Bits)})
		}
		req.Timeseries = append(req.Timeseries, ts)
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
		Status:         resp.StatusCode,
		Body:           string(b),
		SamplesWritten: resp.Header.Get("X-Prometheus-Remote-Write-Samples-Written"),
	}
}

// mustWrite writes ss and requires full success: 204 and, for 2.0, every
// sample confirmed.
func mustWrite(t testing.TB, a *adapter, v2 bool, ss []series) {
	t.Helper()
	res := remoteWrite(t, a, v2, ss)
	require.Equal(t, http.StatusNoContent, res.Status, "remote write (v2=%v) answered: %s", v2, res.Body)
	if v2 {
		require.Equal(t, strconv.Itoa(countSamples(ss)), res.SamplesWritten, "2.0 samples-written header")
	} else {
		require.Empty(t, res.SamplesWritten, "a 1.0 answer must not carry 2.0 headers")
	}
}

func countSamples(ss []series) int {
	n := 0
	for _, s := range ss {
		n += len(s.Samples)
	}
	return n
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
	var got [][]series
	switch rt {
	case prompb.ReadRequest_SAMPLES:
		got = decodeSamplesResponse(t, resp, len(queries))
	case prompb.ReadRequest_STREAMED_XOR_CHUNKS:
		got = decodeStreamedResponse(t, resp, queries)
	}
	out := make([][]string, len(got))
	for i, ss := range got {
		out[i] = formatSeries(ss)
	}
	return out
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
			require.Empty(t, ts.Histograms, "%s: unexpected histograms", s.Labels)
			for _, smp := range ts.Samples {
				s.Samples = append(s.Samples, sample{T: smp.Timestamp, Bits: math.Float64bits(smp.Value)})
			}
			require.True(t, slices.IsSortedFunc(s.Samples, func(a, b sample) int { return cmp.Compare(a.T, b.T) }),
				"%s: samples not in time order", s.Labels)
			out[i] = append(out[i], s)
		}
	}
	return out
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// decodeStreamedResponse reads STREAMED_XOR_CHUNKS frames: uvarint length,
// big-endian CRC-32C of the message, then a ChunkedReadResponse. It checks
// what the Prometheus client relies on: one series per frame, series of a
// query sorted by labels and in query order, XOR chunks whose bounds are
// right. Samples outside the query range are dropped, as the client does.
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
		ls := labelsOf(t, cs.Labels)
		var smps []sample
		for _, c := range cs.Chunks {
			require.Equal(t, prompb.Chunk_XOR, c.Type, "%s: chunk type", ls)
			chk, err := chunkenc.FromData(chunkenc.EncXOR, c.Data)
			require.NoError(t, err, "%s: chunk", ls)
			it := chk.Iterator(nil)
			var first, last int64
			n := 0
			for it.Next() == chunkenc.ValFloat {
				ts, v := it.At()
				if n == 0 {
					first = ts
				}
				last = ts
				n++
				if ts >= queries[qi].Start && ts <= queries[qi].End {
					smps = append(smps, sample{T: ts, Bits: math.Float64bits(v)})
				}
			}
			require.NoError(t, it.Err(), "%s: chunk", ls)
			require.Positive(t, n, "%s: empty chunk", ls)
			require.Equal(t, []int64{c.MinTimeMs, c.MaxTimeMs}, []int64{first, last}, "%s: chunk min/max time", ls)
		}
		ss := &out[qi]
		if k := len(*ss); k > 0 && labels.Equal((*ss)[k-1].Labels, ls) {
			// A long series may continue in the next frame.
			(*ss)[k-1].Samples = append((*ss)[k-1].Samples, smps...)
			continue
		}
		if k := len(*ss); k > 0 {
			require.Negative(t, labels.Compare((*ss)[k-1].Labels, ls), "query %d: series not sorted: %s before %s", qi, (*ss)[k-1].Labels, ls)
		}
		*ss = append(*ss, series{Labels: ls, Samples: smps})
	}
	for qi := range out {
		for _, s := range out[qi] {
			require.True(t, slices.IsSortedFunc(s.Samples, func(a, b sample) int { return cmp.Compare(a.T, b.T) }),
				"%s: samples not in time order", s.Labels)
		}
		// The client drops series left without samples in the range.
		out[qi] = slices.DeleteFunc(out[qi], func(s series) bool { return len(s.Samples) == 0 })
	}
	return out
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

// expectRead answers a query from the series known to be written.
func expectRead(written []series, q readQuery) []string {
	var out []series
	for _, s := range written {
		if !matchesAll(q.Matchers, s.Labels) {
			continue
		}
		var smps []sample
		for _, smp := range s.Samples {
			if smp.T >= q.Start && smp.T <= q.End {
				smps = append(smps, smp)
			}
		}
		if len(smps) > 0 {
			out = append(out, series{Labels: s.Labels, Samples: smps})
		}
	}
	return formatSeries(out)
}

func matchesAll(ms []*labels.Matcher, ls labels.Labels) bool {
	for _, m := range ms {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// formatSeries renders series as sorted text lines, one per sample, so that
// a mismatch shows as a readable diff naming the series and the sample.
func formatSeries(ss []series) []string {
	out := []string{}
	for _, s := range ss {
		name := strconv.Quote(s.Labels.String())
		for _, smp := range s.Samples {
			out = append(out, name+" "+smp.String())
		}
	}
	// Sorting by text keeps the per-series time order only for equal-width
	// timestamps, so sort series by labels and samples by time explicitly.
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Compare(a[:strings.LastIndex(a, " t=")], b[:strings.LastIndex(b, " t=")])
	})
	return out
}

func mustMatcher(t labels.MatchType, name, value string) *labels.Matcher {
	return labels.MustNewMatcher(t, name, value)
}
