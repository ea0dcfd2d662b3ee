package adapter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"unsafe"

	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// The two functions below decode the top level of a write request by hand
// and leave each series to the generated decoder. The generated top-level
// decoder appends a zeroed TimeSeries per series, throwing away the label
// and sample slices a pooled request already has; reusing them saves 4-5
// allocations and ~1 KB per series of a typical 1.0 request (BenchmarkWrite).
//
// Series are decoded by hand too (unmarshalTimeSeries, unmarshalV2Series):
// label names, values and symbols become strings that point into the
// decoded body instead of one allocation each. That is safe because nothing
// keeps them past the request: labels are copied into the ScratchBuilder's
// buffer, and the Appender contract says it copies what it keeps. The
// generated decoder cost 10 of the 11 allocations per sample of a typical
// 1.0 request (BenchmarkPipeline).
//
// Only slices whose contents never reach the store are reused: labels and
// float samples are copied into labels.Labels and passed by value.
// Histograms and exemplars are fresh per request, because converted
// histograms share their bucket slices with the decoded message.

var errBadProtobuf = errors.New("proto: malformed message")

// nextField splits the first field off a protobuf message: its number, wire
// type, payload (the bytes of a length-delimited field, the raw bytes
// otherwise) and the rest of the message. Groups are refused; no remote
// protocol message uses them.
func nextField(b []byte) (field, wire uint64, payload, rest []byte, err error) {
	tag, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, nil, nil, errBadProtobuf
	}
	b = b[n:]
	field, wire = tag>>3, tag&7
	if field == 0 || field > math.MaxInt32 {
		return 0, 0, nil, nil, fmt.Errorf("proto: illegal field number %d", field)
	}
	switch wire {
	case 0: // varint
		if _, n = binary.Uvarint(b); n <= 0 {
			return 0, 0, nil, nil, errBadProtobuf
		}
		return field, wire, b[:n], b[n:], nil
	case 1: // fixed64
		if len(b) < 8 {
			return 0, 0, nil, nil, io.ErrUnexpectedEOF
		}
		return field, wire, b[:8], b[8:], nil
	case 2: // length-delimited
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return 0, 0, nil, nil, io.ErrUnexpectedEOF
		}
		end := n + int(l)
		return field, wire, b[n:end], b[end:], nil
	case 5: // fixed32
		if len(b) < 4 {
			return 0, 0, nil, nil, io.ErrUnexpectedEOF
		}
		return field, wire, b[:4], b[4:], nil
	case 3: // start group: skipped to its end, iteratively, however deep
		n, err := skipGroup(b)
		if err != nil {
			return 0, 0, nil, nil, err
		}
		return field, wire, b[:n], b[n:], nil
	default:
		return 0, 0, nil, nil, fmt.Errorf("proto: unsupported wire type %d for field %d", wire, field)
	}
}

// shortField is nextField's fast path for what fills a 2.0 request: a
// length-delimited field numbered 1-15 (a one-byte tag) shorter than 16 KiB
// (a length of at most two bytes). ok is false for anything else, which
// nextField then decodes.
func shortField(b []byte) (field uint64, payload, rest []byte, ok bool) {
	if len(b) < 2 || b[0] >= 0x80 || b[0]&7 != 2 || b[0] < 1<<3 {
		return 0, nil, nil, false
	}
	l, n := int(b[1]), 2
	if l >= 0x80 {
		if len(b) < 3 || b[2] >= 0x80 {
			return 0, nil, nil, false
		}
		l, n = l&0x7f|int(b[2])<<7, 3
	}
	if l > len(b)-n {
		return 0, nil, nil, false
	}
	return uint64(b[0] >> 3), b[n : n+l], b[n+l:], true
}

// skipGroup returns the length of a group's fields plus its end tag, b
// starting right after the start tag.
func skipGroup(b []byte) (int, error) {
	depth, off := 1, 0
	for depth > 0 {
		tag, n := binary.Uvarint(b[off:])
		if n <= 0 {
			return 0, io.ErrUnexpectedEOF
		}
		off += n
		var l uint64
		switch tag & 7 {
		case 0:
			if _, n = binary.Uvarint(b[off:]); n <= 0 {
				return 0, errBadProtobuf
			}
			off += n
			continue
		case 1:
			l = 8
		case 2:
			var n int
			if l, n = binary.Uvarint(b[off:]); n <= 0 {
				return 0, io.ErrUnexpectedEOF
			}
			off += n
		case 3:
			depth++
			continue
		case 4:
			depth--
			continue
		case 5:
			l = 4
		default:
			return 0, fmt.Errorf("proto: illegal wire type %d", tag&7)
		}
		if l > uint64(len(b)-off) {
			return 0, io.ErrUnexpectedEOF
		}
		off += int(l)
	}
	return off, nil
}

