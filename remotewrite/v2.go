package remotewrite

import (
	"fmt"
	"io"
	"math"
	"slices"

	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"google.golang.org/protobuf/encoding/protowire"
)

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

// unmarshalV2Metadata decodes an io.prometheus.write.v2.Metadata: three
// varints, on which the generated decoder spent a good part of a 2.0
// series' decoding time (BENCHMARKS.md, BenchmarkPipeline).
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

// v2Arena holds the label refs of all series of a 2.0 window, one series
// after the other, and each series slices its own out of it. Written one
// after the other, they stay in cache; into a slice per series, scattered
// over the heap, writing them was a good part of the 2.0 decoding time
// (BENCHMARKS.md, BenchmarkPipeline).
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
