package cellblock

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAppendGolden pins the bytes Append writes: blocks are stored, so an
// encoder made faster must still write what stored blocks hold, and the
// same cells as the same bytes (testdata/blocks.hex, written by the encoder
// of c041004). Each block is appended after a byte, as the store appends
// them to a key's buffer.
func TestAppendGolden(t *testing.T) {
	f := func(v float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }
	var long []Cell // a bit stream over 127 bytes: its length takes two bytes
	for i := range 300 {
		long = append(long, Cell{Column: uint32(i * 15000), WriteTime: 1700000000000 + int64(i)*15000 + int64(i%3), Value: f(float64(i) * 1.5)})
	}
	blocks := [][]Cell{
		{{Column: 7, WriteTime: 1, Value: f(math.NaN())}},
		long,
		{{Column: 0, WriteTime: math.MinInt64, Expiry: 5, Value: []byte("ab")}, {Column: math.MaxUint32, WriteTime: math.MaxInt64, Value: nil}},
		{{Column: 1, WriteTime: 2, Expiry: 3, Value: f(math.Inf(1))}, {Column: 2, WriteTime: 2, Expiry: 4, Value: f(1e300)}},
	}
	raw, err := os.ReadFile("testdata/blocks.hex")
	require.NoError(t, err)
	want := strings.Fields(string(raw))
	require.Len(t, want, len(blocks))
	for i, cells := range blocks {
		got := Append([]byte{0xee}, cells)
		require.Equal(t, byte(0xee), got[0])
		require.Equal(t, want[i], hex.EncodeToString(got[1:]), "block %d", i)
	}
}
