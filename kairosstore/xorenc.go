package kairosstore

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// xorEncoder writes a Prometheus XOR chunk (tsdb/chunkenc's format, the
// same bytes as its appender) a 64-bit word of bits at a time, where
// chunkenc's appender writes a bit at a time through an interface call
// per sample: that was most of the chunked read's CPU once the cells came
// in bulk (BENCHMARKS.md, "Remote read in bulk"). Every chunk it writes
// is held to chunkenc's bytes by TestXOREncoderMatchesChunkenc.
type xorEncoder struct {
	b        []byte // the chunk: a 2-byte sample count, then the bit stream
	acc      uint64 // the last n bits written, not yet in b
	n        uint
	num      int
	t        int64
	tDelta   uint64
	v        uint64 // the last value's bits
	leading  uint8  // 0xff: none yet
	trailing uint8
}

// reset starts a chunk in buf (emptied).
func (e *xorEncoder) reset(buf []byte) {
	*e = xorEncoder{b: append(buf[:0], 0, 0), leading: 0xff}
}

// writeBits appends the low nbits of u (nbits <= 64).
func (e *xorEncoder) writeBits(u uint64, nbits uint) {
	if nbits > 32 {
		e.writeBits(u>>32, nbits-32)
		nbits = 32
	}
	e.acc = e.acc<<nbits | u&(1<<nbits-1)
	e.n += nbits
	for e.n >= 8 {
		e.n -= 8
		e.b = append(e.b, byte(e.acc>>e.n))
	}
}

// append adds a sample, as chunkenc's xorAppender.Append does.
func (e *xorEncoder) append(t int64, v float64) {
	vb := math.Float64bits(v)
	var tDelta uint64
	switch e.num {
	case 0:
		e.b = binary.AppendVarint(e.b, t) // byte-aligned: after the count
		e.writeBits(vb, 64)
	case 1:
		tDelta = uint64(t - e.t)
		e.b = binary.AppendUvarint(e.b, tDelta) // byte-aligned: after whole bytes
		e.writeValue(vb)
	default:
		tDelta = uint64(t - e.t)
		dod := int64(tDelta - e.tDelta)
		switch {
		case dod == 0:
			e.writeBits(0, 1)
		case inBitRange(dod, 14):
			e.writeBits(0b10<<14|uint64(dod)&(1<<14-1), 16)
		case inBitRange(dod, 17):
			e.writeBits(0b110<<17|uint64(dod)&(1<<17-1), 20)
		case inBitRange(dod, 20):
			e.writeBits(0b1110<<20|uint64(dod)&(1<<20-1), 24)
		default:
			e.writeBits(0b1111, 4)
			e.writeBits(uint64(dod), 64)
		}
		e.writeValue(vb)
	}
	e.t, e.v, e.tDelta = t, vb, tDelta
	e.num++
}

// inBitRange is chunkenc's bitRange.
func inBitRange(x int64, nbits uint8) bool {
	return -((1<<(nbits-1))-1) <= x && x <= 1<<(nbits-1)
}

// writeValue is chunkenc's xorWrite of the value with bits vb.
func (e *xorEncoder) writeValue(vb uint64) {
	delta := vb ^ e.v
	if delta == 0 {
		e.writeBits(0, 1)
		return
	}
	leading := uint8(min(bits.LeadingZeros64(delta), 31))
	trailing := uint8(bits.TrailingZeros64(delta))
	if e.leading != 0xff && leading >= e.leading && trailing >= e.trailing {
		sig := 64 - uint(e.leading) - uint(e.trailing)
		e.writeBits(0b10, 2)
		e.writeBits(delta>>e.trailing, sig)
		return
	}
	e.leading, e.trailing = leading, trailing
	sig := 64 - uint(leading) - uint(trailing)
	// '11', 5 bits of leading zeros, 6 of significant bits (64 as 0).
	e.writeBits(0b11<<11|uint64(leading)<<6|uint64(sig)&63, 13)
	e.writeBits(delta>>trailing, sig)
}

// chunk ends the chunk: its last bits padded with zeros to a byte, and
// its sample count.
func (e *xorEncoder) chunk() chunkenc.Chunk {
	if e.n > 0 {
		e.b = append(e.b, byte(e.acc<<(8-e.n)))
		e.n = 0
	}
	binary.BigEndian.PutUint16(e.b, uint16(e.num))
	c, err := chunkenc.FromData(chunkenc.EncXOR, e.b)
	if err != nil {
		panic(err) // an XOR chunk takes any bytes
	}
	return c
}
