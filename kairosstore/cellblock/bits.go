package cellblock

import (
	"encoding/binary"
	"errors"
)

// errShort is a bit stream that ends before its last field.
var errShort = errors.New("bit stream ends early")

// bitWriter appends bits most significant first.
type bitWriter struct {
	b    []byte
	free uint8 // unused low bits of the last byte
}

func (w *bitWriter) bit(v bool) {
	if w.free == 0 {
		w.b = append(w.b, 0)
		w.free = 8
	}
	w.free--
	if v {
		w.b[len(w.b)-1] |= 1 << w.free
	}
}

// bits writes the low n bits of v (n <= 64).
func (w *bitWriter) bits(v uint64, n uint8) {
	for n > 0 {
		if w.free == 0 {
			w.b = append(w.b, 0)
			w.free = 8
		}
		take := min(n, w.free)
		chunk := (v >> (n - take)) & (1<<take - 1)
		w.free -= take
		w.b[len(w.b)-1] |= byte(chunk << w.free)
		n -= take
	}
}

// bitReader reads what bitWriter wrote.
type bitReader struct {
	b   []byte
	pos uint64 // in bits
}

func (r *bitReader) bit() (bool, error) {
	i := r.pos >> 3
	if i >= uint64(len(r.b)) {
		return false, errShort
	}
	v := r.b[i]&(0x80>>(r.pos&7)) != 0
	r.pos++
	return v, nil
}

func (r *bitReader) bits(n uint8) (uint64, error) {
	if n == 0 {
		return 0, nil
	}
	if r.left() < uint64(n) {
		return 0, errShort
	}
	v := r.peek() >> (64 - n)
	r.pos += uint64(n)
	return v, nil
}

// left is the number of bits after pos.
func (r *bitReader) left() uint64 {
	if end := uint64(len(r.b)) * 8; r.pos < end {
		return end - r.pos
	}
	return 0
}

// peek is the 64 bits from pos, zeros past the stream's end: one load
// where 9 bytes are left (a ninth tops up an unaligned load), so that a
// field is decoded from one load wherever it lies. A rollup block holds a
// few cells, so most of its fields lie in its last 9 bytes.
func (r *bitReader) peek() uint64 {
	i, off := r.pos>>3, r.pos&7
	if i+9 <= uint64(len(r.b)) {
		return binary.BigEndian.Uint64(r.b[i:])<<off | uint64(r.b[i+8])>>(8-off)
	}
	var buf [9]byte
	if i < uint64(len(r.b)) {
		copy(buf[:], r.b[i:])
	}
	return binary.BigEndian.Uint64(buf[:])<<off | uint64(buf[8])>>(8-off)
}

// Signed deltas are written in one of four widths, the shortest that holds
// them, after a prefix naming it: '0' zero, '10' w1 bits, '110' w2 bits,
// '111' 64 bits. Columns and write times use this with widths that fit
// their usual deltas.
type widths struct{ w1, w2 uint8 }

var (
	columnWidths = widths{14, 32}
	timeWidths   = widths{8, 24}
)

func fits(v int64, n uint8) bool {
	lim := int64(1) << (n - 1)
	return v >= -lim && v < lim
}

func (w *bitWriter) delta(v int64, ws widths) {
	switch {
	case v == 0:
		w.bit(false)
	case fits(v, ws.w1):
		w.bits(0b10, 2)
		w.bits(uint64(v), ws.w1)
	case fits(v, ws.w2):
		w.bits(0b110, 3)
		w.bits(uint64(v), ws.w2)
	default:
		w.bits(0b111, 3)
		w.bits(uint64(v), 64)
	}
}

func (r *bitReader) delta(ws widths) (int64, error) {
	// The prefix and the value from one peek where they fit in it.
	left, w := r.left(), r.peek()
	if left == 0 {
		return 0, errShort
	}
	var pre, width uint8
	switch {
	case w>>63 == 0:
		r.pos++
		return 0, nil
	case w>>62 == 0b10:
		pre, width = 2, ws.w1
	case w>>61 == 0b110:
		pre, width = 3, ws.w2
	default:
		pre, width = 3, 64
	}
	if left < uint64(pre)+uint64(width) {
		return 0, errShort
	}
	var v uint64
	if pre+width <= 64 {
		v = w << pre >> (64 - width)
		r.pos += uint64(pre + width)
	} else {
		r.pos += uint64(pre)
		v, _ = r.bits(width) // left was checked
	}
	// Sign-extend.
	shift := 64 - width
	return int64(v<<shift) >> shift, nil
}
