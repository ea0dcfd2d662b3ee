package codec

import (
	"encoding/hex"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// staleNaN is Prometheus' stale marker (value.StaleNaN).
var staleNaN = math.Float64frombits(0x7ff0000000000002)

func TestLong(t *testing.T) {
	for _, tc := range []struct {
		v   int64
		hex string
	}{ // §4.1 table
		{0, "00"},
		{1, "02"},
		{-1, "01"},
		{2, "04"},
		{-2, "03"},
		{63, "7e"},
		{64, "8001"},
		{-64, "7f"},
		{-65, "8101"},
		{123, "f601"},
		{300, "d804"},
		{1000000, "80897a"},
		{math.MaxInt64, "feffffffffffffffff01"},
		{math.MinInt64, "ffffffffffffffffff01"},
	} {
		t.Run(tc.hex, func(t *testing.T) {
			got := AppendLong([]byte{0xEE}, tc.v)
			require.Equal(t, "ee"+tc.hex, hex.EncodeToString(got))
			v, err := decodeLong(got[1:])
			require.NoError(t, err)
			require.Equal(t, tc.v, v)
		})
	}
}

func TestDecodeLongErrors(t *testing.T) {
	for _, tc := range []struct{ name, hex string }{
		{"empty", ""},
		{"truncated", "80"},
		{"truncated long", "ffffffffffffffffff"},
		{"11 bytes", "ffffffffffffffffffff01"},
		{"10th byte overflows", "ffffffffffffffffff02"},
		{"trailing byte", "0200"},
		{"padded group", "8000"},
		{"padded 2 groups", "828000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeLong(unhex(t, tc.hex))
			require.Error(t, err)
		})
	}
}

func TestDouble(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    float64
		hex  string
	}{ // §4.2
		{"13.2", 13.2, "402a666666666666"},
		{"1.0", 1.0, "3ff0000000000000"},
		{"-0.0", math.Copysign(0, -1), "8000000000000000"},
		{"+Inf", math.Inf(1), "7ff0000000000000"},
		{"-Inf", math.Inf(-1), "fff0000000000000"},
		{"NaN kept as Go's", math.NaN(), "7ff8000000000001"},
		{"stale marker kept", staleNaN, "7ff0000000000002"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := AppendDouble([]byte{0xEE}, tc.v)
			require.Equal(t, "ee"+tc.hex, hex.EncodeToString(got))
			v, err := decodeDouble(got[1:])
			require.NoError(t, err)
			require.Equal(t, math.Float64bits(tc.v), math.Float64bits(v))
		})
	}
	for _, n := range []int{0, 7, 9} {
		_, err := decodeDouble(make([]byte, n))
		require.Error(t, err)
	}
	require.True(t, isFinite(1))
	require.True(t, isFinite(-math.MaxFloat64))
	require.False(t, isFinite(math.NaN()))
	require.False(t, isFinite(staleNaN))
	require.False(t, isFinite(math.Inf(-1)))
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		name, s, hex string
	}{ // §4.3
		{"empty", "", "0000"},
		{"abc", "abc", "0003616263"},
		{"hé", "hé", "000368c3a9"},
		{"NUL as C0 80", "a\x00b", "000461c08062"},
		{"emoji as surrogates", "😀", "0006eda0bdedb880"},
		{"U+07FF", "\u07ff", "0002dfbf"},
		{"U+0800", "\u0800", "0003e0a080"},
		{"U+FFFF", "\uffff", "0003efbfbf"},
		{"U+10FFFF", "\U0010ffff", "0006edafbfedbfbf"},
		{"U+FFFD", "\ufffd", "0003efbfbd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AppendString([]byte{0xEE}, tc.s)
			require.NoError(t, err)
			require.Equal(t, "ee"+tc.hex, hex.EncodeToString(got))
			s, err := decodeString(got[1:])
			require.NoError(t, err)
			require.Equal(t, tc.s, s)
		})
	}
}

func TestStringLimits(t *testing.T) {
	max := strings.Repeat("a", 65535)
	b, err := AppendString(nil, max)
	require.NoError(t, err)
	require.Len(t, b, 65537)

	for _, s := range []string{
		strings.Repeat("a", 65536),
		strings.Repeat("\x00", 32768), // 2 bytes each
		strings.Repeat("😀", 10923),    // 6 bytes each
		"a\xffb",                      // not UTF-8
	} {
		dst := []byte("keep")
		got, err := AppendString(dst, s)
		require.Error(t, err)
		require.Equal(t, "keep", string(got))
	}
}

func TestDecodeStringLenient(t *testing.T) {
	// Java's readUTF accepts these (§4.3); so does decodeString.
	for _, tc := range []struct{ name, hex, s string }{
		{"raw NUL", "000100", "\x00"},
		{"overlong 2-byte A", "0002c181", "A"},
		{"overlong 3-byte A", "0003e08181", "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := decodeString(unhex(t, tc.hex))
			require.NoError(t, err)
			require.Equal(t, tc.s, s)
		})
	}
}

