package cql

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// RowTimes lists row_key_time_index row times (§7.3), ascending (the
// clustering order).
func (e *Engine) RowTimes(ctx context.Context, metric string, lo, hi int64, fn func(rowTime int64) error) error {
	return e.scan(ctx, "row_key_time_index", func(sc gocql.Scanner) error {
		// row_time is a timestamp; the driver scans it into int64 as ms (§12 item 12).
		var t int64
		if err := sc.Scan(&t); err != nil {
			return scanErr(err)
		}
		return fn(t)
	}, selectRowTimes, metric, dataPointsTable, lo, hi)
}

// RowKeys lists the row_keys entries of (metric, rowTime) (§7.4).
func (e *Engine) RowKeys(ctx context.Context, metric string, rowTime int64, fn func(dataType string, tags []codec.Tag) error) error {
	return e.scanRowKeys(ctx, "row_keys", fn, selectRowKeys, metric, dataPointsTable, rowTime)
}

// TagIndexedRowKeys lists the tag_indexed_row_keys entries of one pair (§6.3).
func (e *Engine) TagIndexedRowKeys(ctx context.Context, metric string, rowTime int64, pair string, fn func(dataType string, tags []codec.Tag) error) error {
	return e.scanRowKeys(ctx, "tag_indexed_row_keys", fn, selectTagIndexed, metric, dataPointsTable, rowTime, pair)
}

func (e *Engine) scanRowKeys(ctx context.Context, table string, fn func(string, []codec.Tag) error, stmt string, args ...any) error {
	var (
		tags          []codec.Tag // reused: callbacks may not keep it
		dataType, raw rawBytes
	)
	dest := []any{&dataType, &raw}
	return e.scan(ctx, table, func(sc gocql.Scanner) error {
		if err := sc.Scan(dest...); err != nil {
			return scanErr(err)
		}
		// A partition holding only the static mtime comes back as one row
		// with null clustering columns (§7.4).
		if dataType == nil {
			return nil
		}
		var err error
		if tags, err = parseTagMap(tags[:0], raw); err != nil {
			return fmt.Errorf("cassandra: %s tags: %w", table, err)
		}
		return fn(aliasString(dataType), tags)
	}, stmt, args...)
}

// parseTagMap appends to dst the entries of a serialized map<text, text>
// (CQL native protocol v4+: a 4-byte count, then each key and value as a
// 4-byte length and its bytes). The strings alias src. Letting the driver
// build a Go map instead cost allocations per entry, most of the adapter's
// CPU when it lists a partition of a million row_keys entries to find one
// series (BENCHMARKS.md, "Load tool figures").
func parseTagMap(dst []codec.Tag, src []byte) ([]codec.Tag, error) {
	if src == nil {
		return dst, nil // Cassandra returns an empty map as null: no tags
	}
	next := func() (string, error) {
		if len(src) < 4 {
			return "", errors.New("truncated map")
		}
		n := int32(binary.BigEndian.Uint32(src))
		src = src[4:]
		if n < 0 || int(n) > len(src) {
			return "", fmt.Errorf("map element of %d bytes in %d", n, len(src))
		}
		s := aliasString(src[:n])
		src = src[n:]
		return s, nil
	}
	if len(src) < 4 {
		return dst, errors.New("truncated map")
	}
	n := int32(binary.BigEndian.Uint32(src))
	src = src[4:]
	if n < 0 || int(n) > len(src)/8 {
		return dst, fmt.Errorf("map of %d entries in %d bytes", n, len(src))
	}
	for range n {
		k, err := next()
		if err != nil {
			return dst, err
		}
		v, err := next()
		if err != nil {
			return dst, err
		}
		dst = append(dst, codec.Tag{Name: k, Value: v})
	}
	if len(src) != 0 {
		return dst, fmt.Errorf("%d bytes after the map", len(src))
	}
	return dst, nil
}

// aliasString is b as a string without a copy; valid while b is.
func aliasString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// RowKeyExists reads one row_keys entry by its whole primary key (§5.3).
func (e *Engine) RowKeyExists(ctx context.Context, metric string, rowTime int64, dataType string, tags []codec.Tag) (bool, error) {
	_, ok, err := e.scanOne(ctx, "row_keys", selectRowKey, metric, dataPointsTable, rowTime, dataType, tagMap(tags))
	return ok, err
}

// maxIn is the most entries one RowKeysExist statement asks for: the
// index checks at most 256 candidates of a partition (index.maxVerify), so
// two statements at most, and a coordinator is never asked for thousands
// of clustering keys at once.
const maxIn = 128

