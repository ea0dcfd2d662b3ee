package remotewrite

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/stretchr/testify/require"
)

// marshalV1 marshals without top-level unknown fields, so nil and empty
// slices compare equal.
func marshalV1(t testing.TB, req *prompb.WriteRequest) []byte {
	c := *req
	c.XXX_unrecognized = nil
	// Nor unknown fields of series, labels and samples, which the
	// hand-written decoder skips.
	c.Timeseries = slices.Clone(c.Timeseries)
	for i := range c.Timeseries {
		c.Timeseries[i].XXX_unrecognized = nil
		c.Timeseries[i].Labels = slices.Clone(c.Timeseries[i].Labels)
		for j := range c.Timeseries[i].Labels {
			c.Timeseries[i].Labels[j].XXX_unrecognized = nil
		}
		c.Timeseries[i].Samples = slices.Clone(c.Timeseries[i].Samples)
		for j := range c.Timeseries[i].Samples {
			c.Timeseries[i].Samples[j].XXX_unrecognized = nil
		}
	}
	b, err := c.Marshal()
	require.NoError(t, err)
	return b
}

func marshalV2(t testing.TB, req *writev2.Request) []byte {
	c := *req
	c.XXX_unrecognized = nil
	c.Timeseries = slices.Clone(c.Timeseries)
	for i := range c.Timeseries {
		ts := &c.Timeseries[i]
		ts.XXX_unrecognized, ts.Metadata.XXX_unrecognized = nil, nil
		ts.Samples = slices.Clone(ts.Samples)
		for j := range ts.Samples {
			ts.Samples[j].XXX_unrecognized = nil
		}
	}
	b, err := c.Marshal()
	require.NoError(t, err)
	return b
}

func rawBody(t testing.TB, m marshaler) []byte {
	b, err := m.Marshal()
	require.NoError(t, err)
	return b
}

// unknownField is field 15, a varint, which neither request defines.
var unknownField = []byte{15 << 3, 0x2a}

