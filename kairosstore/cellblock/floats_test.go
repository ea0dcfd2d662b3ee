package cellblock

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// appendFloatsAll reads block through AppendFloats, max cells at a time,
// and returns the columns, the value bits, and Err.
func appendFloatsAll(block []byte, lo, hi uint32, max int) ([]int64, []uint64, error) {
	r, err := NewReader(block)
	if err != nil {
		return nil, nil, err
	}
	var (
		cols []int64
		vals []float64
	)
	for {
		n := len(cols)
		var full bool
		cols, vals, full = r.AppendFloats(cols, vals, lo, hi, max)
		if len(cols)-n > max {
			return nil, nil, fmt.Errorf("%d cells appended, max %d", len(cols)-n, max)
		}
		if !full {
			break
		}
	}
	bits := make([]uint64, len(vals))
	for i, v := range vals {
		bits[i] = math.Float64bits(v)
	}
	return cols, bits, r.Err()
}

// nextAll is what Next decodes of block in [lo, hi), as appendFloatsAll
// gives it, and whether the read stopped with an error (Err) before the
// first column at or past hi.
func nextAll(block []byte, lo, hi uint32) ([]int64, []uint64, error) {
	r, err := NewReader(block)
	if err != nil {
		return nil, nil, err
	}
	var cols []int64
	var bits []uint64
	for r.Next() {
		if r.Column() < lo {
			continue
		}
		if r.Column() >= hi {
			break
		}
		cols = append(cols, int64(r.Column()))
		bits = append(bits, binary.BigEndian.Uint64(r.Value()))
	}
	return cols, bits, r.Err()
}

// sameFloats compares AppendFloats with Next on a block AppendFloats
// handles (Fixed8, no expiry); any other it skips.
func sameFloats(t *testing.T, block []byte, lo, hi uint32, max int) {
	t.Helper()
	if r, err := NewReader(block); err != nil || !r.Fixed8() || r.HasExpiry() {
		return
	}
	wc, wb, werr := nextAll(block, lo, hi)
	gc, gb, gerr := appendFloatsAll(block, lo, hi, max)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("[%d, %d) max %d: Next's error %v, AppendFloats' %v", lo, hi, max, werr, gerr)
	}
	if werr != nil {
		return // what was appended before an error is not used
	}
	if fmt.Sprint(wc, wb) != fmt.Sprint(gc, gb) {
		t.Fatalf("[%d, %d) max %d:\nNext         %v %x\nAppendFloats %v %x", lo, hi, max, wc, wb, gc, gb)
	}
}

// TestAppendFloatsAsNext: AppendFloats gives the cells Next gives, for
// series of the shapes a scrape writes (counters, gauges, repeated values,
// a sample missed, a write time that jumps, NaN payloads, ±Inf, 1e300, -0)
// and bounds and maxima that cut blocks anywhere; blocks it does not
// handle (values of other lengths, expiries) append nothing.
func TestAppendFloatsAsNext(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	odd := []float64{math.NaN(), math.Float64frombits(0x7ff8dead00000001), math.Inf(1), math.Inf(-1), 1e300, -1e300, math.Copysign(0, -1), 0}
	handled := 0
	for i := range 400 {
		n := 1 + rng.IntN(600)
		col := uint32(rng.Int64N(1 << 32))
		step := []uint32{1, 1000, 15_000, 60_000, 1 << 20}[rng.IntN(5)]
		wt := rng.Int64()
		v := rng.NormFloat64() * 1e3
		var cells []Cell
		for range n {
			if uint64(col) >= 1<<32 {
				break
			}
			cells = append(cells, Cell{Column: col, WriteTime: wt, Value: double(v)})
			next := uint64(col) + uint64(step)
			if rng.IntN(20) == 0 {
				next += uint64(rng.IntN(3)) * uint64(step) // missed samples
			}
			if next >= 1<<32 {
				break
			}
			col = uint32(next)
			if rng.IntN(30) == 0 {
				wt += rng.Int64N(1 << 40)
			}
			switch k := rng.IntN(40); {
			case i%3 == 0: // a gauge
				v = rng.NormFloat64() * 1e3
			case k == 0:
				v = odd[rng.IntN(len(odd))]
			case k < 10: // unchanged
			default: // a counter
				v += float64(rng.IntN(100))
			}
		}
		if rng.IntN(10) == 0 {
			cells[rng.IntN(len(cells))].Expiry = 1
		}
		if rng.IntN(10) == 0 {
			cells[rng.IntN(len(cells))].Value = []byte{1, 2}
		}
		block := Append(nil, cells)
		first, last := uint64(cells[0].Column), uint64(cells[len(cells)-1].Column)
		pick := func() uint32 { return uint32(first + rng.Uint64N(last-first+2)) }
		for _, b := range [][2]uint32{{0, math.MaxUint32}, {pick(), pick()}, {pick(), math.MaxUint32}, {0, pick()}} {
			for _, max := range []int{1, 2, 3, 7, 1024, 1 << 30} {
				sameFloats(t, block, b[0], b[1], max)
			}
		}
		r, err := NewReader(block)
		if err != nil {
			t.Fatal(err)
		}
		if r.Fixed8() && !r.HasExpiry() {
			handled++
			continue
		}
		if cols, _, full := r.AppendFloats(nil, nil, 0, math.MaxUint32, 10); len(cols) != 0 || full {
			t.Fatalf("a block of other values or expiries: %d cells appended", len(cols))
		}
	}
	if handled < 300 {
		t.Fatalf("only %d blocks of 400 had 8-byte values and no expiry", handled)
	}
}

// FuzzAppendFloats: on any bytes AppendFloats decodes what Next decodes,
// or fails where it fails, whatever the bounds and the maximum.
func FuzzAppendFloats(f *testing.F) {
	var counter []Cell
	for i := range 300 {
		counter = append(counter, Cell{Column: uint32(i) * 15_000, WriteTime: 9, Value: double(float64(i / 3 * 7))})
	}
	f.Add(Append(nil, counter), uint32(0), uint32(math.MaxUint32), uint16(7))
	f.Add(Append(nil, counter[:3]), uint32(15_000), uint32(30_001), uint16(1))
	f.Add(Append(nil, []Cell{{Column: 1, WriteTime: 2, Value: double(math.NaN())}, {Column: 9, WriteTime: 2, Value: double(1e300)}}), uint32(0), uint32(10), uint16(0))
	f.Fuzz(func(t *testing.T, block []byte, lo, hi uint32, max uint16) {
		sameFloats(t, block, lo, hi, 1+int(max))
	})
}