// RowKeysExist reports which of the row_keys entries (metric, rowTime,
// dataType, tags[i]) are stored, in one statement per maxIn entries: the
// index checks a partition's cached candidates with it, where a
// RowKeyExists each was a round trip per series (BENCHMARKS.md, "Issue
// #30 on Cassandra: round trips"). Tags may come in any order.
func (e *Engine) RowKeysExist(ctx context.Context, metric string, rowTime int64, dataType string, tags [][]codec.Tag) ([]bool, error) {
	exists := make([]bool, len(tags))
	at := make(map[string][]int, len(tags)) // canonical tags -> positions asked
	var buf, parsed []codec.Tag
	for lo := 0; lo < len(tags); lo += maxIn {
		hi := min(lo+maxIn, len(tags))
		maps := make([]map[string]string, 0, hi-lo)
		clear(at)
		for i := lo; i < hi; i++ {
			k := canonicalTags(&buf, tags[i])
			if len(at[k]) == 0 {
				maps = append(maps, tagMap(tags[i]))
			}
			at[k] = append(at[k], i)
		}
		var raw rawBytes
		err := e.scan(ctx, "row_keys", func(sc gocql.Scanner) error {
			if err := sc.Scan(&raw); err != nil {
				return scanErr(err)
			}
			var err error
			if parsed, err = parseTagMap(parsed[:0], raw); err != nil {
				return fmt.Errorf("cassandra: row_keys tags: %w", err)
			}
			for _, i := range at[canonicalTags(&buf, parsed)] {
				exists[i] = true
			}
			return nil
		}, selectRowKeysIn, metric, dataPointsTable, rowTime, dataType, maps)
		if err != nil {
			return nil, err
		}
	}
	return exists, nil
}

// canonicalTags is tags as a string that does not depend on their order,
// for matching the entries a statement returns to those asked for. buf is
// scratch.
func canonicalTags(buf *[]codec.Tag, tags []codec.Tag) string {
	*buf = append((*buf)[:0], tags...)
	slices.SortFunc(*buf, func(a, b codec.Tag) int { return strings.Compare(a.Name, b.Name) })
	var b strings.Builder
	for _, t := range *buf {
		b.WriteString(strconv.Itoa(len(t.Name)))
		b.WriteByte(':')
		b.WriteString(t.Name)
		b.WriteString(strconv.Itoa(len(t.Value)))
		b.WriteByte(':')
		b.WriteString(t.Value)
	}
	return b.String()
}

// LegacyRowKeys lists row_key_index column1 values with lo <= column1 < hi
// (§7.2).
func (e *Engine) LegacyRowKeys(ctx context.Context, metric string, lo, hi []byte, fn func(rowKey []byte) error) error {
	if bytes.Compare(lo, hi) >= 0 {
		return nil
	}
	return e.scan(ctx, "row_key_index", func(sc gocql.Scanner) error {
		var key []byte
		if err := sc.Scan(&key); err != nil {
			return scanErr(err)
		}
		return fn(key)
	}, selectLegacyKeys, []byte(metric), lo, hi)
}

// Cells lists the data_points cells of rowKey with lo <= column1 < hi (§7.5).
// The caller always passes a real bound: column 0xffffffff cannot be
// reached, which no row width below 2^31 ms needs (§3.2).
func (e *Engine) Cells(ctx context.Context, rowKey []byte, lo, hi uint32, fn func(column uint32, value []byte) error) error {
	if lo >= hi {
		return nil
	}
	// The cells are scanned without a copy or an allocation: col and value
	// alias the driver's frame buffer until the next row, which the Engine
	// contract allows (callbacks copy what they keep). Scanning into
	// fresh []byte instead cost allocations per cell and about half of the
	// adapter's CPU in a remote read (BENCHMARKS.md, BenchmarkCells).
	var col, value rawBytes
	dest := []any{&col, &value}
	return e.scan(ctx, "data_points", func(sc gocql.Scanner) error {
		if err := sc.Scan(dest...); err != nil {
			return scanErr(err)
		}
		if len(col) != 4 {
			return fmt.Errorf("cassandra: data_points column1 of %d bytes, want 4 (§3.2)", len(col))
		}
		return fn(binary.BigEndian.Uint32(col), value)
	}, selectCells, rowKey, column(lo), column(hi))
}

// CellsOfKeys is Cells of several rows with the same bounds in one
// statement (key IN ?): one request where a row each is one per row, and
// the node's cost of a read is mostly the request's, not its cells'. fn
// gets the index in keys of each cell's row; the rows may come in any
// order, the cells of a row in column order.
func (e *Engine) CellsOfKeys(ctx context.Context, keys [][]byte, lo, hi uint32, fn func(row int, column uint32, value []byte) error) error {
	if lo >= hi || len(keys) == 0 {
		return nil
	}
	return e.scanKeys(ctx, keys, fn, selectCellsIn, keys, column(lo), column(hi))
}

