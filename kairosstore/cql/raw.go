package cql

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

var _ engine.Raw = (*Engine)(nil)

// maxTTL is the largest TTL Cassandra takes, in seconds (20 years).
const maxTTL = 630720000

// Raw scans walk a whole table in token order (WHERE token(pk) >= ?), paged
// by the driver; a resume position is the 8-byte token of a partition,
// handed out with its first row. Write times and TTLs come from
// WRITETIME() and TTL() of the value column. row_keys, tag_indexed_row_keys
// and row_key_time_index rows have no regular column KairosDB sets, and
// Cassandra reads neither function on a primary key column, so theirs are
// those of the partition's static mtime (row_keys, tag_indexed_row_keys), or
// of the matching row_keys partition (row_key_time_index): the newest
// write to the partition and its TTL, which may be later and longer than the
// row's own.
const (
	rawDataPoints  = `SELECT token(key), key, column1, value, WRITETIME(value), TTL(value) FROM data_points WHERE token(key) >= ?`
	rawRowKeyIndex = `SELECT token(key), key, column1, WRITETIME(value), TTL(value) FROM row_key_index WHERE token(key) >= ?`
	rawRowKeys     = `SELECT token(metric, table_name, row_time), metric, table_name, row_time, data_type, tags, WRITETIME(mtime), TTL(mtime) FROM row_keys WHERE token(metric, table_name, row_time) >= ?`
	rawTagIndexed  = `SELECT token(metric, table_name, row_time, single_tag_pair), metric, table_name, row_time, single_tag_pair, data_type, tag_collection_hash, tags, WRITETIME(mtime), TTL(mtime) FROM tag_indexed_row_keys WHERE token(metric, table_name, row_time, single_tag_pair) >= ?`
	rawRowTimes    = `SELECT token(metric), metric, table_name, row_time FROM row_key_time_index WHERE token(metric) >= ?`
	rawRowKeysTime = `SELECT WRITETIME(mtime), TTL(mtime) FROM row_keys WHERE metric = ? AND table_name = ? AND row_time = ? LIMIT 1`
	rawStringIndex = `SELECT token(key), key, column1, WRITETIME(value), TTL(value) FROM string_index WHERE token(key) >= ?`
	rawSpec        = `SELECT token(spec_type), spec_type, name, value, WRITETIME(value), TTL(value) FROM spec WHERE token(spec_type) >= ?`
	rawService     = `SELECT token(service, service_key), service, service_key, key, value, WRITETIME(value), TTL(value) FROM service_index WHERE token(service, service_key) >= ?`
)

// Raw loads: KairosDB's inserts with the write time bound per statement.
const (
	rawInsertDataPoint = insertDataPoint
	rawInsertLegacy    = `INSERT INTO row_key_index (key, column1, value) VALUES (?, ?, 0x00) USING TTL ? AND TIMESTAMP ?`
	rawInsertRowKey    = `INSERT INTO row_keys (metric, table_name, row_time, data_type, tags, mtime) VALUES (?, ?, ?, ?, ?, now()) USING TTL ? AND TIMESTAMP ?`
	rawInsertTagIndex  = `INSERT INTO tag_indexed_row_keys (metric, table_name, row_time, data_type, single_tag_pair, tag_collection_hash, tags, mtime) VALUES (?, ?, ?, ?, ?, ?, ?, now()) USING TTL ? AND TIMESTAMP ?`
	rawInsertRowTime   = `INSERT INTO row_key_time_index (metric, table_name, row_time) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	rawInsertString    = `INSERT INTO string_index (key, column1, value) VALUES (?, ?, 0x00) USING TTL ? AND TIMESTAMP ?`
	rawInsertSpec      = `INSERT INTO spec (spec_type, name, value) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	rawInsertService   = `INSERT INTO service_index (service, service_key, key, value, mtime) VALUES (?, ?, ?, ?, now()) USING TTL ? AND TIMESTAMP ?`
)