// rw1Request is a decoded prometheus.WriteRequest whose series keep their
// labels encoded (rw1Series).
type rw1Request struct {
	series   []rw1Series
	metadata []prompb.MetricMetadata
}

// rw1Series is a decoded prometheus.TimeSeries. Its label fields stay
// encoded: those bytes are the key of the handler's series cache, and are
// decoded (decodeV1Labels) only for a series the cache does not know.
type rw1Series struct {
	labels     []byte // the series' label fields, in the order sent
	samples    []prompb.Sample
	exemplars  []prompb.Exemplar
	histograms []prompb.Histogram
}

// unmarshalV1Request decodes a prometheus.WriteRequest into req, reusing
// req's slices. unknown reports fields WriteRequest does not define (a 2.0
// or read body sent to the 1.0 decoder has only those). arena holds label
// fields that were not sent next to each other (the caller reuses it).
func unmarshalV1Request(req *rw1Request, b []byte, arena []byte) (unknown bool, _ []byte, err error) {
	req.series, req.metadata = req.series[:0], req.metadata[:0]
	arena = arena[:0]
	for len(b) > 0 {
		field, wire, payload, rest, err := nextField(b)
		if err != nil {
			return unknown, arena, err
		}
		b = rest
		switch field {
		case 1: // timeseries
			if wire != 2 {
				return unknown, arena, wrongWire(wire, "timeseries")
			}
			req.series = growOne(req.series)
			ts := &req.series[len(req.series)-1]
			*ts = rw1Series{samples: ts.samples[:0]}
			if arena, err = unmarshalTimeSeries(ts, payload, arena); err != nil {
				return unknown, arena, err
			}
		case 3: // metadata
			if wire != 2 {
				return unknown, arena, wrongWire(wire, "metadata")
			}
			if req.metadata, err = appendDecoded(req.metadata, payload); err != nil {
				return unknown, arena, err
			}
		default:
			unknown = true
		}
	}
	return unknown, arena, nil
}

// v2Summary is what decoding a 2.0 request learns on the way, so that the
// handler does not walk the series again for it: each walk over a
// request's series costs cache misses, as 2,000 of them do not fit in L1.
type v2Summary struct {
	// unknown: as for unmarshalV1Request (fields 1-3 are reserved in 2.0
	// so that a 1.0 body shows up here).
	unknown bool
	// received counts the samples, histograms and exemplars of all series.
	received counts
	// maxRef is the largest symbol ref of the request: of labels,
	// exemplar labels and metadata. When it is inside the table, so are
	// all of them.
	maxRef uint32
	// oddRefs is set when the labels_refs of a series or an exemplar have
	// an odd length.
	oddRefs bool
}

// unmarshalV2Request decodes an io.prometheus.write.v2.Request into req,
// reusing req's slices; the series' refs and samples are slices of a,
// reused across requests too.
func unmarshalV2Request(req *writev2.Request, b []byte, a *v2Arena) (v2Summary, error) {
	var sum v2Summary
	req.Symbols, req.Timeseries = req.Symbols[:0], req.Timeseries[:0]
	a.refs, a.samples = a.refs[:0], a.samples[:0]
	for len(b) > 0 {
		field, payload, rest, ok := shortField(b)
		wire := uint64(2)
		var err error
		if !ok {
			if field, wire, payload, rest, err = nextField(b); err != nil {
				return sum, err
			}
		}
		b = rest
		switch field {
		case 4: // symbols
			if wire != 2 {
				return sum, wrongWire(wire, "symbols")
			}
			req.Symbols = append(req.Symbols, bodyString(payload))
		case 5: // timeseries
			if wire != 2 {
				return sum, wrongWire(wire, "timeseries")
			}
			req.Timeseries = growOne(req.Timeseries)
			ts := &req.Timeseries[len(req.Timeseries)-1]
			*ts = writev2.TimeSeries{}
			if err := unmarshalV2Series(ts, payload, &sum.maxRef, a); err != nil {
				return sum, err
			}
			sum.received.add(counts{len(ts.Samples), len(ts.Histograms), len(ts.Exemplars)})
			sum.oddRefs = sum.oddRefs || len(ts.LabelsRefs)%2 != 0
			sum.maxRef = max(sum.maxRef, ts.Metadata.HelpRef, ts.Metadata.UnitRef)
			for i := range ts.Exemplars {
				refs := ts.Exemplars[i].LabelsRefs
				sum.oddRefs = sum.oddRefs || len(refs)%2 != 0
				for _, r := range refs {
					sum.maxRef = max(sum.maxRef, r)
				}
			}
		default:
			sum.unknown = true
		}
	}
	return sum, nil
}

