package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Data type names as stored in the row key type block and in
// row_keys.data_type (§4).
const (
	TypeDouble = "kairos_double"
	TypeLong   = "kairos_long"
	TypeString = "kairos_string"
	TypeLegacy = "kairos_legacy"
	TypeNull   = "null"
)

// MaxTypeLen is the longest type name a row key can carry: Java reads the
// length byte back as a signed byte (§2.1).
const MaxTypeLen = 127

// MaxKeyBytes is Cassandra's limit on a partition key (data_points.key) and
// on the sum of a row's clustering values (row_keys: data_type + tags).
const MaxKeyBytes = 65535

// ErrNULInMetric: the metric name ends at the first 0x00 of the row key and
// is not escaped (§2.1), so a NUL in it makes a key that cannot be parsed
// back. Tags are safe: the tag string runs to the end of the key and NUL is
// not special there (§2.2).
var ErrNULInMetric = errors.New("metric name contains U+0000")

// CheckMetric returns ErrNULInMetric if metric cannot end a row key's name
// field (§2.1).
func CheckMetric(metric string) error {
	if strings.IndexByte(metric, 0) >= 0 {
		return ErrNULInMetric
	}
	return nil
}

// RowKey is the decoded form of a data_points.key (§2).
type RowKey struct {
	Metric   string
	RowTime  int64
	DataType string
	// Tags are in Java order of name (§2.2) with unique names.
	// AppendRowKey expects them sorted (see SortTags); ParseRowKey returns
	// them sorted.
	Tags []Tag
}

// javaLess reports whether a sorts before b in Java's String.compareTo order,
// which compares UTF-16 code units, not UTF-8 bytes (§2.2).
func javaLess(a, b string) bool { return javaCompare(a, b) < 0 }

// javaCompare compares a and b in Java's String.compareTo order (§2.2): -1, 0
// or +1. It does not allocate.
//
// Both strings are decoded rune by rune. Each rune gets a key that orders like
// its UTF-16 encoding: supplementary characters (surrogate pairs, first unit
// 0xD800-0xDBFF) sort after U+0000-U+D7FF and before U+E000-U+FFFF. Bytes
// that are not valid UTF-8 (which Java strings cannot hold) sort after
// everything, by byte value, so the order stays total.
func javaCompare(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ca, cb := a[i], b[j]
		if ca < utf8.RuneSelf && cb < utf8.RuneSelf {
			// ASCII fast path: one byte is one code unit.
			if ca != cb {
				if ca < cb {
					return -1
				}
				return 1
			}
			i++
			j++
			continue
		}
		ka, na := utf16Key(a[i:])
		kb, nb := utf16Key(b[j:])
		if ka != kb {
			if ka < kb {
				return -1
			}
			return 1
		}
		i += na
		j += nb
	}
	// One is a prefix of the other (in code units): the shorter sorts first.
	switch {
	case len(a)-i < len(b)-j:
		return -1
	case len(a)-i > len(b)-j:
		return 1
	}
	return 0
}

// utf16Key returns the Java-order sort key of the first rune of s and the
// number of bytes it takes.
func utf16Key(s string) (key uint32, size int) {
	r, n := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && n == 1:
		return 0x110000 + uint32(s[0]), 1 // invalid byte: after all runes
	case r >= 0x10000:
		return 0xD800 + uint32(r-0x10000), n // surrogate pair range
	case r >= 0xE000:
		return uint32(r) + 0x100000, n // after all supplementary runes
	}
	return uint32(r), n
}

// SortTags sorts tags by name in Java order (§2.2). Names must be unique.
func SortTags(tags []Tag) {
	slices.SortFunc(tags, func(a, b Tag) int { return javaCompare(a.Name, b.Name) })
}

// AppendRowKey appends the data_points.key of k to dst (§2.1, §2.2).
//
// k.Tags must already be sorted in Java order (SortTags) with unique names;
// AppendRowKey writes them as given so that it never allocates. The other
// preconditions are the caller's: no NUL in the metric (CheckMetric), a type
// name of at most MaxTypeLen bytes, valid UTF-8 (translate's Split checks
// the labels; the tests' RowKey.Validate checks them all). The kairos_legacy
// type writes no type block.
func AppendRowKey(dst []byte, k RowKey) []byte {
	dst = append(dst, k.Metric...)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(k.RowTime))
	if k.DataType != TypeLegacy {
		// §2.1: marker 0x00, then the length, then the name; no trailing NUL.
		dst = append(dst, 0, byte(len(k.DataType)))
		dst = append(dst, k.DataType...)
	}
	for _, t := range k.Tags {
		dst = appendEscaped(dst, t.Name, ':')
		dst = append(dst, '=')
		dst = appendEscaped(dst, t.Value, '=')
		dst = append(dst, ':')
	}
	return dst
}

// EscapedLen is the length of s in a row key's tag string: one escape byte
// more per ':' and '=' (§2.2), as appendEscaped writes it.
func EscapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if s[i] == ':' || s[i] == '=' {
			n++
		}
	}
	return n
}

// appendEscaped appends s with esc put in front of every ':' and '=' (§2.2).
func appendEscaped(dst []byte, s string, esc byte) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == ':' || c == '=' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, esc)
			start = i // the character itself goes out with the next run
		}
	}
	return append(dst, s[start:]...)
}