func unmarshalSeeds(t testing.TB) [][]byte {
	v1 := rawBody(t, v1Request())
	v2 := rawBody(t, v2Request())
	return [][]byte{
		nil,
		v1,
		v2,
		rawBody(t, benchV1Request()),
		append(append([]byte{}, v1...), unknownField...),
		append(append([]byte{}, unknownField...), v2...),
		rawBody(t, &prompb.ReadRequest{Queries: []*prompb.Query{allQuery()}}),
		v1[:len(v1)/2],
		{0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		{0x00},
		{0x0b}, // field 1, start group
		// A 2.0 series whose packed labels_refs end inside a varint
		// (FuzzWriteV2 found it; see allowedDifference).
		[]byte("*\x15\n\x03\x88\x86\xb70000000000000\xf000"),
		// A 1.0 sample whose timestamp varint carries bits beyond 64 in
		// its tenth byte (see allowedDifference).
		[]byte("\n\x1e\n\x06\n\x01a\x12\x01b\x12\x14\t\x00\x00\x00\x00\x00\x00\x00\x00\x10\x80\x80\x80\x80\x80\x80\x80\x80\x80\x7f"),
	}
}

// maxRef is the largest symbol ref of a request: of its series' labels,
// exemplar labels and metadata.
func maxRef(req *writev2.Request) uint32 {
	var m uint32
	for _, ts := range req.Timeseries {
		m = max(m, ts.Metadata.HelpRef, ts.Metadata.UnitRef)
		for _, r := range ts.LabelsRefs {
			m = max(m, r)
		}
		for _, e := range ts.Exemplars {
			for _, r := range e.LabelsRefs {
				m = max(m, r)
			}
		}
	}
	return m
}

// toPrompb turns a decoded 1.0 window back into the generated type, for
// comparing the two decoders. Labels are decoded here, as the handler
// decodes them, and a failure rejects the whole request there.
func toPrompb(out *prompb.WriteRequest, req *rw1Request) error {
	out.Metadata = append(out.Metadata, req.metadata...)
	for _, ts := range req.series {
		pts := prompb.TimeSeries{
			Exemplars:  decodedFields[prompb.Exemplar](ts.exemplars, 3),
			Histograms: decodedFields[prompb.Histogram](ts.histograms, 4),
		}
		for _, s := range decodedSamples(ts.samples) {
			pts.Samples = append(pts.Samples, prompb.Sample{Value: s.Value, Timestamp: s.Timestamp})
		}
		if err := decodeV1Labels(ts.labels, func(name, value string) {
			pts.Labels = append(pts.Labels, prompb.Label{Name: strings.Clone(name), Value: strings.Clone(value)})
		}); err != nil {
			return err
		}
		out.Timeseries = append(out.Timeseries, pts)
	}
	return nil
}

// decodedFields decodes the fields num of encoded fields with their
// generated decoder.
func decodedFields[T any, P interface {
	*T
	Unmarshal([]byte) error
}](es encodedFields, num uint64) []T {
	var out []T
	for p := es.b; ; {
		payload, rest, ok := nextPayload(p, num)
		if !ok {
			break
		}
		var err error
		if out, err = appendDecoded[T, P](out, payload); err != nil {
			panic(err)
		}
		p = rest
	}
	if len(out) != es.n {
		panic("encodedFields count disagrees with its fields")
	}
	return out
}

// decodedSamples decodes encoded samples field by field, keeping their
// start timestamps, and checks that nextSample, the handler's decoder,
// finds the same ones.
func decodedSamples(es encodedFields) []writev2.Sample {
	var out []writev2.Sample
	for p := es.b; len(p) > 0; {
		field, _, payload, rest, err := nextField(p)
		if err != nil {
			panic(err)
		}
		if field == 2 {
			v, tt, start, _ := unmarshalSample(payload)
			out = append(out, writev2.Sample{Value: v, Timestamp: tt, StartTimestamp: start})
		}
		p = rest
	}
	i := 0
	for p := es.b; ; i++ {
		v, tt, rest, ok := nextSample(p)
		if !ok {
			break
		}
		if i >= len(out) || math.Float64bits(v) != math.Float64bits(out[i].Value) || tt != out[i].Timestamp {
			panic("nextSample disagrees with the fields")
		}
		p = rest
	}
	if i != len(out) || es.n != len(out) {
		panic("encodedFields count disagrees with its fields")
	}
	return out
}

// decodeV1 decodes a whole 1.0 body window by window, windows of two
// series or metadata entries, into the generated type.
func decodeV1(req *rw1Request, body, arena []byte) (*prompb.WriteRequest, bool, error) {
	out := &prompb.WriteRequest{}
	unknown := false
	for rest := body; len(rest) > 0; {
		var u bool
		var err error
		rest, u, arena, err = unmarshalV1Request(req, rest, arena, 2)
		unknown = unknown || u
		if err != nil {
			return nil, unknown, err
		}
		if err := toPrompb(out, req); err != nil {
			return nil, unknown, &MalformedError{err}
		}
	}
	return out, unknown, nil
}

// decodeV2 is decodeV1 for 2.0.
func decodeV2(req *rw2Request, body []byte, a *v2Arena) (*writev2.Request, bool, uint32, error) {
	unknown, err := unmarshalV2Symbols(req, body)
	if err != nil {
		return nil, unknown, 0, err
	}
	out := &writev2.Request{Symbols: slices.Clone(req.symbols)}
	var maxRef uint32
	for rest := body; len(rest) > 0; {
		var sum v2Summary
		rest, sum, err = unmarshalV2Window(req, rest, a, 2)
		if err != nil {
			return nil, unknown, 0, err
		}
		maxRef = max(maxRef, sum.maxRef)
		for _, ts := range req.series {
			out.Timeseries = append(out.Timeseries, writev2.TimeSeries{
				LabelsRefs: slices.Clone(ts.refs), Samples: decodedSamples(ts.samples),
				Histograms: decodedFields[writev2.Histogram](ts.histograms, 3),
				Exemplars:  decodedFields[writev2.Exemplar](ts.exemplars, 4),
				Metadata:   writev2.Metadata{Type: ts.meta.Type, HelpRef: ts.meta.HelpRef, UnitRef: ts.meta.UnitRef},
			})
		}
	}
	return out, unknown, maxRef, nil
}

// dirtyV1 is a decoded request whose slices a reuse must not leak.
func dirtyV1(t testing.TB) (*rw1Request, []byte) {
	var req rw1Request
	_, _, arena, err := unmarshalV1Request(&req, rawBody(t, v1Request()), nil, writeWindow)
	require.NoError(t, err)
	return &req, arena
}

// dirtyV2 is dirtyV1 for 2.0: a request and arena that decoded another
// request before.
func dirtyV2(t testing.TB) (*rw2Request, *v2Arena) {
	var req rw2Request
	var a v2Arena
	_, _, _, err := decodeV2(&req, rawBody(t, v2Request()), &a)
	require.NoError(t, err)
	return &req, &a
}

// The hand-written decoders decode exactly what the generated decoder
// does, window by window, into a struct reused from a different earlier
// request, and fail where it fails.
func TestUnmarshalMatchesGenerated(t *testing.T) {
	for i, body := range unmarshalSeeds(t) {
		t.Run(fmt.Sprint(i), func(t *testing.T) { requireMatchesGenerated(t, body) })
	}
}

// FuzzUnmarshal is differential both ways: the hand-written decoders
// accept a body exactly when the generated ones do, and then decode the
// same content. The allowed differences are allowedDifference's.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range unmarshalSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(requireMatchesGenerated)
}