// growOne extends s by one element, keeping the element's old contents when
// s had room (the caller reuses its slices).
func growOne[S ~[]E, E any](s S) S {
	if len(s) < cap(s) {
		return s[:len(s)+1]
	}
	var zero E
	return append(s, zero)
}

// bodyString views b, a part of the request's decoded body, as a string
// without copying it (see the top of this file for why that is safe).
func bodyString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// appendDecoded appends to s the message payload holds, decoded by its
// generated Unmarshal: for the fields rare enough not to be decoded by hand.
func appendDecoded[T any, P interface {
	*T
	Unmarshal([]byte) error
}](s []T, payload []byte) ([]T, error) {
	s = append(s, *new(T))
	return s, P(&s[len(s)-1]).Unmarshal(payload)
}

func wrongWire(wire uint64, field string) error {
	return fmt.Errorf("proto: wrong wire type %d for field %s", wire, field)
}

// uvarint decodes the payload of a varint field, which nextField checked.
func uvarint(p []byte) uint64 {
	v, _ := binary.Uvarint(p)
	return v
}

// unmarshalTimeSeries decodes a prometheus.TimeSeries into ts, leaving its
// labels encoded. Label fields interleaved with other fields are gathered
// in arena. Unknown fields are skipped, as the generated decoder does.
func unmarshalTimeSeries(ts *rw1Series, b []byte, arena []byte) ([]byte, error) {
	var gathered bool // ts.labels lives in arena
	for len(b) > 0 {
		// The fast path, which halves the decoding time of a typical
		// series: Prometheus sends label fields with a one-byte length,
		// and then one sample; both are framed here without nextField.
		if b[0] == 1<<3|2 && len(b) > 1 && b[1] < 0x80 && int(b[1]) < len(b)-1 {
			n := 2 + int(b[1])
			if !gathered && len(ts.labels) > 0 && adjacent(ts.labels, b) {
				ts.labels = ts.labels[:len(ts.labels)+n] // inline: the hot case
			} else {
				arena = ts.appendLabelField(b[:n], arena, &gathered)
			}
			b = b[n:]
			continue
		}
		if v, t, n, ok := plainSample(b); ok {
			ts.samples = append(ts.samples, prompb.Sample{Value: v, Timestamp: t})
			b = b[n:]
			continue
		}
		field, wire, payload, rest, err := nextField(b)
		if err != nil {
			return arena, err
		}
		switch field {
		case 1: // labels: checked when decoded
			if wire != 2 {
				return arena, wrongWire(wire, "labels")
			}
			arena = ts.appendLabelField(b[:len(b)-len(rest)], arena, &gathered)
		case 2: // samples
			if wire != 2 {
				return arena, wrongWire(wire, "samples")
			}
			v, t, _, err := unmarshalSample(payload)
			if err != nil {
				return arena, err
			}
			ts.samples = append(ts.samples, prompb.Sample{Value: v, Timestamp: t})
		case 3: // exemplars
			if wire != 2 {
				return arena, wrongWire(wire, "exemplars")
			}
			if ts.exemplars, err = appendDecoded(ts.exemplars, payload); err != nil {
				return arena, err
			}
		case 4: // histograms
			if wire != 2 {
				return arena, wrongWire(wire, "histograms")
			}
			if ts.histograms, err = appendDecoded(ts.histograms, payload); err != nil {
				return arena, err
			}
		}
		b = rest
	}
	return arena, nil
}

