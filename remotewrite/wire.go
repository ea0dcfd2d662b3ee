package remotewrite

import (
	"encoding/binary"
	"fmt"
	"io"
	"unsafe"

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
// generated decoder cost most of the allocations per sample of a typical 1.0
// request (BENCHMARKS.md, BenchmarkPipeline).
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
