package pebblekv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// Table prefixes: the first byte of every key names its table, so each
// Cassandra query becomes one bounded iterator (no scan ever has to skip another table).
const (
	tableMeta       = 0x00 // layout version
	tableData       = 'd'  // data_points, one key per cell: layout kairosdb-1 only, converted at Open (convert.go)
	tableBlock      = 'b'  // data_points, one block of cells per row and window (blocks.go)
	tableDataTomb   = 'D'  // data_points partition and range tombstones
	tableLegacy     = 'i'  // row_key_index
	tableLegacyTomb = 'I'  // row_key_index partition tombstones
	tableStrings    = 's'  // string_index
	tableRowKeys    = 'r'  // row_keys
	tableTagIndexed = 't'  // tag_indexed_row_keys
	tableRowTimes   = 'k'  // row_key_time_index
	tableSpec       = 'p'  // spec
	tableService    = 'v'  // service_index
	tableExpiry     = 'x'  // expiry index read by the purge
)

// errCorrupt reports a key or value this package cannot have written.
var errCorrupt = errors.New("pebblekv: corrupt key or value")

// appendEscaped appends one blob or text component. Every 0x00 becomes
// 0x00 0xFF and the component ends with 0x00 0x01, so components are
// self-delimiting (a partition prefix never matches a longer partition) and
// byte order of the encoding equals unsigned byte order of the raw bytes,
// which is how Cassandra orders blob and text (UTF-8) columns.
func appendEscaped[T string | []byte](dst []byte, s T) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			dst = append(dst, 0, 0xff)
		} else {
			dst = append(dst, s[i])
		}
	}
	return append(dst, 0, 1)
}

// appendEscapedPrefix is appendEscaped without the terminator: the encoding
// of every component that starts with s starts with it.
func appendEscapedPrefix(dst []byte, s string) []byte {
	dst = appendEscaped(dst, s)
	return dst[:len(dst)-2]
}

// cutEscaped decodes the first component of src and returns the rest. The
// component aliases src unless it contained escaped zero bytes.
func cutEscaped(src []byte) (comp, rest []byte, err error) {
	i := bytes.IndexByte(src, 0)
	if i < 0 || i+1 == len(src) {
		return nil, nil, errCorrupt
	}
	if src[i+1] == 1 {
		return src[:i], src[i+2:], nil
	}
	var out []byte
	for {
		i := bytes.IndexByte(src, 0)
		if i < 0 || i+1 == len(src) {
			return nil, nil, errCorrupt
		}
		out = append(out, src[:i]...)
		switch src[i+1] {
		case 1:
			return out, src[i+2:], nil
		case 0xff:
			out = append(out, 0)
			src = src[i+2:]
		default:
			return nil, nil, errCorrupt
		}
	}
}

// appendInt64 appends a Cassandra timestamp or bigint with the sign bit
// flipped, so byte order equals signed order (negative row times first).
func appendInt64(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63))
}

func decodeInt64(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)) }

// appendInt32 appends a Cassandra int the same way.
func appendInt32(dst []byte, v int32) []byte {
	return binary.BigEndian.AppendUint32(dst, uint32(v)^(1<<31))
}

// Map entry markers: the end marker sorts below an entry, so a map that is a
// prefix of another sorts first, as Cassandra orders frozen maps.
const (
	mapEnd   = 0x01
	mapEntry = 0x02
)

// canonicalTags returns tags sorted by name bytes with duplicate names
// removed (the last one wins, as when binding a Go map), reusing scratch. A
// frozen map is one value whatever order it was bound in, so this is its
// only encoding.
func canonicalTags(scratch, tags []codec.Tag) []codec.Tag {
	scratch = append(scratch[:0], tags...)
	slices.SortStableFunc(scratch, func(a, b codec.Tag) int { return strings.Compare(a.Name, b.Name) })
	out := scratch[:0]
	for i, t := range scratch {
		if i+1 < len(scratch) && scratch[i+1].Name == t.Name {
			continue
		}
		out = append(out, t)
	}
	return out
}

// appendTags appends the frozen<map<text,text>> tags, which must be
// canonical. An empty map is allowed (a tagless row key).
func appendTags(dst []byte, tags []codec.Tag) []byte {
	for _, t := range tags {
		dst = append(dst, mapEntry)
		dst = appendEscaped(dst, t.Name)
		dst = appendEscaped(dst, t.Value)
	}
	return append(dst, mapEnd)
}

// decodeTags appends the tags encoded at the start of src to dst.
func decodeTags(dst []codec.Tag, src []byte) ([]codec.Tag, []byte, error) {
	for len(src) > 0 {
		switch src[0] {
		case mapEnd:
			return dst, src[1:], nil
		case mapEntry:
			name, rest, err := cutEscaped(src[1:])
			if err != nil {
				return nil, nil, err
			}
			value, rest, err := cutEscaped(rest)
			if err != nil {
				return nil, nil, err
			}
			dst = append(dst, codec.Tag{Name: string(name), Value: string(value)})
			src = rest
		default:
			return nil, nil, errCorrupt
		}
	}
	return nil, nil, errCorrupt
}

