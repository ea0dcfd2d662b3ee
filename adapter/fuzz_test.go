package adapter

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/stretchr/testify/require"
)

// The fuzz targets below take a protobuf body and a flag: raw=false sends
// the body snappy-compressed, so mutations reach the decoders and handlers
// instead of dying in snappy; raw=true sends it as is, to cover the snappy
// and size checks. Besides the f.Add seeds, testdata/fuzz holds the bodies
// of the bad-input corpus (TestFuzzSeedsFromCorpus keeps them in sync).
//
// Run one with e.g. go test -run '^$' -fuzz '^FuzzWriteV2$' -fuzztime 30s ./adapter

// FuzzWriteV2 posts a remote-write 2.0 body to a handler over the fake store,
// which never fails: the answer must be 204 or a 4xx, with the three written
// headers, confirming no more than the request holds (all of it on 204), and
// nothing may be stored beyond what the headers confirm. It is differential
// both ways against the generated decoder: a body it refuses is refused as
// undecodable, and a body it accepts is not, but for the refusals
// allowedDecodeRefusal names.
func FuzzWriteV2(f *testing.F) {
	b := newV2Builder()
	b.add(writev2.TimeSeries{
		LabelsRefs: b.refs("__name__", "up", "job", "a"),
		Samples:    []writev2.Sample{{Value: 1, Timestamp: 1000}, {Value: 2, Timestamp: 2000}},
		Exemplars:  []writev2.Exemplar{{LabelsRefs: b.refs("trace_id", "abc"), Value: 1, Timestamp: 1000}},
		Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: b.st.Symbolize("help")},
	})
	b.add(writev2.TimeSeries{
		LabelsRefs: b.refs("__name__", "latency_seconds"),
		Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, 1000, testHistogram(1))},
	})
	valid, err := b.build().Marshal()
	require.NoError(f, err)
	f.Add(valid, false)
	f.Add(snappy.Encode(nil, valid), true)

	f.Fuzz(func(t *testing.T, data []byte, raw bool) {
		body := data
		if !raw {
			body = snappy.Encode(nil, data)
		}
		s := newFakeStore()
		h, _ := newTestHandler(t, s, Options{})
		rec := post(h, "/api/v1/write", ctV2, "snappy", body)
		require.Contains(t, []int{http.StatusNoContent, http.StatusBadRequest, http.StatusRequestEntityTooLarge}, rec.Code, "body: %s", rec.Body)

		var written [3]int
		for i, name := range []string{headerSamplesWritten, headerHistogramsWritten, headerExemplarsWritten} {
			n, err := strconv.Atoi(rec.Header().Get(name))
			require.NoError(t, err, "%s header", name)
			require.GreaterOrEqual(t, n, 0, name)
			written[i] = n
		}

		// What the request holds, by the generated decoder.
		var sent [3]int
		// A body that announces more than the handler takes (413) is not
		// decoded here either: a seed announces 2 GiB.
		var decoded []byte
		n, err := snappy.DecodedLen(body)
		if err == nil && n > DefaultMaxRequestBytes {
			err = errors.New("too large")
		}
		if err == nil {
			decoded, err = snappy.Decode(nil, body)
		}
		var req writev2.Request
		snappyOK := err == nil
		if snappyOK {
			err = req.Unmarshal(decoded)
		}
		undecodable := rec.Code == http.StatusBadRequest && strings.Contains(rec.Body.String(), "is not a valid")
		if err != nil {
			require.NotEqual(t, http.StatusNoContent, rec.Code, "accepted a body the generated decoder refuses: %v", err)
			require.Zero(t, written, "confirmed items of an undecodable body")
			if snappyOK && rec.Code == http.StatusBadRequest {
				require.True(t, undecodable, "a body the generated decoder refuses (%v) is refused as undecodable, got: %s", err, rec.Body)
			}
		} else {
			if undecodable {
				require.True(t, allowedDecodeRefusal(rec.Body.String()), "refused as undecodable a body the generated decoder accepts: %s", rec.Body)
			}
			for _, ts := range req.Timeseries {
				sent[0] += len(ts.Samples)
				sent[1] += len(ts.Histograms)
				sent[2] += len(ts.Exemplars)
			}
			for i := range sent {
				require.LessOrEqual(t, written[i], sent[i], "written header %d", i)
			}
			if rec.Code == http.StatusNoContent {
				require.Equal(t, sent, written, "a 204 confirms everything")
			}
		}

		stored := 0
		for _, fs := range s.series {
			stored += len(fs.samples)
		}
		// Samples of one series at one timestamp share a cell, hence <=.
		require.LessOrEqual(t, stored, written[0]+written[1], "stored more than confirmed")
	})
}

// allowedDecodeRefusal reports the bodies the generated 2.0 decoder accepts
// that the handler refuses as undecodable on purpose: a body of unknown
// fields only, which is a 1.0 or read body sent as 2.0 and would be silently
// dropped (docs/remote-protocols.md §3.1), and remotewrite's deliberate
// differences from the generated decoder (its allowedDifference): a field
// number beyond int32, a varint beyond 64 bits, a packed labels_refs varint
// running past its field, and a labels_refs value beyond uint32.
func allowedDecodeRefusal(msg string) bool {
	return strings.Contains(msg, "it holds only unknown fields") ||
		strings.Contains(msg, "invalid field number") ||
		strings.Contains(msg, "variable length integer overflow") ||
		strings.Contains(msg, "runs past the end of its packed field") ||
		strings.Contains(msg, "labels_refs value") && strings.Contains(msg, "overflows uint32")
}

// FuzzRead posts a remote-read body to a handler over the fake store filled
// with readFixture: the answer must be 200 or a 4xx, and a 200 must be a
// well-formed SAMPLES response or stream with one result per query.
func FuzzRead(f *testing.F) {
	for _, types := range [][]prompb.ReadRequest_ResponseType{samplesOnly, streamedOnly, prometheusTypes} {
		req := &prompb.ReadRequest{AcceptedResponseTypes: types, Queries: []*prompb.Query{
			allQuery(),
			{StartTimestampMs: 1000, EndTimestampMs: 3000, Matchers: []*prompb.LabelMatcher{
				matcher(prompb.LabelMatcher_EQ, "__name__", "up"),
				matcher(prompb.LabelMatcher_NRE, "job", "b|c"),
				matcher(prompb.LabelMatcher_NEQ, "instance", "x"),
			}},
		}}
		b, err := req.Marshal()
		require.NoError(f, err)
		f.Add(b, false)
	}

	f.Fuzz(func(t *testing.T, data []byte, raw bool) {
		body := data
		if !raw {
			body = snappy.Encode(nil, data)
		}
		s := newFakeStore()
		readFixture(s)
		h, _ := newTestHandler(t, s, Options{})
		rec := post(h, "/api/v1/read", "application/x-protobuf", "snappy", body)
		require.Contains(t, []int{http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge}, rec.Code, "body: %s", rec.Body)
		if rec.Code != http.StatusOK {
			return
		}
		decoded, err := snappy.Decode(nil, body)
		require.NoError(t, err, "a 200 to a body that is not snappy")
		var req prompb.ReadRequest
		require.NoError(t, req.Unmarshal(decoded), "a 200 to a body that is not a ReadRequest")
		streamed := rec.Header().Get("Content-Type") == streamedContentType
		decodeAny(t, rec, streamed, len(req.Queries))
	})
}
