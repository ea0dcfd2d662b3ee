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
	// With 8 bytes left, one load holds up to 56 bits after any offset;
	// with 9, a ninth byte tops it up to 64, which every block's first
	// cell reads (its write time and value) and a value whose XOR window
	// changes may: a rollup block holds a few cells, so these are most of
	// its bits.
	if i, off := r.pos>>3, r.pos&7; n <= 64 && i+9 <= uint64(len(r.b)) {
		v := binary.BigEndian.Uint64(r.b[i:])<<off | uint64(r.b[i+8])>>(8-off)
		r.pos += uint64(n)
		return v >> (64 - n), nil
	} else if n <= 56 && i+8 <= uint64(len(r.b)) {
		v := binary.BigEndian.Uint64(r.b[i:]) << off >> (64 - n)
		r.pos += uint64(n)
		return v, nil
	}
	if r.pos+uint64(n) > uint64(len(r.b))*8 {
		return 0, errShort
	}
	var v uint64
	for n > 0 {
		off := uint8(r.pos & 7)
		avail := 8 - off
		take := min(n, avail)
		cur := uint64(r.b[r.pos>>3]>>(avail-take)) & (1<<take - 1)
		v = v<<take | cur
		r.pos += uint64(take)
		n -= take
	}
	return v, nil
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
	n := uint8(0)
	for n < 3 {
		b, err := r.bit()
		if err != nil {
			return 0, err
		}
		if !b {
			break
		}
		n++
	}
	var width uint8
	switch n {
	case 0:
		return 0, nil
	case 1:
		width = ws.w1
	case 2:
		width = ws.w2
	default:
		width = 64
	}
	v, err := r.bits(width)
	if err != nil {
		return 0, err
	}
	// Sign-extend.
	shift := 64 - width
	return int64(v<<shift) >> shift, nil
}
