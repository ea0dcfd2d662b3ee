package remotewrite

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"unsafe"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"google.golang.org/protobuf/encoding/protowire"
)

// Write requests are decoded by hand, one window of series at a time
// (unmarshalV1Request, unmarshalV2Window; the caller picks the window size). The generated
// top-level decoder appends a zeroed TimeSeries per series, throwing away
// the slices a pooled request already has, and builds the whole request at
// once, however many tiny series it holds.
//
// Series are decoded by hand too (unmarshalTimeSeries, unmarshalV2Series):
// label names, values and symbols become strings that point into the
// decoded body instead of one allocation each. That is safe because nothing
// keeps them past the request: labels are copied into the ScratchBuilder's
// buffer, and the adapter's Appender contract says it copies what it keeps. The
// generated decoder cost 10 of the 11 allocations per sample of a typical
// 1.0 request (BenchmarkPipeline).
//
// Samples, histograms and exemplars are checked but stay encoded until
// they are appended (encodedFields), so that however many tiny ones a body
// holds, they cost no memory; histograms and exemplars are then decoded one
// at a time into an itemScratch.

// nextField splits the first field off a protobuf message: its number, wire
// type, payload (the bytes of a length-delimited field, the raw bytes
// otherwise) and the rest of the message. No remote protocol message has
// groups; one is skipped whole, as the generated decoders skip it.
func nextField(b []byte) (field, wire uint64, payload, rest []byte, err error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, nil, protoError(n)
	}
	b = b[n:]
	switch typ {
	case protowire.BytesType:
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return 0, 0, nil, nil, protoError(m)
		}
		return uint64(num), uint64(typ), v, b[m:], nil
	case protowire.StartGroupType:
		// Skipped to its end, iteratively, however deep.
		m, err := skipGroup(b)
		if err != nil {
			return 0, 0, nil, nil, err
		}
		return uint64(num), uint64(typ), b[:m], b[m:], nil
	}
	m := protowire.ConsumeFieldValue(num, typ, b)
	if m < 0 {
		return 0, 0, nil, nil, fmt.Errorf("field %d: %w", num, protoError(m))
	}
	return uint64(num), uint64(typ), b[:m], b[m:], nil
}

