package remotewrite

import (
	"github.com/prometheus/prometheus/prompb"
)

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
