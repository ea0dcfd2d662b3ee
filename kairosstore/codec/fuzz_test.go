package codec

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func FuzzParseRowKey(f *testing.F) {
	for _, tc := range rowKeyVectors {
		f.Add(unhex(f, tc.hex))
	}
	f.Add([]byte("m\x00\x00\x00\x00\x00\x00\x00\x00\x01b=1:\x00=2:"))
	f.Add([]byte("m\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0bkairos_longa:=b=c==d:e=f"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseRowKey(b)
		if err != nil {
			return
		}
		if err := k.Validate(); err != nil {
			// The one parsed key AppendRowKey cannot reproduce: a legacy key
			// whose sorted first tag name starts with NUL.
			require.Equal(t, TypeLegacy, k.DataType, err.Error())
			require.True(t, strings.HasPrefix(k.Tags[0].Name, "\x00"), err.Error())
			return
		}
		again, err := ParseRowKey(AppendRowKey(nil, k))
		require.NoError(t, err)
		require.Equal(t, k, again)
	})
}

func FuzzRowKeyRoundTrip(f *testing.F) {
	f.Add("sys.cpu", int64(1358985600000), TypeLong, "host", "server1", "dc", "x:y")
	f.Add("m", int64(-2), TypeLegacy, "a:b", "c=d", "::", "==")
	f.Add("été", int64(0), "", "\uffff", "1", "😀", "2")
	f.Fuzz(func(t *testing.T, metric string, rowTime int64, dataType, n1, v1, n2, v2 string) {
		k := RowKey{Metric: metric, RowTime: rowTime, DataType: dataType, Tags: tags(n1, v1, n2, v2)}
		SortTags(k.Tags)
		if k.Validate() != nil {
			return
		}
		prefix := []byte("pre")
		b := AppendRowKey(prefix, k)
		require.Equal(t, "pre", string(b[:3]))
		got, err := ParseRowKey(b[3:])
		require.NoError(t, err)
		require.Equal(t, k, got)
	})
}

func FuzzDecodeLong(f *testing.F) {
	for _, h := range []string{"00", "01", "f601", "80897a", "feffffffffffffffff01", "8000", "80", "ffffffffffffffffff02"} {
		f.Add(unhex(f, h), int64(0))
	}
	f.Add([]byte{}, int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, b []byte, v int64) {
		got, err := decodeLong(AppendLong(nil, v))
		require.NoError(t, err)
		require.Equal(t, v, got)

		// Anything accepted is exactly what AppendLong writes.
		if d, err := decodeLong(b); err == nil {
			require.Equal(t, b, AppendLong(nil, d))
		}
	})
}

func FuzzDecodeString(f *testing.F) {
	for _, h := range []string{"0000", "0003616263", "000368c3a9", "000461c08062", "0006eda0bdedb880", "0002c181", "0003eda0bd"} {
		f.Add(unhex(f, h), "")
	}
	f.Add([]byte{}, "a\x00😀é\uffff")
	f.Fuzz(func(t *testing.T, b []byte, s string) {
		enc, err := AppendString(nil, s)
		if err == nil {
			got, err := decodeString(enc)
			require.NoError(t, err)
			require.Equal(t, s, got)
		} else {
			require.False(t, utf8.ValidString(s) && len(s) <= 65535/6, "rejected %q", s)
		}

		// Whatever decodes is valid UTF-8 and re-encodes to something that
		// decodes to the same string.
		if d, err := decodeString(b); err == nil {
			require.True(t, utf8.ValidString(d))
			enc, err := AppendString(nil, d)
			require.NoError(t, err)
			again, err := decodeString(enc)
			require.NoError(t, err)
			require.Equal(t, d, again)
		}
	})
}

func FuzzDecodeKairosLegacy(f *testing.F) {
	for _, h := range []string{"00f601", "0001", "013ff0000000000000", "02402a666666666666", "", "00", "01"} {
		f.Add(unhex(f, h))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeKairosLegacy(b)
		if err != nil {
			return
		}
		if b[0] == 0 {
			n, err := decodeLong(b[1:])
			require.NoError(t, err)
			require.Equal(t, float64(n), v)
			return
		}
		require.Equal(t, b[1:], AppendDouble(nil, v)) // raw bits kept
	})
}

func FuzzDecodeLegacyCell(f *testing.F) {
	f.Add(uint32(0), []byte{})
	f.Add(uint32(2), unhex(f, "012c"))
	f.Add(uint32(0), unhex(f, "ffffffffffffffff"))
	f.Add(uint32(1), unhex(f, "013fc00000"))
	f.Add(uint32(0x5fb38301), unhex(f, "02402a666666666666"))
	f.Fuzz(func(t *testing.T, col uint32, b []byte) {
		v, err := decodeLegacyCell(col, b)
		if col&1 == 0 {
			require.Equal(t, len(b) <= 8, err == nil)
			if err == nil {
				// Left-padding with zeros is the "no sign extension" rule.
				var full [8]byte
				copy(full[8-len(b):], b)
				require.Equal(t, float64(int64(binary.BigEndian.Uint64(full[:]))), v)
			}
			return
		}
		want := len(b) > 0 && (b[0] == 0x01 && len(b) == 5 || b[0] != 0x01 && len(b) == 9)
		require.Equal(t, want, err == nil, "%x", b)
		if err == nil && len(b) == 5 {
			want := float64(math.Float32frombits(binary.BigEndian.Uint32(b[1:])))
			require.Equal(t, math.Float64bits(want), math.Float64bits(v)) // NaN-safe
		}
	})
}

func FuzzDecodeValue(f *testing.F) {
	for _, typ := range []string{TypeLong, TypeDouble, TypeLegacy, TypeNull, TypeString, "kairos_complex"} {
		f.Add(typ, false, uint32(0), unhex(f, "f601"))
		f.Add(typ, false, uint32(1), unhex(f, "7ff0000000000002"))
	}
	f.Add(TypeLegacy, true, uint32(1), unhex(f, "013fc00000"))
	f.Add(TypeNull, false, uint32(0), []byte{})
	f.Fuzz(func(t *testing.T, dataType string, legacyKey bool, col uint32, b []byte) {
		v, ok, err := DecodeValue(dataType, legacyKey, col, b)
		if err != nil {
			require.False(t, ok)
			require.Zero(t, v)
		}
		switch {
		case legacyKey:
			want, werr := decodeLegacyCell(col, b)
			require.Equal(t, werr == nil, ok)
			if ok {
				require.Equal(t, math.Float64bits(want), math.Float64bits(v))
			}
		case dataType == TypeNull:
			require.Equal(t, len(b) == 8, ok)
			require.Equal(t, len(b) != 8 && len(b) != 0, err != nil)
			if ok {
				require.True(t, bytes.Equal(b, AppendDouble(nil, v)))
			}
		case dataType == TypeLong || dataType == TypeDouble || dataType == TypeLegacy:
			require.Equal(t, err == nil, ok)
		default:
			require.False(t, ok)
			require.NoError(t, err)
		}
	})
}