func TestDecodeStringErrors(t *testing.T) {
	for _, tc := range []struct{ name, hex string }{
		{"empty", ""},
		{"one byte", "00"},
		{"short", "000261"},
		{"trailing", "00016162"},
		{"lone continuation", "000180"},
		{"4-byte UTF-8", "0004f09f9880"},
		{"bad continuation", "0002c341"},
		{"truncated 2-byte", "0001c3"},
		{"truncated 3-byte", "0002e0a0"},
		{"lone high surrogate", "0003eda0bd"},
		{"lone low surrogate", "0003edb880"},
		{"high then ASCII", "0004eda0bd41"},
		{"two highs", "0006eda0bdeda0bd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeString(unhex(t, tc.hex))
			require.Error(t, err)
		})
	}
}

func TestDecodeKairosLegacy(t *testing.T) {
	for _, tc := range []struct {
		name string
		hex  string
		v    float64
	}{ // §4.5
		{"long 123", "00f601", 123},
		{"long -1", "0001", -1},
		{"double 1.0", "013ff0000000000000", 1.0},
		{"double 13.2, other type byte", "02402a666666666666", 13.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := decodeKairosLegacy(unhex(t, tc.hex))
			require.NoError(t, err)
			require.Equal(t, tc.v, v)
		})
	}
	for _, h := range []string{"", "00", "0080", "01", "013ff00000000000", "013ff000000000000000"} {
		_, err := decodeKairosLegacy(unhex(t, h))
		require.Error(t, err, h)
	}
}

func TestDecodeLegacyCell(t *testing.T) {
	for _, tc := range []struct {
		name string
		col  uint32
		hex  string
		v    float64
	}{ // §4.8
		{"long 0 is empty", 0x5fb38300, "", 0},
		{"long 1", 2, "01", 1},
		{"long 300", 0, "012c", 300},
		{"long -1 takes 8 bytes", 0, "ffffffffffffffff", -1},
		{"no sign extension", 0, "ff", 255},
		{"7 bytes", 0, "ffffffffffffff", 1<<56 - 1},
		{"float32 1.5", 1, "013fc00000", 1.5},
		{"double after flag 0x02", 0x5fb38301, "02402a666666666666", 13.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := decodeLegacyCell(tc.col, unhex(t, tc.hex))
			require.NoError(t, err)
			require.Equal(t, tc.v, v)
		})
	}
	for _, tc := range []struct {
		col uint32
		hex string
	}{
		{0, "010203040506070809"},
		{1, ""},
		{1, "01"},
		{1, "013fc000"},
		{1, "013fc0000000"},
		{1, "013030303030303030"}, // flag 0x01 means float32, so 9 bytes is wrong
		{1, "02402a6666666666"},
	} {
		_, err := decodeLegacyCell(tc.col, unhex(t, tc.hex))
		require.Error(t, err, tc.hex)
	}
}

func TestDecodeValue(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dataType string
		legacy   bool
		col      uint32
		hex      string
		v        float64
		ok       bool
		err      bool
	}{
		{"long", TypeLong, false, 0, "f601", 123, true, false},
		{"double", TypeDouble, false, 0, "402a666666666666", 13.2, true, false},
		{"kairos_legacy", TypeLegacy, false, 0, "00f601", 123, true, false},
		{"typeless legacy long", TypeLegacy, true, 0, "012c", 300, true, false},
		{"typeless legacy float", TypeLegacy, true, 1, "013fc00000", 1.5, true, false},
		{"legacyKey wins over type", TypeLong, true, 0, "012c", 300, true, false},
		{"null +Inf", TypeNull, false, 0, "7ff0000000000000", math.Inf(1), true, false},
		{"null from gaps aggregator", TypeNull, false, 0, "", 0, false, false},
		{"null bad length", TypeNull, false, 0, "7ff0", 0, false, true},
		{"string skipped", TypeString, false, 0, "0003616263", 0, false, false},
		{"unknown skipped", "kairos_complex", false, 0, "3ff00000000000003ff0000000000000", 0, false, false},
		{"long_nano skipped", "kairos_long_nano", false, 0, "02", 0, false, false},
		{"bad long", TypeLong, false, 0, "80", 0, false, true},
		{"bad double", TypeDouble, false, 0, "3ff0", 0, false, true},
		{"bad kairos_legacy", TypeLegacy, false, 0, "", 0, false, true},
		{"bad typeless legacy", TypeLegacy, true, 1, "", 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok, err := DecodeValue(tc.dataType, tc.legacy, tc.col, unhex(t, tc.hex))
			if tc.err {
				require.Error(t, err)
				require.False(t, ok)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.v, v)
		})
	}
	// Stale markers come back bit for bit.
	v, ok, err := DecodeValue(TypeNull, false, 0, AppendDouble(nil, staleNaN))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(0x7ff0000000000002), math.Float64bits(v))
}