// appendLabelField adds a whole label field to ts.labels. A field right
// after the previous one in the body, the usual case, only extends it;
// otherwise the fields are gathered in arena, which is returned.
func (ts *rw1Series) appendLabelField(field, arena []byte, gathered *bool) []byte {
	switch {
	case len(ts.labels) == 0:
		ts.labels = field
	case !*gathered && adjacent(ts.labels, field):
		ts.labels = ts.labels[:len(ts.labels)+len(field)]
	default:
		if !*gathered {
			start := len(arena)
			arena = append(arena, ts.labels...)
			ts.labels, *gathered = arena[start:], true
		}
		start := len(arena) - len(ts.labels)
		arena = append(arena, field...)
		ts.labels = arena[start:]
	}
	return arena
}

// adjacent reports whether b starts where a ends in the same array.
func adjacent(a, b []byte) bool {
	return len(b) > 0 && cap(a) > len(a) && &a[:len(a)+1][len(a)] == &b[0]
}

// decodeV1Labels calls fn with the name and value of each label field in b,
// a run of label fields that unmarshalTimeSeries framed.
func decodeV1Labels(b []byte, fn func(name, value string)) error {
	for len(b) > 0 {
		_, _, payload, rest, err := nextField(b)
		if err != nil {
			return err
		}
		l, err := unmarshalLabel(payload)
		if err != nil {
			return err
		}
		fn(l.Name, l.Value)
		b = rest
	}
	return nil
}

// unmarshalLabel decodes a prometheus.Label whose strings point into b.
func unmarshalLabel(b []byte) (prompb.Label, error) {
	var l prompb.Label
	for len(b) > 0 {
		field, wire, payload, rest, err := nextField(b)
		if err != nil {
			return l, err
		}
		b = rest
		switch field {
		case 1:
			if wire != 2 {
				return l, wrongWire(wire, "name")
			}
			l.Name = bodyString(payload)
		case 2:
			if wire != 2 {
				return l, wrongWire(wire, "value")
			}
			l.Value = bodyString(payload)
		}
	}
	return l, nil
}

// unmarshalV2Metadata decodes an io.prometheus.write.v2.Metadata: three
// varints, which the generated decoder spent a tenth of a 2.0 series'
// decoding time on.
func unmarshalV2Metadata(m *writev2.Metadata, b []byte) error {
	for len(b) > 0 {
		if len(b) >= 2 && b[1] < 0x80 { // a one-byte varint, as Prometheus's usually are
			switch b[0] {
			case 1 << 3:
				m.Type, b = writev2.Metadata_MetricType(b[1]), b[2:]
				continue
			case 3 << 3:
				m.HelpRef, b = uint32(b[1]), b[2:]
				continue
			case 4 << 3:
				m.UnitRef, b = uint32(b[1]), b[2:]
				continue
			}
		}
		field, wire, payload, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		if field != 1 && field != 3 && field != 4 {
			continue
		}
		if wire != 0 {
			return wrongWire(wire, "metadata")
		}
		v := uvarint(payload)
		switch field {
		case 1:
			m.Type = writev2.Metadata_MetricType(v)
		case 3:
			m.HelpRef = uint32(v)
		case 4:
			m.UnitRef = uint32(v)
		}
	}
	return nil
}

// plainSample decodes the sample field at the start of b when it holds a
// value and a timestamp only, in field order, with a one-byte length: what
// Prometheus sends for every sample but a zero value or time. n is the
// length of the whole field.
func plainSample(b []byte) (v float64, t int64, n int, ok bool) {
	if len(b) < 13 || b[0] != 2<<3|2 || b[1] < 11 || b[1] >= 0x80 || int(b[1]) > len(b)-2 ||
		b[2] != 1<<3|1 || b[11] != 2<<3 {
		return 0, 0, 0, false
	}
	payload := b[2 : 2+int(b[1])]
	ut, m := binary.Uvarint(payload[10:])
	if m <= 0 || m != len(payload)-10 {
		return 0, 0, 0, false
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(payload[1:9])), int64(ut), 2 + len(payload), true
}

// unmarshalSample decodes a sample of either version: value (1), timestamp
// (2) and the 2.0 start_timestamp (3).
func unmarshalSample(b []byte) (v float64, t, start int64, err error) {
	for len(b) > 0 {
		field, wire, payload, rest, err := nextField(b)
		if err != nil {
			return 0, 0, 0, err
		}
		b = rest
		switch field {
		case 1:
			if wire != 1 {
				return 0, 0, 0, wrongWire(wire, "value")
			}
			v = math.Float64frombits(binary.LittleEndian.Uint64(payload))
		case 2:
			if wire != 0 {
				return 0, 0, 0, wrongWire(wire, "timestamp")
			}
			t = int64(uvarint(payload))
		case 3:
			if wire != 0 {
				return 0, 0, 0, wrongWire(wire, "start_timestamp")
			}
			start = int64(uvarint(payload))
		}
	}
	return v, t, start, nil
}

