package cellblock

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// decodeAll decodes a block into cells with values of their own.
func decodeAll(block []byte) ([]Cell, error) {
	r, err := NewReader(block)
	if err != nil {
		return nil, err
	}
	return readAll(&r)
}

// readAll decodes the rest of r's block into cells with values of their
// own.
func readAll(r *Reader) ([]Cell, error) {
	var cells []Cell
	for r.Next() {
		c := r.Cell()
		c.Value = bytes.Clone(c.Value)
		if c.Value == nil {
			c.Value = []byte{}
		}
		cells = append(cells, c)
	}
	return cells, r.Err()
}

func double(v float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }

func roundTrip(t *testing.T, cells []Cell) []byte {
	t.Helper()
	for i := range cells {
		if cells[i].Value == nil {
			cells[i].Value = []byte{}
		}
	}
	block := Append([]byte("prefix"), cells)
	require.Equal(t, "prefix", string(block[:6]), "appends")
	got, err := decodeAll(block[6:])
	require.NoError(t, err)
	require.Equal(t, cells, got)
	return block[6:]
}

func TestRoundTripExtremes(t *testing.T) {
	nanPayload := binary.BigEndian.AppendUint64(nil, 0x7ff0000000000002) // Prometheus's stale marker
	roundTrip(t, []Cell{
		{Column: 0, WriteTime: math.MinInt64, Expiry: 0, Value: double(math.NaN())},
		{Column: 1, WriteTime: math.MaxInt64, Expiry: math.MaxInt64, Value: double(math.Inf(1))},
		{Column: 2, WriteTime: 0, Expiry: 1, Value: double(math.Inf(-1))},
		{Column: 1 << 31, WriteTime: -1, Expiry: math.MinInt64, Value: double(1e300)},
		{Column: math.MaxUint32 - 1, WriteTime: 1, Value: nanPayload},
		{Column: math.MaxUint32, WriteTime: 1, Value: double(-0.0)},
	})
	// Values of any length, empty ones included, keep their bytes.
	roundTrip(t, []Cell{
		{Column: 5, WriteTime: 7, Value: nil},
		{Column: 6, WriteTime: 7, Value: []byte{0xf6, 0x01}},
		{Column: 100, WriteTime: 8, Value: bytes.Repeat([]byte{0, 0xff}, 5000)},
		{Column: math.MaxUint32, WriteTime: 8, Value: []byte("12345678")},
	})
	roundTrip(t, []Cell{{Column: 42, WriteTime: 1, Value: []byte("x")}})
}

func TestRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := 1 + rng.IntN(300)
		cols := map[uint32]bool{}
		for len(cols) < n {
			switch rng.IntN(3) {
			case 0:
				cols[rng.Uint32()] = true
			default:
				cols[uint32(rng.IntN(n*3))*60000] = true
			}
		}
		keys := slices.Sorted(func(yield func(uint32) bool) {
			for c := range cols {
				if !yield(c) {
					return
				}
			}
		})
		fixed := rng.IntN(2) == 0
		cells := make([]Cell, n)
		wt := rng.Int64()
		for i, c := range keys {
			if rng.IntN(4) == 0 {
				wt += rng.Int64N(1<<40) - 1<<39
			}
			var exp int64
			if rng.IntN(3) == 0 {
				exp = rng.Int64N(1 << 40)
			}
			v := double(float64(i) * 1.5)
			if !fixed {
				v = make([]byte, rng.IntN(20))
				for j := range v {
					v[j] = byte(rng.Uint32())
				}
			} else if rng.IntN(5) == 0 {
				v = binary.BigEndian.AppendUint64(nil, rng.Uint64())
			}
			cells[i] = Cell{Column: c, WriteTime: wt, Expiry: exp, Value: v}
		}
		roundTrip(t, cells)
	}
}