// MaxColumnsIn and MaxKeysIn bound one CellsOfColumns statement: its
// columns and rows, whose product a coordinator looks up one by one.
const (
	MaxColumnsIn = 1024
	MaxKeysIn    = 64
)

// CellsOfColumns is the cells of columns cols (ascending, no two equal) of
// each row of keys, in one statement (key IN ? AND column1 IN ?): where a
// read needs only some buckets of a row, the node reads and sends those
// instead of every cell of a slice. fn is called as by CellsOfKeys.
func (e *Engine) CellsOfColumns(ctx context.Context, keys [][]byte, cols []uint32, fn func(row int, column uint32, value []byte) error) error {
	if len(keys) == 0 || len(cols) == 0 {
		return nil
	}
	if len(cols) > MaxColumnsIn || len(keys) > MaxKeysIn {
		return fmt.Errorf("cassandra: a read of %d columns of %d rows, at most %d of %d", len(cols), len(keys), MaxColumnsIn, MaxKeysIn)
	}
	bound := make([][]byte, len(cols))
	buf := make([]byte, 0, 4*len(cols))
	for i, c := range cols {
		buf = binary.BigEndian.AppendUint32(buf, c)
		bound[i] = buf[4*i : 4*i+4 : 4*i+4]
	}
	return e.scanKeys(ctx, keys, fn, selectColumnsIn, keys, bound)
}

// scanKeys runs a data_points read of key, column1, value over keys and
// calls fn with each cell's row in keys.
func (e *Engine) scanKeys(ctx context.Context, keys [][]byte, fn func(row int, column uint32, value []byte) error, stmt string, args ...any) error {
	var key, col, value rawBytes
	dest := []any{&key, &col, &value}
	row := 0
	return e.scan(ctx, "data_points", func(sc gocql.Scanner) error {
		if err := sc.Scan(dest...); err != nil {
			return scanErr(err)
		}
		if len(col) != 4 {
			return fmt.Errorf("cassandra: data_points column1 of %d bytes, want 4 (§3.2)", len(col))
		}
		// A row's cells come together: the last row matched is checked first.
		if !bytes.Equal(keys[row], key) {
			row = slices.IndexFunc(keys, func(k []byte) bool { return bytes.Equal(k, key) })
			if row < 0 {
				return fmt.Errorf("cassandra: data_points row %x not asked for", []byte(key))
			}
		}
		return fn(row, binary.BigEndian.Uint32(col), value)
	}, stmt, args...)
}

// FirstCell is the first column of rowKey with lo <= column1 < hi.
func (e *Engine) FirstCell(ctx context.Context, rowKey []byte, lo, hi uint32) (uint32, bool, error) {
	var first uint32
	found := false
	if lo >= hi {
		return 0, false, nil
	}
	err := e.scan(ctx, "data_points", func(sc gocql.Scanner) error {
		var col rawBytes
		if err := sc.Scan(&col); err != nil {
			return scanErr(err)
		}
		if len(col) != 4 {
			return fmt.Errorf("cassandra: data_points column1 of %d bytes, want 4 (§3.2)", len(col))
		}
		first, found = binary.BigEndian.Uint32(col), true
		return nil
	}, selectFirstCell, rowKey, column(lo), column(hi))
	return first, found, err
}

// MetricNames lists string_index['metric_names'] (§9.1) in UTF-8 byte
// order, Cassandra's order for text clustering columns.
func (e *Engine) MetricNames(ctx context.Context, fn func(name string) error) error {
	return e.scan(ctx, "string_index", func(sc gocql.Scanner) error {
		var name string
		if err := sc.Scan(&name); err != nil {
			return scanErr(err)
		}
		return fn(name)
	}, selectNames, []byte(metricNames))
}

// Spec reads spec(spec_type='cluster_config', name) at the read consistency,
// the session default KairosDB uses (§3.3).
func (e *Engine) Spec(ctx context.Context, name string) (string, bool, error) {
	return e.scanOne(ctx, "spec", selectSpec, specType, name)
}

// SetSpec writes spec(spec_type='cluster_config', name) = value at the read
// consistency, with a millisecond timestamp (§3.3).
func (e *Engine) SetSpec(ctx context.Context, name, value string, writeTime int64) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	err = s.Query(insertSpec, specType, name, value).
		Consistency(e.set.read).WithTimestamp(writeTime).Idempotent(true).ExecContext(ctx)
	if err != nil {
		return fmt.Errorf("cassandra: write spec %q: %w", name, classify(err))
	}
	return nil
}

// SetServiceValue writes one service_index row and refreshes the static mtime
// (§9.2) at the write consistency.
func (e *Engine) SetServiceValue(ctx context.Context, service, serviceKey, key, value string, writeTime int64) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	err = s.Query(insertService, service, serviceKey, key, value).
		Consistency(e.set.write).WithTimestamp(writeTime).Idempotent(true).ExecContext(ctx)
	if err != nil {
		return fmt.Errorf("cassandra: write service_index: %w", classify(err))
	}
	return nil
}

