package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// The kairos_string codec lives with its tests: the adapter neither writes
// nor reads string values (DecodeValue skips them), but the tests pin the
// bytes of §4.3 that KairosDB writes.

// maxUTFLen is the most bytes Java's writeUTF can length-prefix (§4.3).
const maxUTFLen = 65535

// AppendString appends s in Java's writeUTF form (§4.3): a uint16 byte
// count, then modified UTF-8 (U+0000 as C0 80, supplementary characters as
// two 3-byte surrogates). It fails, leaving dst as it was, if s is not valid
// UTF-8 or needs more than 65535 bytes, where Java throws.
func AppendString(dst []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return dst, errors.New("kairosstore: string is not valid UTF-8")
	}
	n := 0
	for _, r := range s {
		switch {
		case r == 0:
			n += 2
		case r >= 0x10000:
			n += 6
		default:
			n += utf8.RuneLen(r)
		}
	}
	if n > maxUTFLen {
		return dst, fmt.Errorf("kairosstore: string needs %d bytes, more than %d", n, maxUTFLen)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	for _, r := range s {
		switch {
		case r == 0:
			dst = append(dst, 0xC0, 0x80)
		case r >= 0x10000:
			hi, lo := utf16.EncodeRune(r)
			dst = appendUTF8Unit(dst, hi)
			dst = appendUTF8Unit(dst, lo)
		default:
			dst = utf8.AppendRune(dst, r)
		}
	}
	return dst, nil
}

// appendUTF8Unit writes one surrogate code unit as 3 bytes, which
// utf8.AppendRune refuses to do.
func appendUTF8Unit(dst []byte, u rune) []byte {
	return append(dst, 0xE0|byte(u>>12), 0x80|byte(u>>6)&0x3F, 0x80|byte(u)&0x3F)
}

// decodeString decodes a kairos_string value written by writeUTF (§4.3).
// Like Java's readUTF it accepts 1-, 2- and 3-byte forms including overlong
// ones (C0 80 is U+0000) and joins surrogate pairs. It rejects what Java
// rejects, a length that does not match, and unpaired surrogates, which have
// no UTF-8 form.
func decodeString(b []byte) (string, error) {
	if len(b) < 2 {
		return "", errTruncated
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	switch {
	case len(b) < n:
		return "", errTruncated
	case len(b) > n:
		return "", errTrailing
	}
	out := make([]byte, 0, n)
	var pending rune = -1 // a high surrogate waiting for its low half
	for i := 0; i < len(b); {
		u, size, err := decodeUnit(b[i:])
		if err != nil {
			return "", fmt.Errorf("kairosstore: modified UTF-8 at byte %d: %w", i, err)
		}
		i += size
		switch {
		case pending >= 0:
			if !utf16.IsSurrogate(u) || u < 0xDC00 {
				return "", errors.New("kairosstore: unpaired high surrogate")
			}
			out = utf8.AppendRune(out, utf16.DecodeRune(pending, u))
			pending = -1
		case u >= 0xD800 && u < 0xDC00:
			pending = u
		case u >= 0xDC00 && u < 0xE000:
			return "", errors.New("kairosstore: unpaired low surrogate")
		default:
			out = utf8.AppendRune(out, u)
		}
	}
	if pending >= 0 {
		return "", errors.New("kairosstore: unpaired high surrogate at end")
	}
	return string(out), nil
}

// decodeUnit decodes one UTF-16 code unit from modified UTF-8 the way
// DataInputStream.readUTF does: only the 10xxxxxx continuation pattern is
// checked, so overlong forms are accepted.
func decodeUnit(b []byte) (rune, int, error) {
	c := b[0]
	switch {
	case c < 0x80:
		return rune(c), 1, nil
	case c>>5 == 0b110:
		if len(b) < 2 {
			return 0, 0, errTruncated
		}
		if b[1]>>6 != 0b10 {
			return 0, 0, errors.New("bad continuation byte")
		}
		return rune(c&0x1F)<<6 | rune(b[1]&0x3F), 2, nil
	case c>>4 == 0b1110:
		if len(b) < 3 {
			return 0, 0, errTruncated
		}
		if b[1]>>6 != 0b10 || b[2]>>6 != 0b10 {
			return 0, 0, errors.New("bad continuation byte")
		}
		return rune(c&0x0F)<<12 | rune(b[1]&0x3F)<<6 | rune(b[2]&0x3F), 3, nil
	}
	return 0, 0, fmt.Errorf("bad lead byte %#x", c)
}