// TestCorruptionDetected: any changed byte or a cut block is an error,
// never cells.
func TestCorruptionDetected(t *testing.T) {
	var cells []Cell
	for i := range 200 {
		cells = append(cells, Cell{Column: uint32(i) * 60000, WriteTime: 1_700_000_000_000 + int64(i)*60000, Expiry: int64(i / 50), Value: double(float64(i) * 0.25)})
	}
	block := roundTrip(t, cells)
	for i := range block {
		for _, flip := range []byte{1, 0x80, 0xff} {
			bad := bytes.Clone(block)
			bad[i] ^= flip
			_, err := decodeAll(bad)
			require.ErrorIs(t, err, ErrCorrupt, "byte %d ^ %#x", i, flip)
		}
	}
	for n := range len(block) {
		_, err := decodeAll(block[:n])
		require.ErrorIs(t, err, ErrCorrupt, "cut at %d", n)
	}
}

// TestSize pins what a regular series costs: a counter-like double every
// minute written by one request per sample (write times one minute apart,
// give or take), and the same written at once.
func TestSize(t *testing.T) {
	const n = 280
	var scraped, bulk []Cell
	for i := range n {
		col := uint32(i) * 60000
		v := double(float64(i)*1.5 + float64(i%7)*0.125)
		scraped = append(scraped, Cell{Column: col, WriteTime: 1_700_000_000_000 + int64(col) + int64(i%5)*3, Value: v})
		bulk = append(bulk, Cell{Column: col, WriteTime: 1_700_000_000_000, Value: v})
	}
	s, b := len(roundTrip(t, scraped)), len(roundTrip(t, bulk))
	t.Logf("bytes per cell: scraped %.2f, bulk %.2f", float64(s)/n, float64(b)/n)
	require.Less(t, float64(b)/n, 2.1)
	require.Less(t, float64(s)/n, 3.5)
}

func FuzzBlock(f *testing.F) {
	f.Add(Append(nil, []Cell{{Column: 1, WriteTime: 2, Expiry: 3, Value: double(4)}, {Column: 9, WriteTime: 2, Value: double(5)}}))
	f.Add(Append(nil, []Cell{{Column: 1, WriteTime: 2, Value: []byte("ab")}, {Column: 1 << 31, WriteTime: -2, Expiry: 9, Value: nil}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Whatever the bytes, decoding ends in cells or an error, and cells
		// decoded encode back to a block that decodes to them.
		if cells, err := decodeAll(data); err == nil {
			again, err := decodeAll(Append(nil, cells))
			if err != nil || !cellsEqual(cells, again) {
				t.Fatalf("re-encoded block differs: %v", err)
			}
		}
		// The bytes as cells: every field from the input, columns made
		// ascending.
		var cells []Cell
		col := int64(-1)
		for len(data) >= 10 && col < math.MaxUint32 {
			col = min(col+1+int64(binary.BigEndian.Uint16(data)), math.MaxUint32)
			c := Cell{Column: uint32(col), WriteTime: int64(binary.BigEndian.Uint64(data[2:10]))}
			data = data[10:]
			if len(data) > 0 && data[0]&1 == 1 {
				c.Expiry = c.WriteTime ^ int64(data[0])
			}
			n := 8
			if len(data) > 0 && data[0]&2 == 2 {
				n = int(data[0] >> 2)
			}
			n = min(n, len(data))
			c.Value = bytes.Clone(data[:n])
			data = data[n:]
			cells = append(cells, c)
		}
		if len(cells) == 0 {
			return
		}
		got, err := decodeAll(Append(nil, cells))
		if err != nil || !cellsEqual(cells, got) {
			t.Fatalf("round trip of %d cells: %v", len(cells), err)
		}
	})
}

func cellsEqual(a, b []Cell) bool {
	return slices.EqualFunc(a, b, func(x, y Cell) bool {
		return x.Column == y.Column && x.WriteTime == y.WriteTime && x.Expiry == y.Expiry && bytes.Equal(x.Value, y.Value)
	})
}