// ScanRaw reads every row of table in token order from the token in from.
func (e *Engine) ScanRaw(ctx context.Context, table engine.Table, from []byte, fn func(r *engine.Row, resume []byte) error) error {
	tok := int64(math.MinInt64)
	if len(from) > 0 {
		if len(from) != 8 {
			return fmt.Errorf("cassandra: resume position %x is not a token", from)
		}
		tok = int64(binary.BigEndian.Uint64(from))
	}
	var stmt string
	switch table {
	case engine.DataPoints:
		stmt = rawDataPoints
	case engine.RowKeyIndex:
		stmt = rawRowKeyIndex
	case engine.RowKeys:
		stmt = rawRowKeys
	case engine.TagIndexedRowKeys:
		stmt = rawTagIndexed
	case engine.RowKeyTimeIndex:
		stmt = rawRowTimes
	case engine.StringIndex:
		stmt = rawStringIndex
	case engine.Spec:
		stmt = rawSpec
	case engine.ServiceIndex:
		stmt = rawService
	default:
		return fmt.Errorf("cassandra: no table %d", table)
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	r := &engine.Row{Table: table}
	var (
		token, last int64
		first       = true
		wt          *int64
		ttl         *int32
		key, col    rawBytes
		value       rawBytes
		text        [4]*string
		rowTime     int64
		hash        int32
		raw         rawBytes
		resume      [8]byte
	)
	var dest []any
	switch table {
	case engine.DataPoints:
		dest = []any{&token, &key, &col, &value, &wt, &ttl}
	case engine.RowKeyIndex, engine.StringIndex:
		dest = []any{&token, &key, &text[0], &wt, &ttl}
		if table == engine.RowKeyIndex {
			dest[2] = &col
		}
	case engine.RowKeys:
		dest = []any{&token, &text[0], &text[1], &rowTime, &text[2], &raw, &wt, &ttl}
	case engine.TagIndexedRowKeys:
		dest = []any{&token, &text[0], &text[1], &rowTime, &text[3], &text[2], &hash, &raw, &wt, &ttl}
	case engine.RowKeyTimeIndex:
		dest = []any{&token, &text[0], &text[1], &rowTime}
	case engine.Spec:
		dest = []any{&token, &text[0], &text[1], &text[2], &wt, &ttl}
	case engine.ServiceIndex:
		dest = []any{&token, &text[0], &text[1], &text[2], &text[3], &wt, &ttl}
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	return e.scan(ctx, table.String(), func(sc gocql.Scanner) error {
		clear(text[:])
		wt, ttl, value = nil, nil, nil
		if err := sc.Scan(dest...); err != nil {
			return scanErr(err)
		}
		var pos []byte
		if first || token != last {
			binary.BigEndian.PutUint64(resume[:], uint64(token))
			pos = resume[:]
			first, last = false, token
		}
		switch table {
		case engine.DataPoints:
			if len(col) != 4 {
				return fmt.Errorf("cassandra: data_points column1 of %d bytes, want 4 (§3.2)", len(col))
			}
			r.Cell = engine.Cell{Key: key, Column: binary.BigEndian.Uint32(col), Value: value}
		case engine.RowKeyIndex:
			r.Legacy = engine.LegacyRowKey{Metric: aliasString(key), RowKey: col}
		case engine.StringIndex:
			if string(key) != metricNames || text[0] == nil {
				return nil
			}
			r.Name = *text[0]
		case engine.RowKeys, engine.TagIndexedRowKeys, engine.RowKeyTimeIndex:
			if str(text[1]) != dataPointsTable {
				return nil // KairosDB writes no other table_name
			}
			if table != engine.RowKeyTimeIndex && text[2] == nil {
				return nil // a partition holding only its static mtime (§7.4)
			}
			ix := engine.TagIndexedRowKey{Pair: str(text[3]), Hash: hash}
			ix.Metric, ix.RowTime, ix.DataType = str(text[0]), rowTime, str(text[2])
			if table != engine.RowKeyTimeIndex {
				var err error
				if ix.Tags, err = parseTagMap(r.Index.Tags[:0], raw); err != nil {
					return fmt.Errorf("cassandra: %s tags: %w", table, err)
				}
			} else {
				var err error
				if wt, ttl, err = e.rowKeysWriteTime(ctx, s, ix.Metric, rowTime); err != nil {
					return err
				}
			}
			r.Index = ix
		case engine.Spec:
			if str(text[0]) != specType {
				return nil
			}
			r.Name, r.Value = str(text[1]), []byte(str(text[2]))
		case engine.ServiceIndex:
			if text[2] == nil || text[3] == nil {
				return nil // static-only partition, or a row without value
			}
			r.Service, r.ServiceKey, r.Name, r.Value = str(text[0]), str(text[1]), *text[2], []byte(*text[3])
		}
		r.WriteTime, r.TTL = time.Now().UnixMilli(), 0
		if wt != nil {
			r.WriteTime = *wt
		}
		if ttl != nil {
			r.TTL = *ttl
		}
		return fn(r, pos)
	}, stmt, tok)
}

// rowKeysWriteTime is the write time and TTL of the static mtime of the
// row_keys partition (metric, rowTime): row_key_time_index rows have no
// cell of their own to read them from. Nil when the partition is gone.
func (e *Engine) rowKeysWriteTime(ctx context.Context, s *gocql.Session, metric string, rowTime int64) (*int64, *int32, error) {
	var wt *int64
	var ttl *int32
	err := e.read(s, rawRowKeysTime, metric, dataPointsTable, rowTime).ScanContext(ctx, &wt, &ttl)
	if err != nil && !errors.Is(err, gocql.ErrNotFound) {
		return nil, nil, fmt.Errorf("cassandra: read row_keys: %w", classify(err))
	}
	return wt, ttl, nil
}

// LoadRaw writes rows with KairosDB's inserts, each with its own write
// time and TTL, grouped by partition as Write groups its statements, at
// the write consistency.
func (e *Engine) LoadRaw(ctx context.Context, rows []engine.Row) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	stmts := make([]stmt, 0, len(rows))
	newest := int64(math.MinInt64)
	for i := range rows {
		r := &rows[i]
		if r.TTL < 0 || r.TTL > maxTTL {
			return fmt.Errorf("cassandra: %s row with ttl %d, out of range [0, %d]", r.Table, r.TTL, maxTTL)
		}
		newest = max(newest, r.WriteTime)
		var st stmt
		switch r.Table {
		case engine.DataPoints:
			st = stmt{cql: rawInsertDataPoint, args: []any{r.Cell.Key, column(r.Cell.Column), blob(r.Cell.Value), r.TTL, r.WriteTime}, part: "d" + string(r.Cell.Key)}
		case engine.RowKeyIndex:
			st = stmt{cql: rawInsertLegacy, args: []any{[]byte(r.Legacy.Metric), r.Legacy.RowKey, r.TTL, r.WriteTime}, part: "l" + r.Legacy.Metric}
		case engine.RowKeys:
			ix := &r.Index
			st = stmt{cql: rawInsertRowKey, args: []any{ix.Metric, dataPointsTable, ix.RowTime, ix.DataType, tagMap(ix.Tags), r.TTL, r.WriteTime}, part: rowPart("r", ix.Metric, ix.RowTime, "")}
		case engine.TagIndexedRowKeys:
			ix := &r.Index
			st = stmt{cql: rawInsertTagIndex, args: []any{ix.Metric, dataPointsTable, ix.RowTime, ix.DataType, ix.Pair, ix.Hash, tagMap(ix.Tags), r.TTL, r.WriteTime}, part: rowPart("t", ix.Metric, ix.RowTime, ix.Pair)}
		case engine.RowKeyTimeIndex:
			st = stmt{cql: rawInsertRowTime, args: []any{r.Index.Metric, dataPointsTable, r.Index.RowTime, r.TTL, r.WriteTime}, part: "i" + r.Index.Metric}
		case engine.StringIndex:
			st = stmt{cql: rawInsertString, args: []any{[]byte(metricNames), r.Name, r.TTL, r.WriteTime}, part: "s"}
		case engine.Spec:
			st = stmt{cql: rawInsertSpec, args: []any{specType, r.Name, string(r.Value), r.TTL, r.WriteTime}, part: "p"}
		case engine.ServiceIndex:
			st = stmt{cql: rawInsertService, args: []any{r.Service, r.ServiceKey, r.Name, string(r.Value), r.TTL, r.WriteTime}, part: "v" + r.Service + "\x00" + r.ServiceKey}
		default:
			return fmt.Errorf("cassandra: no table %d", r.Table)
		}
		stmts = append(stmts, st)
	}
	return e.run(ctx, s, e.group(stmts), call{cons: e.set.write, ts: newest}, "load")
}

// ScanFraction is the share of the token ring before pos, a resume position
// of ScanRaw: Murmur3 spreads partitions evenly over it, so it estimates
// the share of a table read, for a copy's progress report.
func (e *Engine) ScanFraction(_ engine.Table, pos []byte) float64 {
	if len(pos) != 8 {
		return 0
	}
	tok := int64(binary.BigEndian.Uint64(pos))
	return (float64(tok) + math.Pow(2, 63)) / math.Pow(2, 64)
}