// Key layouts, one per table: prefix byte, partition key, clustering key.
// The constant table_name ('data_points') and spec_type ('cluster_config')
// columns are left out.

// data_points of layout kairosdb-1, read only by the conversion:
// d | key | column1 (4 bytes, unsigned order).

// data_points blocks: b | key | window (4 bytes, windowOf).
func appendBlockPrefix(dst, rowKey []byte) []byte {
	return appendEscaped(append(dst, tableBlock), rowKey)
}

func appendBlockKey(dst, rowKey []byte, window uint32) []byte {
	return binary.BigEndian.AppendUint32(appendBlockPrefix(dst, rowKey), window)
}

// data_points tombstones: D | key | lo | hi (inclusive column range).
func appendDataTombPrefix(dst, rowKey []byte) []byte {
	return appendEscaped(append(dst, tableDataTomb), rowKey)
}

func appendDataTombKey(dst, rowKey []byte, lo, hi uint32) []byte {
	dst = appendDataTombPrefix(dst, rowKey)
	dst = binary.BigEndian.AppendUint32(dst, lo)
	return binary.BigEndian.AppendUint32(dst, hi)
}

// row_key_index: i | metric | column1 (row key blob).
func appendLegacyPrefix(dst []byte, metric string) []byte {
	return appendEscaped(append(dst, tableLegacy), metric)
}

func appendLegacyKey(dst []byte, metric string, rowKey []byte) []byte {
	return appendEscaped(appendLegacyPrefix(dst, metric), rowKey)
}

// row_key_index partition tombstones: I | metric.
func appendLegacyTombKey(dst []byte, metric string) []byte {
	return appendEscaped(append(dst, tableLegacyTomb), metric)
}

// metricNamesKey is the string_index partition key KairosDB writes (§9.1).
const metricNamesKey = "metric_names"

// string_index: s | key | column1.
func appendStringsPrefix(dst []byte) []byte {
	return appendEscaped(append(dst, tableStrings), metricNamesKey)
}

func appendMetricNameKey(dst []byte, name string) []byte {
	return appendEscaped(appendStringsPrefix(dst), name)
}

// row_keys: r | metric | row_time | data_type | tags.
func appendRowKeysPrefix(dst []byte, metric string, rowTime int64) []byte {
	return appendInt64(appendEscaped(append(dst, tableRowKeys), metric), rowTime)
}

func appendRowKeysKey(dst []byte, metric string, rowTime int64, dataType string, tags []codec.Tag) []byte {
	dst = appendRowKeysPrefix(dst, metric, rowTime)
	return appendTags(appendEscaped(dst, dataType), tags)
}

// tag_indexed_row_keys: t | metric | row_time | single_tag_pair | data_type |
// tag_collection_hash | tags.
func appendTagIndexedPrefix(dst []byte, metric string, rowTime int64, pair string) []byte {
	dst = appendInt64(appendEscaped(append(dst, tableTagIndexed), metric), rowTime)
	return appendEscaped(dst, pair)
}

func appendTagIndexedKey(dst []byte, metric string, rowTime int64, pair, dataType string, hash int32, tags []codec.Tag) []byte {
	dst = appendTagIndexedPrefix(dst, metric, rowTime, pair)
	return appendTags(appendInt32(appendEscaped(dst, dataType), hash), tags)
}

// row_key_time_index: k | metric | row_time.
func appendRowTimesPrefix(dst []byte, metric string) []byte {
	return appendEscaped(append(dst, tableRowTimes), metric)
}

func appendRowTimesKey(dst []byte, metric string, rowTime int64) []byte {
	return appendInt64(appendRowTimesPrefix(dst, metric), rowTime)
}

// spec: p | name.
func appendSpecKey(dst []byte, name string) []byte {
	return appendEscaped(append(dst, tableSpec), name)
}

// service_index: v | service | service_key | key.
func appendServicePrefix(dst []byte, service, serviceKey string) []byte {
	return appendEscaped(appendEscaped(append(dst, tableService), service), serviceKey)
}

func appendServiceKey(dst []byte, service, serviceKey, key string) []byte {
	return appendEscaped(appendServicePrefix(dst, service, serviceKey), key)
}

// expiry index: x | expiry (unix seconds, 8 bytes) | key of the entry. The
// purge reads it from the start up to now instead of scanning every table.
func appendExpiryKey(dst []byte, expiry int64, key []byte) []byte {
	return append(binary.BigEndian.AppendUint64(append(dst, tableExpiry), uint64(expiry)), key...)
}

// prefixEnd returns the smallest key above every key starting with prefix,
// in a fresh slice (a shared prefix must never be appended to in place).
// prefix never consists of 0xff bytes only: it starts with a table byte.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for len(end) > 0 && end[len(end)-1] == 0xff {
		end = end[:len(end)-1]
	}
	end[len(end)-1]++
	return end
}