// AppendLegacyIndexBound appends a search key for the legacy row_key_index
// range query (§7.2): the key of (metric, rowTime, type "", no tags), which
// is "name 00 ts8 00 00" for the inclusive start, or with the marker 0xFF,
// "name 00 ts8 FF 00", for the exclusive end.
func AppendLegacyIndexBound(dst []byte, metric string, rowTime int64, end bool) []byte {
	dst = append(dst, metric...)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(rowTime))
	marker := byte(0x00)
	if end {
		marker = 0xFF
	}
	return append(dst, marker, 0)
}

// ParseRowKey decodes a data_points.key (§2.3), typed or legacy. A key
// without a type block gets DataType TypeLegacy; its values use the §4.8
// column-bit decoding.
//
// Where KairosDB is lenient the parser follows it: a final pair without its
// closing ':' is dropped, an escape character makes the next character
// literal whatever it is, and tags come back in Java order with the last
// value of a repeated name winning, as KairosDB's TreeMap does. Where
// KairosDB would throw, and for invalid UTF-8 (which KairosDB never writes),
// ParseRowKey returns an error. A legacy key with nothing after the row time
// (KairosDB would throw; such keys never existed) parses as having no tags.
//
// Keys from row_key_index with DataType TypeLegacy are the type-less keys of
// §4.9: decode their values with legacyKey=true. A kairos_legacy entry of
// row_keys is not (§4.5).
func ParseRowKey(b []byte) (RowKey, error) {
	nul := slices.Index(b, 0)
	if nul < 0 {
		return RowKey{}, errors.New("kairosstore: row key has no NUL after the metric name")
	}
	if len(b)-nul-1 < 8 {
		return RowKey{}, errors.New("kairosstore: row key too short for the row time")
	}
	var k RowKey
	// One copy of the whole key; every field is a substring of it.
	s := string(b)
	k.Metric = s[:nul]
	if !utf8.ValidString(k.Metric) {
		return RowKey{}, errors.New("kairosstore: row key metric name is not valid UTF-8")
	}
	k.RowTime = int64(binary.BigEndian.Uint64(b[nul+1:]))
	rest := s[nul+9:]
	if len(rest) > 0 && rest[0] == 0 {
		if len(rest) < 2 {
			return RowKey{}, errors.New("kairosstore: row key type block has no length")
		}
		n := int(int8(rest[1])) // §2.3: signed length byte
		if n < 0 || len(rest)-2 < n {
			return RowKey{}, fmt.Errorf("kairosstore: row key type length %d out of range", n)
		}
		if !utf8.ValidString(rest[2 : 2+n]) {
			return RowKey{}, errors.New("kairosstore: row key type name is not valid UTF-8")
		}
		k.DataType = rest[2 : 2+n]
		rest = rest[2+n:]
	} else {
		k.DataType = TypeLegacy
	}
	if !utf8.ValidString(rest) {
		return RowKey{}, errors.New("kairosstore: row key tag string is not valid UTF-8")
	}
	k.Tags = parseTags(rest)
	return k, nil
}

// parseTags decodes a tag string with the two-state machine of §2.3.
func parseTags(s string) []Tag {
	if s == "" {
		return nil
	}
	// Every pair ends with ':', so the ':' count bounds the number of pairs.
	tags := make([]Tag, 0, strings.Count(s, ":"))
	inName := true
	var name string
	start, escaped := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		// ':' and '=' are ASCII, so scanning bytes sees the same separators
		// as Java's char scan; skipping one byte after an escape leaves the
		// rest of a multi-byte character to the literal branch.
		if inName {
			switch c {
			case '=':
				name = unescape(s[start:i], ':', escaped)
				inName, start, escaped = false, i+1, false
			case ':':
				i++
				escaped = true
			}
			continue
		}
		switch c {
		case ':':
			tags = append(tags, Tag{Name: name, Value: unescape(s[start:i], '=', escaped)})
			inName, start, escaped = true, i+1, false
		case '=':
			i++
			escaped = true
		}
	}
	// A pair without its closing ':' was never appended (§2.3).
	if len(tags) == 0 {
		return nil // same as a key with an empty tag string
	}
	return javaTagMap(tags)
}

// unescape drops each escape character of seg and keeps the one after it.
func unescape(seg string, esc byte, escaped bool) string {
	if !escaped {
		return seg
	}
	var sb strings.Builder
	sb.Grow(len(seg))
	for i := 0; i < len(seg); i++ {
		if seg[i] == esc && i+1 < len(seg) {
			i++
		}
		sb.WriteByte(seg[i])
	}
	return sb.String()
}

// javaTagMap returns tags the way KairosDB's TreeMap holds them: sorted in
// Java order, a repeated name keeping its last value. Keys KairosDB wrote are
// already like that, so this only copies for malformed keys.
func javaTagMap(tags []Tag) []Tag {
	sorted := true
	for i := 1; i < len(tags); i++ {
		if javaCompare(tags[i-1].Name, tags[i].Name) >= 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return tags
	}
	slices.SortStableFunc(tags, func(a, b Tag) int { return javaCompare(a.Name, b.Name) })
	out := tags[:0]
	for i, t := range tags {
		if i+1 < len(tags) && tags[i+1].Name == t.Name {
			continue // a later put of the same name replaces this one
		}
		out = append(out, t)
	}
	return out
}