// protoError is the error of a protowire code: the generated decoders'
// "proto:" prefix on protowire's text, or io.ErrUnexpectedEOF itself.
func protoError(n int) error {
	err := protowire.ParseError(n)
	if err == io.ErrUnexpectedEOF {
		return err
	}
	return fmt.Errorf("proto: %w", err)
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
		// Like the generated decoders, and unlike protowire, this does
		// not match end groups to start groups by field number.
		tag, n := protowire.ConsumeVarint(b[off:])
		if n < 0 {
			return 0, protoError(n)
		}
		off += n
		var l uint64
		switch tag & 7 {
		case 0:
			if _, n = protowire.ConsumeVarint(b[off:]); n < 0 {
				return 0, protoError(n)
			}
			off += n
			continue
		case 1:
			l = 8
		case 2:
			var n int
			if l, n = protowire.ConsumeVarint(b[off:]); n < 0 {
				return 0, protoError(n)
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

// rw1Request is one window of a decoded prometheus.WriteRequest: at most
// a window's worth of series and metadata entries (Decoder.Next), whose
// series keep their labels encoded (Series).
type rw1Request struct {
	series   []Series
	metadata []prompb.MetricMetadata
	scratch  itemScratch
}

// unmarshalV1Request decodes the next window of a prometheus.WriteRequest
// into req, reusing req's slices: top-level fields of b until req holds max
// series and metadata entries. rest is what is left of b. unknown reports
// fields WriteRequest does not define (a 2.0 or read body sent to the 1.0
// decoder has only those). arena holds label fields that were not sent next
// to each other (the caller reuses it).
func unmarshalV1Request(req *rw1Request, b []byte, arena []byte, limit int) (rest []byte, unknown bool, _ []byte, err error) {
	req.series, req.metadata = req.series[:0], req.metadata[:0]
	arena = arena[:0]
	for len(b) > 0 && len(req.series)+len(req.metadata) < limit {
		field, wire, payload, rest, err := nextField(b)
		if err != nil {
			return b, unknown, arena, err
		}
		b = rest
		switch field {
		case 1: // timeseries
			if wire != 2 {
				return b, unknown, arena, wrongWire(wire, "timeseries")
			}
			req.series = growOne(req.series)
			ts := &req.series[len(req.series)-1]
			*ts = Series{}
			if arena, err = unmarshalTimeSeries(ts, payload, arena, &req.scratch); err != nil {
				return b, unknown, arena, err
			}
		case 3: // metadata
			if wire != 2 {
				return b, unknown, arena, wrongWire(wire, "metadata")
			}
			if req.metadata, err = appendDecoded(req.metadata, payload); err != nil {
				return b, unknown, arena, err
			}
		default:
			unknown = true
		}
	}
	return b, unknown, arena, nil
}

// rw2Request is an io.prometheus.write.v2.Request: all its symbols, and one
// window of its series (Decoder.Next).
type rw2Request struct {
	symbols []string
	nSeries int // in the whole request
	series  []Series
	scratch itemScratch
}

// v2Summary is what decoding a 2.0 window learns on the way, so that the
// handler does not walk the series again for it: each walk over a
// request's series costs cache misses, as 2,000 of them do not fit in L1.
type v2Summary struct {
	// received counts the samples, histograms and exemplars of all series.
	received [3]int
	// maxRef is the largest symbol ref of the window: of labels,
	// exemplar labels and metadata. When it is inside the table, so are
	// all of them.
	maxRef uint32
	// oddRefs is set when the labels_refs of a series or an exemplar have
	// an odd length.
	oddRefs bool
}

func (sum *v2Summary) add(ts *Series) {
	sum.received[0] += ts.samples.n
	sum.received[1] += ts.histograms.n
	sum.received[2] += ts.exemplars.n
}

// unmarshalV2Symbols decodes the symbols of an io.prometheus.write.v2.Request
// into req.symbols, sized once by a first walk over the top-level fields
// (which checks their framing), so that a table of tiny symbols is not
// grown, copy after copy. unknown is as for unmarshalV1Request: fields 1-3
// are reserved in 2.0 so that a 1.0 body shows up here.
func unmarshalV2Symbols(req *rw2Request, b []byte) (unknown bool, err error) {
	n, nSeries := 0, 0
	for p := b; len(p) > 0; {
		field, _, rest, ok := shortField(p)
		wire := uint64(2)
		if !ok {
			if field, wire, _, rest, err = nextField(p); err != nil {
				return unknown, err
			}
		}
		p = rest
		switch field {
		case 4, 5:
			if wire != 2 && field == 4 {
				return unknown, wrongWire(wire, "symbols")
			}
			if wire != 2 {
				return unknown, wrongWire(wire, "timeseries")
			}
			if field == 4 {
				n++
			} else {
				nSeries++
			}
		default:
			unknown = true
		}
	}
	req.symbols = slices.Grow(req.symbols[:0], n)
	req.nSeries = nSeries
	for p := b; len(p) > 0; {
		field, payload, rest, ok := shortField(p)
		if !ok {
			field, _, payload, rest, _ = nextField(p) // checked above
		}
		p = rest
		if field == 4 {
			req.symbols = append(req.symbols, bodyString(payload))
		}
	}
	return unknown, nil
}

// unmarshalV2Window decodes the next window of an io.prometheus.write.v2.Request
// body whose top level unmarshalV2Symbols checked: series (field 5) of b
// until req holds max of them; rest is what is left of b. The series' refs
// are slices of a, reused across windows and requests.
func unmarshalV2Window(req *rw2Request, b []byte, a *v2Arena, limit int) (rest []byte, sum v2Summary, err error) {
	req.series = req.series[:0]
	a.refs = a.refs[:0]
	for len(b) > 0 && len(req.series) < limit {
		field, payload, rest, ok := shortField(b)
		if !ok {
			field, _, payload, rest, _ = nextField(b) // checked by unmarshalV2Symbols
		}
		b = rest
		if field != 5 {
			continue
		}
		req.series = growOne(req.series)
		ts := &req.series[len(req.series)-1]
		*ts = Series{}
		if err := unmarshalV2Series(ts, payload, &sum.maxRef, a, &req.scratch); err != nil {
			return b, sum, err
		}
		sum.add(ts)
		sum.oddRefs = sum.oddRefs || len(ts.refs)%2 != 0 || ts.oddExemplarRefs
		sum.maxRef = max(sum.maxRef, ts.meta.HelpRef, ts.meta.UnitRef)
	}
	return b, sum, nil
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
func unmarshalTimeSeries(ts *Series, b []byte, arena []byte, sc *itemScratch) ([]byte, error) {
	var gathered bool // ts.labels lives in arena
	whole := b
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
		if _, _, n, ok := plainSample(b); ok {
			ts.samples.add(whole, len(whole)-len(b), n)
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
			if _, _, _, err := unmarshalSample(payload); err != nil {
				return arena, err
			}
			ts.samples.add(whole, len(whole)-len(b), len(b)-len(rest))
		case 3: // exemplars
			if wire != 2 {
				return arena, wrongWire(wire, "exemplars")
			}
			if err := sc.v1Exemplar(payload); err != nil {
				return arena, err
			}
			ts.exemplars.add(whole, len(whole)-len(b), len(b)-len(rest))
		case 4: // histograms
			if wire != 2 {
				return arena, wrongWire(wire, "histograms")
			}
			if err := sc.v1Histogram(payload); err != nil {
				return arena, err
			}
			ts.histograms.add(whole, len(whole)-len(b), len(b)-len(rest))
		}
		b = rest
	}
	return arena, nil
}

// appendLabelField adds a whole label field to ts.labels. A field right
// after the previous one in the body, the usual case, only extends it;
// otherwise the fields are gathered in arena, which is returned.
func (ts *Series) appendLabelField(field, arena []byte, gathered *bool) []byte {
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
func unmarshalV2Metadata(m *seriesMeta, b []byte) error {
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

// v2Arena holds the label refs of all series of a 2.0 window, one series
// after the other, and each series slices its own out of it. Written one
// after the other, they stay in cache; into a slice per series, scattered
// over the heap, writing them was a tenth of BenchmarkPipeline's 2.0 time.
type v2Arena struct {
	refs []uint32
}

// unmarshalV2Series decodes an io.prometheus.write.v2.TimeSeries into ts,
// with its refs and samples in a, raising *maxRef to its largest labels ref.
func unmarshalV2Series(ts *Series, b []byte, maxRef *uint32, a *v2Arena, sc *itemScratch) error {
	r0 := len(a.refs)
	defer func() {
		// Capacity is cut so that nothing appended to a series can run
		// into the next one's.
		ts.refs = a.refs[r0:len(a.refs):len(a.refs)]
	}()
	whole := b
	for len(b) > 0 {
		if _, _, n, ok := plainSample(b); ok {
			ts.samples.add(whole, len(whole)-len(b), n)
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
		switch field {
		case 1: // labels_refs, packed or not
			if a.refs, err = appendRefs(a.refs, wire, payload, maxRef); err != nil {
				return err
			}
		case 2: // samples
			if wire != 2 {
				return wrongWire(wire, "samples")
			}
			if _, _, _, err := unmarshalSample(payload); err != nil {
				return err
			}
			ts.samples.add(whole, len(whole)-len(b), len(b)-len(rest))
		case 3: // histograms
			if wire != 2 {
				return wrongWire(wire, "histograms")
			}
			if err := sc.v2Histogram(payload); err != nil {
				return err
			}
			ts.histograms.add(whole, len(whole)-len(b), len(b)-len(rest))
		case 4: // exemplars
			if wire != 2 {
				return wrongWire(wire, "exemplars")
			}
			if err := sc.v2Exemplar(payload); err != nil {
				return err
			}
			ts.exemplars.add(whole, len(whole)-len(b), len(b)-len(rest))
			refs := sc.ex2.LabelsRefs
			ts.oddExemplarRefs = ts.oddExemplarRefs || len(refs)%2 != 0
			for _, r := range refs {
				*maxRef = max(*maxRef, r)
			}
		case 5: // metadata
			if wire != 2 {
				return wrongWire(wire, "metadata")
			}
			if err := unmarshalV2Metadata(&ts.meta, payload); err != nil {
				return err
			}
		}
		b = rest
	}
	return nil
}

// encodedFields are the fields of one kind (samples, histograms or
// exemplars) of one series, left encoded: the bytes from its first such
// field to the end of its last, which decoding checked, and how many there
// are. Other fields in between are skipped by nextSample and nextPayload.
type encodedFields struct {
	b []byte
	n int
}

// add takes in the field series[off:off+n], series being the payload of
// the series.
func (s *encodedFields) add(series []byte, off, n int) {
	start := off
	if s.n > 0 {
		start = cap(series) - cap(s.b)
	}
	s.b = series[start : off+n]
	s.n++
}

// nextPayload returns the payload of the first field num of b, a part of
// encodedFields.b starting at a field, and the rest; ok is false when none
// is left.
func nextPayload(b []byte, num uint64) (payload, rest []byte, ok bool) {
	for len(b) > 0 {
		field, _, payload, rest, _ := nextField(b) // checked when decoded
		if field == num {
			return payload, rest, true
		}
		b = rest
	}
	return nil, nil, false
}

// nextSample decodes the first sample of b, a part of encodedFields.b
// starting at a field, and returns the rest; ok is false when none is left.
func nextSample(b []byte) (v float64, t int64, rest []byte, ok bool) {
	for len(b) > 0 {
		if v, t, n, ok := plainSample(b); ok {
			return v, t, b[n:], true
		}
		field, _, payload, rest, _ := nextField(b) // checked when decoded
		if field == 2 {
			v, t, _, _ := unmarshalSample(payload)
			return v, t, rest, true
		}
		b = rest
	}
	return 0, 0, nil, false
}

// errPackedOverrun is a packed labels_refs run whose last varint does not
// end within the field. The generated decoder reads such a varint on into
// the bytes after the field (it bounds it by the series, not the field), so
// it is one of the bodies only it accepts (FuzzUnmarshal).
var errPackedOverrun = fmt.Errorf("proto: a labels_refs varint runs past the end of its packed field: %w", io.ErrUnexpectedEOF)

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
				v, k := protowire.ConsumeVarint(p)
				if k == -1 { // protowire's code for truncated input
					return refs[:n+j], errPackedOverrun
				}
				if k < 0 {
					return refs[:n+j], protoError(k)
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

// wireMessage describes a protobuf message as far as Guess needs:
// the wire type of each field it defines and, for a field holding a message
// that is checked too, that message. It only checks: unlike the generated
// decoders it builds nothing, so guessing costs no memory however many
// (tiny) fields a body has.
type wireMessage map[uint64]wireKind

type wireKind struct {
	wire   uint64 // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
	packed bool   // a repeated scalar: also accepted length-delimited
	msg    wireMessage
}

var (
	wireLabel       = wireMessage{1: {wire: 2}, 2: {wire: 2}}
	wireV1Series    = wireMessage{1: {wire: 2, msg: wireLabel}, 2: {wire: 2, msg: wireMessage{1: {wire: 1}, 2: {wire: 0}}}, 3: {wire: 2, msg: wireMessage{1: {wire: 2, msg: wireLabel}, 2: {wire: 1}, 3: {wire: 0}}}, 4: {wire: 2}}
	wireV1Request   = wireMessage{1: {wire: 2, msg: wireV1Series}, 3: {wire: 2, msg: wireMessage{1: {wire: 0}, 2: {wire: 2}, 4: {wire: 2}, 5: {wire: 2}}}}
	wireV2Series    = wireMessage{1: {wire: 0, packed: true}, 2: {wire: 2, msg: wireMessage{1: {wire: 1}, 2: {wire: 0}, 3: {wire: 0}}}, 3: {wire: 2}, 4: {wire: 2, msg: wireMessage{1: {wire: 0, packed: true}, 2: {wire: 1}, 3: {wire: 0}}}, 5: {wire: 2, msg: wireMessage{1: {wire: 0}, 3: {wire: 0}, 4: {wire: 0}}}}
	wireV2Request   = wireMessage{4: {wire: 2}, 5: {wire: 2, msg: wireV2Series}}
	wireQuery       = wireMessage{1: {wire: 0}, 2: {wire: 0}, 3: {wire: 2, msg: wireMessage{1: {wire: 0}, 2: {wire: 2}, 3: {wire: 2}}}, 4: {wire: 2}}
	wireReadRequest = wireMessage{1: {wire: 2, msg: wireQuery}, 2: {wire: 0, packed: true}}
)

// walk checks that b is a valid m, and calls top (when not nil) with each
// top-level field, known or not; it stops and returns false when top does.
func (m wireMessage) walk(b []byte, top func(field uint64, known bool, payload []byte) bool) bool {
	for len(b) > 0 {
		field, wire, payload, rest, err := nextField(b)
		if err != nil {
			return false
		}
		b = rest
		k, known := m[field]
		if known {
			switch {
			case wire == k.wire:
			case wire == 2 && k.packed:
				if !packedOK(k.wire, payload) {
					return false
				}
			default:
				return false
			}
			if k.msg != nil && !k.msg.walk(payload, nil) {
				return false
			}
		}
		if top != nil && !top(field, known, payload) {
			return false
		}
	}
	return true
}

// packedOK checks a packed run of scalars of the given wire type.
func packedOK(wire uint64, b []byte) bool {
	for len(b) > 0 {
		if wire != 0 {
			return false
		}
		_, n := binary.Uvarint(b)
		if n <= 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// itemScratch is where the histograms and exemplars of a request are
// decoded, one at a time: when decoding a window, to check them, and when
// appending, to convert them. Its slices are reused, so that neither costs
// an allocation per item; what it converts is valid until the next one (the
// Appender contract).
type itemScratch struct {
	h1  prompb.Histogram
	h2  writev2.Histogram
	ex1 prompb.Exemplar
	ex2 writev2.Exemplar
	h   histogram.Histogram
	fh  histogram.FloatHistogram
	// The labels of the exemplar being appended, built in place with a
	// builder of their own: the series' labels live in the other one's
	// buffer (ScratchBuilder.Overwrite).
	exB      labels.ScratchBuilder
	exLabels labels.Labels
}

// exemplar converts the exemplar last decoded (ex1 when v1, else ex2,
// whose refs CheckSymbols checked) into an exemplar whose labels are
// sc.exLabels.
func (sc *itemScratch) exemplar(v1 bool, symbols []string) exemplar.Exemplar {
	sc.exB.Reset()
	var v float64
	var t int64
	if v1 {
		for _, l := range sc.ex1.Labels {
			sc.exB.Add(l.Name, l.Value)
		}
		v, t = sc.ex1.Value, sc.ex1.Timestamp
	} else {
		refs := sc.ex2.LabelsRefs
		for i := 0; i+1 < len(refs); i += 2 {
			sc.exB.Add(symbols[refs[i]], symbols[refs[i+1]])
		}
		v, t = sc.ex2.Value, sc.ex2.Timestamp
	}
	sc.exB.Sort()
	sc.exB.Overwrite(&sc.exLabels)
	return exemplar.Exemplar{Labels: sc.exLabels, Value: v, Ts: t, HasTs: t != 0}
}

func (sc *itemScratch) v1Histogram(payload []byte) error {
	h := &sc.h1
	*h = prompb.Histogram{
		NegativeSpans: h.NegativeSpans[:0], PositiveSpans: h.PositiveSpans[:0],
		NegativeDeltas: h.NegativeDeltas[:0], PositiveDeltas: h.PositiveDeltas[:0],
		NegativeCounts: h.NegativeCounts[:0], PositiveCounts: h.PositiveCounts[:0],
		CustomValues: h.CustomValues[:0],
	}
	return h.Unmarshal(payload)
}

func (sc *itemScratch) v2Histogram(payload []byte) error {
	h := &sc.h2
	*h = writev2.Histogram{
		NegativeSpans: h.NegativeSpans[:0], PositiveSpans: h.PositiveSpans[:0],
		NegativeDeltas: h.NegativeDeltas[:0], PositiveDeltas: h.PositiveDeltas[:0],
		NegativeCounts: h.NegativeCounts[:0], PositiveCounts: h.PositiveCounts[:0],
		CustomValues: h.CustomValues[:0],
	}
	return h.Unmarshal(payload)
}

func (sc *itemScratch) v1Exemplar(payload []byte) error {
	sc.ex1 = prompb.Exemplar{Labels: sc.ex1.Labels[:0]}
	return sc.ex1.Unmarshal(payload)
}

func (sc *itemScratch) v2Exemplar(payload []byte) error {
	sc.ex2 = writev2.Exemplar{LabelsRefs: sc.ex2.LabelsRefs[:0]}
	return sc.ex2.Unmarshal(payload)
}

// histogram converts the histogram last decoded (h1 when v1, else h2) as
// prompb's and writev2's ToIntHistogram and ToFloatHistogram do, into
// sc.h or sc.fh; exactly one of the two results is non-nil.
func (sc *itemScratch) histogram(v1 bool) (*histogram.Histogram, *histogram.FloatHistogram) {
	type wire struct {
		float                              bool
		resetHint                          histogram.CounterResetHint
		schema                             int32
		zeroThreshold, sum                 float64
		zeroCountInt, countInt             uint64
		zeroCountFloat, countFloat         float64
		posDeltas, negDeltas               []int64
		posCounts, negCounts, customValues []float64
	}
	var w wire
	pos, neg := sc.h.PositiveSpans[:0], sc.h.NegativeSpans[:0]
	if v1 {
		h := &sc.h1
		w = wire{h.IsFloatHistogram(), histogram.CounterResetHint(h.ResetHint), h.Schema, h.ZeroThreshold, h.Sum,
			h.GetZeroCountInt(), h.GetCountInt(), h.GetZeroCountFloat(), h.GetCountFloat(),
			h.PositiveDeltas, h.NegativeDeltas, h.PositiveCounts, h.NegativeCounts, h.CustomValues}
		for _, s := range h.PositiveSpans {
			pos = append(pos, histogram.Span{Offset: s.Offset, Length: s.Length})
		}
		for _, s := range h.NegativeSpans {
			neg = append(neg, histogram.Span{Offset: s.Offset, Length: s.Length})
		}
	} else {
		h := &sc.h2
		w = wire{h.IsFloatHistogram(), histogram.CounterResetHint(h.ResetHint), h.Schema, h.ZeroThreshold, h.Sum,
			h.GetZeroCountInt(), h.GetCountInt(), h.GetZeroCountFloat(), h.GetCountFloat(),
			h.PositiveDeltas, h.NegativeDeltas, h.PositiveCounts, h.NegativeCounts, h.CustomValues}
		for _, s := range h.PositiveSpans {
			pos = append(pos, histogram.Span{Offset: s.Offset, Length: s.Length})
		}
		for _, s := range h.NegativeSpans {
			neg = append(neg, histogram.Span{Offset: s.Offset, Length: s.Length})
		}
	}
	// Both keep the spans' arrays for the next histogram.
	sc.h.PositiveSpans, sc.h.NegativeSpans = pos, neg
	// Absent fields are nil, as the generated decoder leaves them: the
	// scratch's are empty but not nil once a histogram had them, and
	// Validate takes non-nil custom bounds for custom buckets.
	w.posDeltas, w.negDeltas = nilIfEmpty(w.posDeltas), nilIfEmpty(w.negDeltas)
	w.posCounts, w.negCounts = nilIfEmpty(w.posCounts), nilIfEmpty(w.negCounts)
	w.customValues = nilIfEmpty(w.customValues)
	if w.float {
		sc.fh = histogram.FloatHistogram{
			CounterResetHint: w.resetHint, Schema: w.schema, ZeroThreshold: w.zeroThreshold,
			ZeroCount: w.zeroCountFloat, Count: w.countFloat, Sum: w.sum,
			PositiveSpans: pos, PositiveBuckets: w.posCounts,
			NegativeSpans: neg, NegativeBuckets: w.negCounts,
			CustomValues: w.customValues,
		}
		return nil, &sc.fh
	}
	sc.h = histogram.Histogram{
		CounterResetHint: w.resetHint, Schema: w.schema, ZeroThreshold: w.zeroThreshold,
		ZeroCount: w.zeroCountInt, Count: w.countInt, Sum: w.sum,
		PositiveSpans: pos, PositiveBuckets: w.posDeltas,
		NegativeSpans: neg, NegativeBuckets: w.negDeltas,
		CustomValues: w.customValues,
	}
	return &sc.h, nil
}

func nilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}