func requireMatchesGenerated(t *testing.T, body []byte) {
	var want prompb.WriteRequest
	wantErr := want.Unmarshal(body)
	got, arena := dirtyV1(t)
	gotReq, unknown, err := decodeV1(got, body, arena)
	switch {
	case wantErr == nil && err != nil && allowedDifference(err):
	case wantErr == nil:
		require.NoError(t, err, "a body the generated 1.0 decoder accepts")
		require.Equal(t, marshalV1(t, &want), marshalV1(t, gotReq))
		require.Equal(t, len(want.XXX_unrecognized) > 0, unknown)
	default:
		require.Error(t, err, "a body the generated 1.0 decoder refuses: %v", wantErr)
	}

	var want2 writev2.Request
	wantErr = want2.Unmarshal(body)
	got2, a := dirtyV2(t)
	gotReq2, unknown, gotMax, err := decodeV2(got2, body, a)
	switch {
	case wantErr == nil && err != nil && allowedDifference(err):
	case wantErr == nil:
		require.NoError(t, err, "a body the generated 2.0 decoder accepts")
		require.Equal(t, marshalV2(t, &want2), marshalV2(t, gotReq2))
		require.Equal(t, len(want2.XXX_unrecognized) > 0, unknown)
		require.Equal(t, maxRef(&want2), gotMax)
	default:
		require.Error(t, err, "a body the generated 2.0 decoder refuses: %v", wantErr)
	}
}

// allowedDifference reports the errors with which the hand-written
// decoders refuse, on purpose, bodies the generated (gogo) ones accept:
//   - a field number beyond int32 (a tag varint of five or more bytes):
//     the protobuf encoding has no such field numbers, and protowire (the
//     reference Go decoder, which nextField uses) refuses them, while the
//     generated decoders truncate them to int32 and may read them as some
//     other, even a known, field;
//   - a varint of ten bytes whose last one carries bits beyond 64: protowire
//     refuses it as an overflow, the generated decoders drop those bits;
//   - a packed labels_refs varint of a 2.0 series that runs past the end
//     of its field (errPackedOverrun): the generated decoder reads it on
//     into the next bytes, and then decodes the rest of the series shifted;
//   - a series' labels_refs value beyond uint32 (2.0): protobuf truncates
//     it to 32 bits, which would make it name some other symbol and file
//     samples under a series the sender never meant (appendRefs).
//
// The adapter's FuzzWriteV2 allows the same.
func allowedDifference(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "invalid field number") ||
		strings.Contains(msg, "variable length integer overflow") ||
		strings.Contains(msg, "runs past the end of its packed field") ||
		strings.Contains(msg, "labels_refs value") && strings.Contains(msg, "overflows uint32")
}

// appendRefs decodes packed runs mixing one-, two- and longer varints, as
// a symbols table past 16,384 entries produces, appends them after what
// refs held, and rejects what the generated decoder rejects.
func TestAppendRefs(t *testing.T) {
	packed := func(vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.AppendUvarint(b, v)
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		wire    uint64
		payload []byte
		want    []uint32
		wantMax uint32
		wantErr string
	}{
		{"one byte", 2, packed(1, 2, 127), []uint32{1, 2, 127}, 127, ""},
		{"two bytes", 2, packed(128, 16383, 5), []uint32{128, 16383, 5}, 16383, ""},
		{"three and five bytes", 2, packed(16384, 7, math.MaxUint32), []uint32{16384, 7, math.MaxUint32}, math.MaxUint32, ""},
		{"empty run", 2, nil, nil, 0, ""},
		{"not packed", 0, packed(300), []uint32{300}, 300, ""},
		{"overflow", 2, packed(3, math.MaxUint32+1), nil, 0, "overflows uint32"},
		{"truncated", 2, []byte{5, 0x80}, nil, 0, "unexpected EOF"},
		{"wrong wire", 5, []byte{1, 2, 3, 4}, nil, 0, "wrong wire type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := []uint32{9, 9}
			var maxRef uint32
			got, err := appendRefs(prev, tc.wire, tc.payload, &maxRef)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, append([]uint32{9, 9}, tc.want...), got)
			require.Equal(t, tc.wantMax, maxRef)
		})
	}
}
