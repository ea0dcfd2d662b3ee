package cellblock

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBitsEveryWidthAndOffset reads a random stream in random widths of 1
// to 64 bits, from every bit offset, and checks each field against the
// stream read one bit at a time: the one load and the padded one of the
// stream's last 9 bytes agree, and a field past the end is an error.
func TestBitsEveryWidthAndOffset(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	stream := make([]byte, 64)
	for i := range stream {
		stream[i] = byte(rng.Uint32())
	}
	bitAt := func(p uint64) uint64 { return uint64(stream[p>>3]>>(7-p&7)) & 1 }
	for start := range uint64(16) {
		for range 200 {
			r := bitReader{b: stream, pos: start}
			for {
				n := uint8(1 + rng.IntN(64))
				pos := r.pos
				if pos+uint64(n) > uint64(len(stream))*8 {
					_, err := r.bits(n)
					require.ErrorIs(t, err, errShort)
					break
				}
				var want uint64
				for k := range uint64(n) {
					want = want<<1 | bitAt(pos+k)
				}
				got, err := r.bits(n)
				require.NoError(t, err)
				require.Equal(t, want, got, "%d bits at %d", n, pos)
				require.Equal(t, pos+uint64(n), r.pos)
			}
		}
	}
}

// TestResetReuse reads blocks of every kind (8-byte values or not, with
// expiries or not, one cell or many, corrupt) through one reader, as the
// engine's reads do, and gets what a new reader of each gets: nothing of
// a block is left in the reader for the next.
func TestResetReuse(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var r Reader
	for i := range 3000 {
		n := 1 + rng.IntN(12)
		cells := make([]Cell, n)
		col := rng.Uint32N(1 << 20)
		fixed := rng.IntN(3) != 0
		for j := range cells {
			col += 1 + rng.Uint32N(3_600_000)
			v := binary.BigEndian.AppendUint64(nil, math.Float64bits([]float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, -0.0, rng.Float64()}[rng.IntN(6)]))
			if !fixed {
				v = bytes.Repeat([]byte{byte(j)}, rng.IntN(12))
			}
			var exp int64
			if rng.IntN(4) == 0 {
				exp = rng.Int64N(1 << 40)
			}
			cells[j] = Cell{Column: col, WriteTime: rng.Int64(), Expiry: exp, Value: v}
		}
		block := Append(nil, cells)
		if i%10 == 0 {
			block[rng.IntN(len(block))] ^= 0x10
		}
		want, wantErr := decodeAll(block)
		var got []Cell
		err := r.Reset(block)
		if err == nil {
			got, err = readAll(&r)
		} else {
			require.False(t, r.Next(), "a reader whose block was refused reads no cell")
		}
		require.Equal(t, wantErr == nil, err == nil, "block %d: %v, %v", i, wantErr, err)
		if wantErr == nil {
			require.Equal(t, want, got, "block %d", i)
		}
	}
}

// TestCutStreamIsError cuts the bit stream of sound blocks short and seals
// them again (length and checksum made right): every cell the stream no
// longer holds whole is an error, never a value made of the zeros past its
// end, and the cells before it decode as they were written.
func TestCutStreamIsError(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 300 {
		n := 1 + rng.IntN(6)
		cells := make([]Cell, n)
		col := rng.Uint32N(1 << 20)
		for j := range cells {
			col += 1 + rng.Uint32N(3_600_000)
			var exp int64
			if rng.IntN(3) == 0 {
				exp = rng.Int64N(1 << 40)
			}
			v := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, -0.0, rng.Float64(), float64(j)}[rng.IntN(7)]
			cells[j] = Cell{Column: col, WriteTime: 1_700_000_000_000 + rng.Int64N(4)*60_000, Expiry: exp, Value: binary.BigEndian.AppendUint64(nil, math.Float64bits(v))}
		}
		block := Append(nil, cells)
		// format, count, flags, stream length, stream, checksum (8-byte values: no value bytes).
		body := block[1:]
		_, k := binary.Uvarint(body)
		flags := body[k]
		body = body[k+1:]
		blen, k2 := binary.Uvarint(body)
		stream := body[k2 : k2+int(blen)]
		for cut := range len(stream) {
			b := []byte{format}
			b = binary.AppendUvarint(b, uint64(n))
			b = append(b, flags)
			b = binary.AppendUvarint(b, uint64(cut))
			b = append(b, stream[:cut]...)
			b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
			r, err := NewReader(b)
			if err != nil {
				continue // the count no longer fits the bytes
			}
			i := 0
			for r.Next() {
				c := r.Cell()
				require.Less(t, i, n)
				require.Equal(t, cells[i].Column, c.Column, "cut %d of %d, cell %d", cut, len(stream), i)
				require.Equal(t, cells[i].WriteTime, c.WriteTime)
				require.Equal(t, cells[i].Expiry, c.Expiry)
				require.Equal(t, cells[i].Value, c.Value)
				i++
			}
			require.ErrorIs(t, r.Err(), ErrCorrupt, "cut %d of %d bytes: %d cells of %d", cut, len(stream), i, n)
		}
	}
}