// v2Arena holds the label refs and the float samples of all series of a 2.0
// request, one series after the other, and each series slices its own out
// of it. Written one after the other, they stay in cache; into a slice per
// series, scattered over the heap, writing the refs alone was a tenth of
// BenchmarkPipeline's 2.0 time.
type v2Arena struct {
	refs    []uint32
	samples []writev2.Sample
}

// unmarshalV2Series decodes an io.prometheus.write.v2.TimeSeries into ts,
// with its refs and samples in a, raising *maxRef to its largest labels ref.
func unmarshalV2Series(ts *writev2.TimeSeries, b []byte, maxRef *uint32, a *v2Arena) error {
	r0, s0 := len(a.refs), len(a.samples)
	defer func() {
		// Capacity is cut so that nothing appended to a series can run
		// into the next one's.
		ts.LabelsRefs = a.refs[r0:len(a.refs):len(a.refs)]
		ts.Samples = a.samples[s0:len(a.samples):len(a.samples)]
	}()
	for len(b) > 0 {
		if v, t, n, ok := plainSample(b); ok {
			a.samples = append(a.samples, writev2.Sample{Value: v, Timestamp: t})
			b = b[n:]
			continue
		}
		field, payload, rest, ok := shortField(b)
		wire := uint64(2)
		var err error
		if !ok {
			if field, wire, payload, rest, err = nextField(b); err != nil {
				return err
			}
		}
		b = rest
		switch field {
		case 1: // labels_refs, packed or not
			if a.refs, err = appendRefs(a.refs, wire, payload, maxRef); err != nil {
				return err
			}
		case 2: // samples
			if wire != 2 {
				return wrongWire(wire, "samples")
			}
			v, t, start, err := unmarshalSample(payload)
			if err != nil {
				return err
			}
			a.samples = append(a.samples, writev2.Sample{Value: v, Timestamp: t, StartTimestamp: start})
		case 3: // histograms
			if wire != 2 {
				return wrongWire(wire, "histograms")
			}
			if ts.Histograms, err = appendDecoded(ts.Histograms, payload); err != nil {
				return err
			}
		case 4: // exemplars
			if wire != 2 {
				return wrongWire(wire, "exemplars")
			}
			if ts.Exemplars, err = appendDecoded(ts.Exemplars, payload); err != nil {
				return err
			}
		case 5: // metadata
			if wire != 2 {
				return wrongWire(wire, "metadata")
			}
			if err := unmarshalV2Metadata(&ts.Metadata, payload); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendRefs appends the uint32 refs of a repeated field, one varint or a
// packed run of them, raising *maxRef to the largest.
func appendRefs(refs []uint32, wire uint64, payload []byte, maxRef *uint32) ([]uint32, error) {
	switch wire {
	case 0:
		v := uvarint(payload)
		if v > math.MaxUint32 {
			return refs, fmt.Errorf("proto: labels_refs value %d overflows uint32", v)
		}
		*maxRef = max(*maxRef, uint32(v))
		return append(refs, uint32(v)), nil
	case 2:
		// A packed run holds at most one ref a byte, so the refs are
		// written into room made once, not appended one by one: this
		// loop runs for every label name and value of every series.
		m := *maxRef
		n := len(refs)
		refs = slices.Grow(refs, len(payload))[:n+len(payload)]
		out := refs[n:]
		j := 0
		for p := payload; len(p) > 0; j++ {
			r := uint32(p[0])
			switch {
			case r < 0x80: // one-byte varint
				p = p[1:]
			case len(p) > 1 && p[1] < 0x80: // two bytes
				r = r&0x7f | uint32(p[1])<<7
				p = p[2:]
			default:
				v, k := binary.Uvarint(p)
				if k <= 0 {
					return refs[:n+j], errBadProtobuf
				}
				if v > math.MaxUint32 {
					return refs[:n+j], fmt.Errorf("proto: labels_refs value %d overflows uint32", v)
				}
				r, p = uint32(v), p[k:]
			}
			m = max(m, r)
			out[j] = r
		}
		*maxRef = m
		return refs[:n+j], nil
	default:
		return refs, wrongWire(wire, "labels_refs")
	}
}
