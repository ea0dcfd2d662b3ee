package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

var (
	errTruncated = errors.New("kairosstore: value truncated")
	errTrailing  = errors.New("kairosstore: trailing bytes after value")
)

// isFinite reports whether v is neither NaN nor ±Inf. Non-finite samples go
// to a null-typed row (project decision; see DecodeValue).
func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// AppendDouble appends v as 8 big-endian bytes (§4.2). Unlike Java it keeps
// NaN payloads, so Prometheus stale markers survive bit for bit.
func AppendDouble(dst []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(v))
}

// decodeDouble decodes a kairos_double value: exactly 8 bytes (§4.2).
func decodeDouble(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("kairosstore: double value is %d bytes, want 8", len(b))
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
}

// AppendLong appends v as a zigzag varint, the kairos_long value (§4.1).
func AppendLong(dst []byte, v int64) []byte {
	return binary.AppendVarint(dst, v)
}

// decodeLong decodes a kairos_long value (§4.1). It accepts only what
// AppendLong writes: one minimal varint of at most 10 bytes filling b.
// (Java is laxer: it ignores trailing bytes and accepts padded groups; no
// KairosDB writer produces either.)
func decodeLong(b []byte) (int64, error) {
	v, n := binary.Varint(b)
	switch {
	case n == 0:
		return 0, errTruncated
	case n < 0:
		return 0, errors.New("kairosstore: varint overflows 64 bits")
	case n != len(b):
		return 0, errTrailing
	case n > 1 && b[n-1] == 0:
		return 0, errors.New("kairosstore: varint is not minimal")
	}
	return v, nil
}

// decodeKairosLegacy decodes a kairos_legacy value as current KairosDB writes
// it (§4.5): type byte 0x00 then a zigzag varint long, any other type byte
// then an 8-byte double.
func decodeKairosLegacy(b []byte) (float64, error) {
	if len(b) == 0 {
		return 0, errTruncated
	}
	if b[0] == 0x00 {
		v, err := decodeLong(b[1:])
		return float64(v), err
	}
	return decodeDouble(b[1:])
}

// decodeLegacyCell decodes a value of a row whose key has no type block
// (§4.8). The column's low bit picks the type: 0 is a long stored as
// big-endian bytes with leading zeros stripped (empty is 0, no sign
// extension), 1 is a flag byte then a float32 (flag 0x01) or a float64.
func decodeLegacyCell(col uint32, b []byte) (float64, error) {
	if col&1 == 0 {
		if len(b) > 8 {
			return 0, fmt.Errorf("kairosstore: legacy long is %d bytes, more than 8", len(b))
		}
		var u uint64
		for _, c := range b {
			u = u<<8 | uint64(c)
		}
		return float64(int64(u)), nil
	}
	if len(b) == 0 {
		return 0, errTruncated
	}
	if b[0] == 0x01 {
		if len(b) != 5 {
			return 0, fmt.Errorf("kairosstore: legacy float is %d bytes, want 5", len(b))
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(b[1:]))), nil
	}
	return decodeDouble(b[1:])
}

// DecodeValue decodes one data_points value to a number (§4.9). legacyKey
// says the row key had no type block (parsed as TypeLegacy from
// row_key_index): its values use the column-bit decoding of §4.8 whatever
// dataType says. Otherwise it dispatches on dataType:
//
//   - kairos_long, kairos_double, kairos_legacy (§4.5): the number.
//   - null: this project stores non-finite samples there as 8 raw bytes,
//     which come back bit for bit; the empty value KairosDB's gaps
//     aggregator writes (§4.6) gives ok=false.
//   - kairos_string and unknown types: ok=false with no error; the caller
//     skips them (KairosDB would fail the whole query on an unknown type).
func DecodeValue(dataType string, legacyKey bool, col uint32, b []byte) (v float64, ok bool, err error) {
	if legacyKey {
		v, err = decodeLegacyCell(col, b)
		return v, err == nil, err
	}
	switch dataType {
	case TypeLong:
		var n int64
		n, err = decodeLong(b)
		v = float64(n)
	case TypeDouble:
		v, err = decodeDouble(b)
	case TypeLegacy:
		v, err = decodeKairosLegacy(b)
	case TypeNull:
		if len(b) == 0 {
			return 0, false, nil
		}
		v, err = decodeDouble(b)
	default:
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return v, true, nil
}
