// Package cellblock encodes a run of data_points cells of one row (column,
// write time, expiry, value bytes) as one compact, checksummed block: the
// value the embedded engine keeps under one Pebble key for a window of a
// row, instead of a key per cell.
//
// Layout of a block:
//
//	byte     format (1)
//	uvarint  number of cells n >= 1
//	byte     flags: 1 every value is 8 bytes; 2 some cell has an expiry
//	uvarint  length of the bit stream, then the bit stream, cell by cell:
//	  column    the first 32 bits, the second its delta, then deltas of deltas
//	  write     the first 64 bits, then '0' same as the previous, or '1' and
//	  time      the change less the column's change (a scrape's write time
//	            follows its sample time, so this is usually small)
//	  expiry    (flag 2 only) the first 64 bits, then '0' same, or '1' and the
//	            change
//	  value     (flag 1 only) XOR of the value's bits with the previous one,
//	            leading and trailing zero bits elided (Gorilla), which is exact
//	            for any 8 bytes and small for doubles that change little
//	bytes    (flag 1 off) each value as uvarint length and bytes
//	4 bytes  CRC-32C of everything before, big-endian
//
// Values are kept byte for byte whatever they hold.
package cellblock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
)

// Cell is one cell of a block.
type Cell struct {
	Column    uint32
	WriteTime int64 // ms
	Expiry    int64 // unix seconds; 0 never
	Value     []byte
}