// DeleteServiceValue removes one service_index row (§9.2) at the write
// consistency.
func (e *Engine) DeleteServiceValue(ctx context.Context, service, serviceKey, key string, writeTime int64) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	err = s.Query(deleteService, service, serviceKey, key).
		Consistency(e.set.write).WithTimestamp(writeTime).Idempotent(true).ExecContext(ctx)
	if err != nil {
		return fmt.Errorf("cassandra: delete service_index: %w", classify(err))
	}
	return nil
}

// ServiceValue reads one service_index value (§9.2).
func (e *Engine) ServiceValue(ctx context.Context, service, serviceKey, key string) (string, bool, error) {
	return e.scanOne(ctx, "service_index", selectService, service, serviceKey, key)
}

// ServiceKeys lists the keys of (service, serviceKey) starting with prefix,
// ascending. The prefix range is KairosDB's: key < prefix + U+FFFF (§9.2),
// which misses keys continuing with a supplementary-plane character.
func (e *Engine) ServiceKeys(ctx context.Context, service, serviceKey, prefix string, fn func(key string) error) error {
	stmt, args := selectServiceKeys, []any{service, serviceKey}
	if prefix != "" {
		stmt, args = selectServiceRange, append(args, prefix, prefix+"\uffff")
	}
	return e.scan(ctx, "service_index", func(sc gocql.Scanner) error {
		var key *string
		if err := sc.Scan(&key); err != nil {
			return scanErr(err)
		}
		if key == nil { // static-only partition (§9.2)
			return nil
		}
		return fn(*key)
	}, stmt, args...)
}

// scan pages through a read at the read consistency, calling row for each
// row. It always closes the iterator and returns the first error: row's as
// it is, the iterator's wrapped.
func (e *Engine) scan(ctx context.Context, table string, row func(gocql.Scanner) error, stmt string, args ...any) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	e.countRead(table)
	sc := e.read(s, stmt, args...).IterContext(ctx).Scanner()
	for sc.Next() {
		if err := row(sc); err != nil {
			_ = sc.Err() // close; the row's error wins
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("cassandra: read %s: %w", table, classify(err))
	}
	return nil
}

// scanOne reads a single text value; a missing row or a null value is !ok.
func (e *Engine) scanOne(ctx context.Context, table, stmt string, args ...any) (string, bool, error) {
	s, err := e.session()
	if err != nil {
		return "", false, err
	}
	var v *string
	e.countRead(table)
	err = e.read(s, stmt, args...).ScanContext(ctx, &v)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("cassandra: read %s: %w", table, classify(err))
	case v == nil:
		return "", false, nil
	}
	return *v, true, nil
}

// countRead counts one read statement of table.
func (e *Engine) countRead(table string) {
	if e.reads != nil {
		e.reads.WithLabelValues(table).Inc()
	}
}

func (e *Engine) read(s *gocql.Session, stmt string, args ...any) *gocql.Query {
	return s.Query(stmt, args...).Consistency(e.set.read).PageSize(e.set.pageSize).Idempotent(true)
}

// rawBytes is a scan target that keeps a column's bytes as the driver read
// them: no copy, valid only until the scanner moves to the next row. A null
// column comes as nil.
type rawBytes []byte

// UnmarshalCQL implements gocql.Unmarshaler.
func (r *rawBytes) UnmarshalCQL(_ gocql.TypeInfo, data []byte) error {
	*r = data
	return nil
}

// scanErr wraps an error of the driver's Scan; callbacks' errors are
// returned as they are.
func scanErr(err error) error { return fmt.Errorf("cassandra: scan row: %w", err) }

// column is the 4-byte big-endian column1 of §3.2.
func column(c uint32) []byte {
	return binary.BigEndian.AppendUint32(make([]byte, 0, 4), c)
}

// blob keeps an empty value non-null: the driver sends a nil []byte as null,
// KairosDB writes the `null` type's empty value as 0 bytes (§4.6).
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// tagMap converts tags for the frozen map columns. It is never nil: the
// driver sends a nil map as null, which Cassandra rejects for the tags
// clustering column, while an empty map is a valid value for a tagless
// series.
func tagMap(tags []codec.Tag) map[string]string {
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[t.Name] = t.Value
	}
	return m
}

// rowPart identifies an index partition of (metric, row_time[, pair]) for
// grouping; prefix names the table.
func rowPart(prefix, metric string, rowTime int64, pair string) string {
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], uint64(rowTime))
	return prefix + metric + "\x00" + string(t[:]) + pair
}
