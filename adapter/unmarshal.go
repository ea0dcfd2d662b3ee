package adapter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// The two functions below decode the top level of a write request by hand
// and leave each series to the generated decoder. The generated top-level
// decoder appends a zeroed TimeSeries per series, throwing away the label
// and sample slices a pooled request already has; reusing them saves 4-5
// allocations and ~1 KB per series of a typical 1.0 request (BenchmarkWrite).
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
	default:
		return 0, 0, nil, nil, fmt.Errorf("proto: unsupported wire type %d for field %d", wire, field)
	}
}

// unmarshalWriteRequest decodes a prometheus.WriteRequest into req, reusing
// req's slices. unknown reports fields WriteRequest does not define (a 2.0
// or read body sent to the 1.0 decoder has only those).
func unmarshalWriteRequest(req *prompb.WriteRequest, b []byte) (unknown bool, err error) {
	req.Timeseries, req.Metadata = req.Timeseries[:0], req.Metadata[:0]
	for len(b) > 0 {
		field, wire, payload, rest, err := nextField(b)
		if err != nil {
			return unknown, err
		}
		b = rest
		switch field {
		case 1: // timeseries
			if wire != 2 {
				return unknown, fmt.Errorf("proto: wrong wire type %d for field timeseries", wire)
			}
			req.Timeseries = growOne(req.Timeseries)
			ts := &req.Timeseries[len(req.Timeseries)-1]
			*ts = prompb.TimeSeries{Labels: ts.Labels[:0], Samples: ts.Samples[:0]}
			if err := ts.Unmarshal(payload); err != nil {
				return unknown, err
			}
		case 3: // metadata
			if wire != 2 {
				return unknown, fmt.Errorf("proto: wrong wire type %d for field metadata", wire)
			}
			req.Metadata = append(req.Metadata, prompb.MetricMetadata{})
			if err := req.Metadata[len(req.Metadata)-1].Unmarshal(payload); err != nil {
				return unknown, err
			}
		default:
			unknown = true
		}
	}
	return unknown, nil
}

// unmarshalV2Request decodes an io.prometheus.write.v2.Request into req,
// reusing req's slices; unknown as for unmarshalWriteRequest (fields 1-3 are
// reserved in 2.0 so that a 1.0 body shows up here).
func unmarshalV2Request(req *writev2.Request, b []byte) (unknown bool, err error) {
	req.Symbols, req.Timeseries = req.Symbols[:0], req.Timeseries[:0]
	for len(b) > 0 {
		field, wire, payload, rest, err := nextField(b)
		if err != nil {
			return unknown, err
		}
		b = rest
		switch field {
		case 4: // symbols
			if wire != 2 {
				return unknown, fmt.Errorf("proto: wrong wire type %d for field symbols", wire)
			}
			req.Symbols = append(req.Symbols, string(payload))
		case 5: // timeseries
			if wire != 2 {
				return unknown, fmt.Errorf("proto: wrong wire type %d for field timeseries", wire)
			}
			req.Timeseries = growOne(req.Timeseries)
			ts := &req.Timeseries[len(req.Timeseries)-1]
			// The generated decoder allocates labels_refs afresh anyway.
			*ts = writev2.TimeSeries{Samples: ts.Samples[:0]}
			if err := ts.Unmarshal(payload); err != nil {
				return unknown, err
			}
		default:
			unknown = true
		}
	}
	return unknown, nil
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