const (
	format      = 1
	flagFixed8  = 1
	flagExpiry  = 2
	checksumLen = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt reports a block this package cannot have written, a failed
// checksum included.
var ErrCorrupt = errors.New("corrupt cell block")

// Append appends the block of cells to dst. cells must be non-empty and
// sorted by strictly ascending column.
func Append(dst []byte, cells []Cell) []byte {
	if len(cells) == 0 {
		panic("cellblock: empty block")
	}
	start := len(dst)
	var flags byte = flagFixed8
	for i := range cells {
		if len(cells[i].Value) != 8 {
			flags &^= flagFixed8
		}
		if cells[i].Expiry != 0 {
			flags |= flagExpiry
		}
	}
	dst = append(dst, format)
	dst = binary.AppendUvarint(dst, uint64(len(cells)))
	dst = append(dst, flags)

	// The bit stream is written in place after the header, then moved up
	// by the length of its length: no buffer of its own per block, which
	// cost an allocation per sample when every block is one cell.
	bitStart := len(dst)
	w := bitWriter{b: dst}
	var x xorState
	for i := range cells {
		c := &cells[i]
		if i == 0 {
			w.bits(uint64(c.Column), 32)
			w.bits(uint64(c.WriteTime), 64)
			if flags&flagExpiry != 0 {
				w.bits(uint64(c.Expiry), 64)
			}
		} else {
			p := &cells[i-1]
			d := int64(c.Column) - int64(p.Column)
			if i == 1 {
				w.delta(d, columnWidths)
			} else {
				w.delta(d-(int64(p.Column)-int64(cells[i-2].Column)), columnWidths)
			}
			if c.WriteTime == p.WriteTime {
				w.bit(false)
			} else {
				w.bit(true)
				w.delta(c.WriteTime-p.WriteTime-d, timeWidths)
			}
			if flags&flagExpiry != 0 {
				if c.Expiry == p.Expiry {
					w.bit(false)
				} else {
					w.bit(true)
					w.delta(c.Expiry-p.Expiry, timeWidths)
				}
			}
		}
		if flags&flagFixed8 != 0 {
			x.write(&w, binary.BigEndian.Uint64(c.Value))
		}
	}
	dst = w.b
	var lb [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(lb[:], uint64(len(dst)-bitStart))
	dst = append(dst, lb[:k]...)
	copy(dst[bitStart+k:], dst[bitStart:len(dst)-k])
	copy(dst[bitStart:], lb[:k])
	if flags&flagFixed8 == 0 {
		for i := range cells {
			dst = binary.AppendUvarint(dst, uint64(len(cells[i].Value)))
			dst = append(dst, cells[i].Value...)
		}
	}
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// xorState is the Gorilla value coder's state.
type xorState struct {
	prev              uint64
	leading, trailing uint8
	started, window   bool
}

func (x *xorState) write(w *bitWriter, v uint64) {
	if !x.started {
		x.started = true
		x.prev = v
		w.bits(v, 64)
		return
	}
	xor := v ^ x.prev
	x.prev = v
	if xor == 0 {
		w.bit(false)
		return
	}
	w.bit(true)
	lead, trail := uint8(min(bits.LeadingZeros64(xor), 31)), uint8(bits.TrailingZeros64(xor))
	if x.window && lead >= x.leading && trail >= x.trailing {
		w.bit(false)
		w.bits(xor>>x.trailing, 64-x.leading-x.trailing)
		return
	}
	x.window, x.leading, x.trailing = true, lead, trail
	w.bit(true)
	w.bits(uint64(lead), 5)
	sig := 64 - lead - trail
	w.bits(uint64(sig&63), 6) // 64 significant bits are written as 0
	w.bits(xor>>trail, sig)
}

func (x *xorState) read(r *bitReader) (uint64, error) {
	// A value that changes (every rollup bucket's does) is decoded from
	// one load of the stream where its control bits and significant bits
	// fit in it; anything else takes the field-by-field path below, which
	// also names what is corrupt.
	if left := r.left(); x.started && left > 0 {
		w := r.peek()
		switch w >> 62 {
		case 0b00, 0b01:
			r.pos++
			return x.prev, nil
		case 0b10:
			if sig := 64 - x.leading - x.trailing; x.window && sig <= 62 && uint64(2+sig) <= left {
				x.prev ^= w << 2 >> (64 - sig) << x.trailing
				r.pos += 2 + uint64(sig)
				return x.prev, nil
			}
		case 0b11:
			lead, sig := w<<2>>59, w<<7>>58
			if sig == 0 {
				sig = 64
			}
			if lead+sig <= 64 && sig <= 51 && 13+sig <= left {
				x.window, x.leading, x.trailing = true, uint8(lead), uint8(64-lead-sig)
				x.prev ^= w << 13 >> (64 - sig) << x.trailing
				r.pos += 13 + sig
				return x.prev, nil
			}
		}
	}
	if !x.started {
		v, err := r.bits(64)
		x.started, x.prev = true, v
		return v, err
	}
	b, err := r.bit()
	if err != nil || !b {
		return x.prev, err
	}
	if b, err = r.bit(); err != nil {
		return 0, err
	}
	if b {
		lead, err := r.bits(5)
		if err != nil {
			return 0, err
		}
		sig, err := r.bits(6)
		if err != nil {
			return 0, err
		}
		if sig == 0 {
			sig = 64
		}
		if lead+sig > 64 {
			return 0, fmt.Errorf("%w: %d leading and %d significant bits", ErrCorrupt, lead, sig)
		}
		x.window, x.leading, x.trailing = true, uint8(lead), uint8(64-lead-sig)
	} else if !x.window {
		return 0, fmt.Errorf("%w: value reuses a window before any", ErrCorrupt)
	}
	sig := 64 - x.leading - x.trailing
	v, err := r.bits(sig)
	if err != nil {
		return 0, err
	}
	x.prev ^= v << x.trailing
	return x.prev, nil
}

// Reader decodes a block cell by cell, allocating nothing.
type Reader struct {
	n, i  int
	flags byte
	bits  bitReader
	bytes []byte // the value section (flag 1 off)
	// The cell is kept without its value, which is bytes[vlo:vhi] or
	// xor.prev (put in fixed8 when asked for): a slice stored per cell
	// would cost a write barrier each.
	cell     Cell
	vlo, vhi int
	delta    int64
	xor      xorState
	fixed8   [8]byte
	err      error
}

// NewReader checks the block's checksum and header. The reader aliases
// block.
func NewReader(block []byte) (Reader, error) {
	var r Reader
	err := r.Reset(block)
	return r, err
}

// Reset makes r a reader of block as NewReader does, in place: a read of
// many blocks through one reader then neither copies a Reader per block
// nor clears what the new block sets anyway. After an error r reads no
// cell.
func (r *Reader) Reset(block []byte) error {
	r.n, r.i, r.vlo, r.vhi, r.delta, r.err = 0, 0, 0, 0, 0, nil
	r.cell.Column, r.cell.WriteTime, r.cell.Expiry = 0, 0, 0
	r.xor = xorState{}
	r.bits.pos = 0
	if len(block) < 1+checksumLen {
		return r.fail(fmt.Errorf("%w: %d bytes", ErrCorrupt, len(block)))
	}
	body := block[:len(block)-checksumLen]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(block[len(body):]) {
		return r.fail(fmt.Errorf("%w: checksum mismatch", ErrCorrupt))
	}
	if body[0] != format {
		return r.fail(fmt.Errorf("%w: format %d", ErrCorrupt, body[0]))
	}
	body = body[1:]
	n, k := binary.Uvarint(body)
	// Every cell takes at least two bits (column and write time), which
	// bounds n before anything trusts it.
	if k <= 0 || n == 0 || n > uint64(len(body))*4 {
		return r.fail(fmt.Errorf("%w: bad cell count", ErrCorrupt))
	}
	body = body[k:]
	if len(body) < 1 || body[0]&^(flagFixed8|flagExpiry) != 0 {
		return r.fail(fmt.Errorf("%w: bad flags", ErrCorrupt))
	}
	flags := body[0]
	body = body[1:]
	blen, k := binary.Uvarint(body)
	if k <= 0 || blen > uint64(len(body)-k) {
		return r.fail(fmt.Errorf("%w: bad bit stream length", ErrCorrupt))
	}
	bytes := body[k+int(blen):]
	if flags&flagFixed8 != 0 && len(bytes) != 0 {
		return r.fail(fmt.Errorf("%w: trailing bytes", ErrCorrupt))
	}
	r.n, r.flags = int(n), flags
	r.bits.b, r.bytes = body[k:k+int(blen)], bytes
	return nil
}

// fail leaves r reading nothing, its slices those of no block, and
// returns err.
func (r *Reader) fail(err error) error {
	r.flags, r.bits.b, r.bytes = 0, nil, nil
	return err
}

// Column, Expiry and Value are the fields of the cell Next decoded, for a
// loop that needs only some of them (Cell copies them all).
func (r *Reader) Column() uint32 { return r.cell.Column }

func (r *Reader) Expiry() int64 { return r.cell.Expiry }

func (r *Reader) Value() []byte {
	if r.flags&flagFixed8 != 0 {
		binary.BigEndian.PutUint64(r.fixed8[:], r.xor.prev)
		return r.fixed8[:]
	}
	return r.bytes[r.vlo:r.vhi:r.vhi]
}

// Fixed8 reports whether every value of the block is 8 bytes, which Bits
// then returns without a slice.
func (r *Reader) Fixed8() bool { return r.flags&flagFixed8 != 0 }

// Bits is the value of the cell Next decoded, as a big-endian uint64, in a
// Fixed8 block.
func (r *Reader) Bits() uint64 { return r.xor.prev }

// AppendFloats decodes the cells after the current one of a Fixed8 block
// without expiries, as Next does, and appends the column and the value (as
// a float64) of each with lo <= column < hi to cols and vals, until a
// column at or past hi, the block's end, an error (see Err), or max cells
// appended, which alone returns full: cells may be left to append. Most
// cells of a regular series take a few bits each, read here from one load
// of the stream without a call per field (BENCHMARKS.md, "The raw read
// path, in bulk"). Any other block, or max < 1, appends nothing.
func (r *Reader) AppendFloats(cols []int64, vals []float64, lo, hi uint32, max int) (_ []int64, _ []float64, full bool) {
	if r.flags != flagFixed8 || max < 1 {
		return cols, vals, false
	}
	for end := len(cols) + max; len(cols) < end; {
		if !r.nextRegular() && !r.Next() {
			return cols, vals, false
		}
		col := r.cell.Column
		if col < lo {
			continue
		}
		if col >= hi {
			return cols, vals, false
		}
		cols = append(cols, int64(col))
		vals = append(vals, math.Float64frombits(r.xor.prev))
	}
	return cols, vals, r.i < r.n && r.err == nil
}

// nextRegular decodes the next cell of a Fixed8 block without expiries if
// it is a regular one, whose bits all lie in one 8-byte load: the column
// delta and write time repeat, and the value repeats or reuses the XOR
// window. It reports whether it did; if not, nothing moved.
func (r *Reader) nextRegular() bool {
	br := &r.bits
	i := br.pos >> 3
	if r.i < 2 || r.i >= r.n || r.err != nil || i+8 > uint64(len(br.b)) {
		return false
	}
	// At least 57 bits of the stream are valid in w.
	w := binary.BigEndian.Uint64(br.b[i:]) << (br.pos & 7)
	if w>>62 != 0 {
		return false
	}
	col := int64(r.cell.Column) + r.delta
	if col > 1<<32-1 {
		return false
	}
	switch {
	case w<<2>>63 == 0: // the value repeats
		br.pos += 3
	case w<<3>>63 == 0 && r.xor.window:
		sig := 64 - r.xor.leading - r.xor.trailing
		if sig > 53 {
			return false
		}
		r.xor.prev ^= w << 4 >> (64 - sig) << r.xor.trailing
		br.pos += 4 + uint64(sig)
	default:
		return false
	}
	r.cell.Column = uint32(col)
	r.i++
	return true
}

// HasExpiry reports whether some cell of the block has an expiry.
func (r *Reader) HasExpiry() bool { return r.flags&flagExpiry != 0 }

// Len is the number of cells of the block.
func (r *Reader) Len() int { return r.n }

// Next decodes the next cell; it returns false at the end or on an error
// (see Err).
func (r *Reader) Next() bool {
	if r.err != nil || r.i >= r.n {
		return false
	}
	// Fast path of a regular series: the column delta and the write time
	// repeat (two zero bits) and no cell expires.
	if br := &r.bits; r.i > 1 && r.flags&flagExpiry == 0 {
		if i := br.pos >> 3; i+1 < uint64(len(br.b)) {
			w := uint16(br.b[i])<<8 | uint16(br.b[i+1])
			if (w<<(br.pos&7))&0xc000 == 0 {
				col := int64(r.cell.Column) + r.delta
				if col <= 1<<32-1 {
					br.pos += 2
					r.cell.Column = uint32(col)
					if err := r.value(); err != nil {
						r.err = fmt.Errorf("%w: cell %d: %w", ErrCorrupt, r.i, err)
						return false
					}
					r.i++
					return true
				}
			}
		}
	}
	if err := r.next(); err != nil {
		r.err = fmt.Errorf("%w: cell %d: %w", ErrCorrupt, r.i, err)
		return false
	}
	r.i++
	return true
}

// Cell is the cell Next decoded. Its value is valid until the next call of
// Next.
func (r *Reader) Cell() Cell {
	c := r.cell
	if r.flags&flagFixed8 != 0 {
		binary.BigEndian.PutUint64(r.fixed8[:], r.xor.prev)
		c.Value = r.fixed8[:]
	} else {
		c.Value = r.bytes[r.vlo:r.vhi:r.vhi]
	}
	return c
}

// Err is the error that stopped Next, nil at the end of a sound block.
func (r *Reader) Err() error {
	if r.err == nil && r.i == r.n && r.vhi != len(r.bytes) {
		return fmt.Errorf("%w: trailing bytes", ErrCorrupt)
	}
	return r.err
}

func (r *Reader) next() error {
	c := &r.cell
	br := &r.bits
	if r.i == 0 {
		col, err := br.bits(32)
		if err != nil {
			return err
		}
		wt, err := br.bits(64)
		if err != nil {
			return err
		}
		c.Column, c.WriteTime = uint32(col), int64(wt)
		if r.flags&flagExpiry != 0 {
			exp, err := br.bits(64)
			if err != nil {
				return err
			}
			c.Expiry = int64(exp)
		}
		return r.value()
	}
	// Regular samples repeat the column delta and write time: two zero
	// bits, read here without a call each.
	var d int64
	if i := br.pos >> 3; i < uint64(len(br.b)) && br.b[i]&(0x80>>(br.pos&7)) == 0 {
		br.pos++
	} else {
		var err error
		if d, err = br.delta(columnWidths); err != nil {
			return err
		}
	}
	if r.i > 1 {
		d += r.delta
	}
	col := int64(c.Column) + d
	if d <= 0 || col > 1<<32-1 {
		return errors.New("columns not ascending")
	}
	r.delta = d
	c.Column = uint32(col)
	changed, err := br.bit()
	if err != nil {
		return err
	}
	if changed {
		dw, err := br.delta(timeWidths)
		if err != nil {
			return err
		}
		c.WriteTime += dw + d
	}
	if r.flags&flagExpiry != 0 {
		if changed, err = br.bit(); err != nil {
			return err
		}
		if changed {
			de, err := br.delta(timeWidths)
			if err != nil {
				return err
			}
			c.Expiry += de
		}
	}
	return r.value()
}

func (r *Reader) value() error {
	if r.flags&flagFixed8 != 0 {
		// An unchanged value is one zero bit.
		if br := &r.bits; r.xor.started {
			if i := br.pos >> 3; i < uint64(len(br.b)) && br.b[i]&(0x80>>(br.pos&7)) == 0 {
				br.pos++
				return nil
			}
		}
		_, err := r.xor.read(&r.bits)
		return err
	}
	rest := r.bytes[r.vhi:]
	if len(rest) > 0 && rest[0] < 0x80 && int(rest[0]) < len(rest) { // a short value
		r.vlo = r.vhi + 1
		r.vhi = r.vlo + int(rest[0])
		return nil
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return errors.New("bad value length")
	}
	r.vlo = r.vhi + k
	r.vhi = r.vlo + int(n)
	return nil
}
