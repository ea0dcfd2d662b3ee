package pebblekv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

var _ engine.Raw = (*Engine)(nil)

// tablePrefix is the key prefix byte of each table (keys.go).
func tablePrefix(t engine.Table) (byte, error) {
	switch t {
	case engine.DataPoints:
		return tableBlock, nil
	case engine.RowKeyIndex:
		return tableLegacy, nil
	case engine.RowKeys:
		return tableRowKeys, nil
	case engine.TagIndexedRowKeys:
		return tableTagIndexed, nil
	case engine.RowKeyTimeIndex:
		return tableRowTimes, nil
	case engine.StringIndex:
		return tableStrings, nil
	case engine.Spec:
		return tableSpec, nil
	case engine.ServiceIndex:
		return tableService, nil
	}
	return 0, fmt.Errorf("pebblekv: no table %d", t)
}

// remaining is the TTL left at now of an entry expiring at expiry (unix
// seconds, 0 never). Both are whole seconds, so the copy's expiry is the
// source's to the second, less the time the copy took to load it.
func remaining(expiry, now int64) int32 {
	if expiry == 0 {
		return 0
	}
	return int32(min(expiry-now, maxTTL))
}

// ScanRaw walks the keys of table in key order from from (a key it handed
// out as resume) on. Every key is a resume position; in data_points, whose
// keys are blocks, the first cell of each block carries its key.
func (e *Engine) ScanRaw(ctx context.Context, table engine.Table, from []byte, fn func(r *engine.Row, resume []byte) error) (err error) {
	if err := e.usable(ctx); err != nil {
		return err
	}
	prefix, err := tablePrefix(table)
	if err != nil {
		return err
	}
	if err := e.drainHead(); err != nil {
		return err
	}
	lower, upper := []byte{prefix}, []byte{prefix + 1}
	if len(from) > 0 {
		if from[0] != prefix {
			return fmt.Errorf("pebblekv: resume position %x is not in table %s", from, table)
		}
		lower = from
	}
	it, err := e.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	now := e.now().Unix()
	r := &engine.Row{Table: table}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		key := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if table == engine.DataPoints {
			if err := e.scanBlock(key, v, now, r, fn); err != nil {
				return err
			}
			continue
		}
		ent, err := decodeEntry(v)
		if err != nil {
			return fmt.Errorf("%w: key %x", err, key)
		}
		if !ent.visible(now) {
			continue
		}
		if err := decodeRawKey(r, key[1:]); err != nil {
			return fmt.Errorf("%w: %s key %x", err, table, key)
		}
		r.WriteTime, r.TTL = ent.writeTime, remaining(ent.expiry, now)
		if table == engine.Spec || table == engine.ServiceIndex {
			r.Value = ent.value
		}
		if err := fn(r, key); err != nil {
			return err
		}
	}
	return it.Error()
}

// scanBlock hands out the live cells of one data_points block.
func (e *Engine) scanBlock(key, block []byte, now int64, r *engine.Row, fn func(*engine.Row, []byte) error) error {
	rowKey, rest, err := cutEscaped(key[1:])
	if err != nil || len(rest) != 4 {
		return fmt.Errorf("%w: data_points block key %x", errCorrupt, key)
	}
	br, err := cellblock.NewReader(block)
	if err != nil {
		return fmt.Errorf("pebblekv: data_points block %s: %w", describeBlockKey(key), err)
	}
	resume := key
	for br.Next() {
		c := br.Cell()
		if cellExpired(&c, now) {
			continue
		}
		r.Cell = engine.Cell{Key: rowKey, Column: c.Column, Value: c.Value}
		r.WriteTime, r.TTL = c.WriteTime, remaining(c.Expiry, now)
		if err := fn(r, resume); err != nil {
			return err
		}
		resume = nil
	}
	if err := br.Err(); err != nil {
		return fmt.Errorf("pebblekv: data_points block %s: %w", describeBlockKey(key), err)
	}
	return nil
}

// decodeRawKey fills r from the key of an entry of r.Table, prefix byte cut.
func decodeRawKey(r *engine.Row, k []byte) error {
	comp := func() (string, error) {
		c, rest, err := cutEscaped(k)
		k = rest
		return string(c), err
	}
	int64At := func() (int64, error) {
		if len(k) < 8 {
			return 0, errCorrupt
		}
		v := decodeInt64(k[:8])
		k = k[8:]
		return v, nil
	}
	var err error
	switch r.Table {
	case engine.RowKeyIndex:
		var metric, rowKey string
		if metric, err = comp(); err == nil {
			rowKey, err = comp()
		}
		r.Legacy = engine.LegacyRowKey{Metric: metric, RowKey: []byte(rowKey)}
	case engine.RowKeys, engine.TagIndexedRowKeys, engine.RowKeyTimeIndex:
		var ix engine.TagIndexedRowKey
		if ix.Metric, err = comp(); err != nil {
			return err
		}
		if ix.RowTime, err = int64At(); err != nil || r.Table == engine.RowKeyTimeIndex {
			r.Index = ix
			return err
		}
		if r.Table == engine.TagIndexedRowKeys {
			if ix.Pair, err = comp(); err != nil {
				return err
			}
		}
		if ix.DataType, err = comp(); err != nil {
			return err
		}
		if r.Table == engine.TagIndexedRowKeys {
			if len(k) < 4 {
				return errCorrupt
			}
			ix.Hash = int32(binary.BigEndian.Uint32(k) ^ (1 << 31))
			k = k[4:]
		}
		var tags []codec.Tag
		if tags, k, err = decodeTags(r.Index.Tags[:0], k); err != nil {
			return err
		}
		ix.Tags = tags
		r.Index = ix
	case engine.StringIndex:
		var key string
		if key, err = comp(); err == nil && key != metricNamesKey {
			err = errCorrupt
		}
		if err == nil {
			r.Name, err = comp()
		}
	case engine.Spec:
		r.Name, err = comp()
	case engine.ServiceIndex:
		if r.Service, err = comp(); err == nil {
			if r.ServiceKey, err = comp(); err == nil {
				r.Name, err = comp()
			}
		}
	}
	if err == nil && len(k) != 0 {
		err = errCorrupt
	}
	return err
}

// LoadRaw writes rows in one transaction, each entry with its own write time
// and an expiry of now plus its TTL, reconciled with the stored entries as
// Write reconciles them.
func (e *Engine) LoadRaw(ctx context.Context, rows []engine.Row) error {
	if len(rows) == 0 {
		return e.usable(ctx)
	}
	newest := int64(math.MinInt64)
	for i := range rows {
		if ttl := rows[i].TTL; ttl < 0 || ttl > maxTTL {
			return fmt.Errorf("pebblekv: %s row with ttl %d, out of range [0, %d]", rows[i].Table, ttl, maxTTL)
		}
		newest = max(newest, rows[i].WriteTime)
	}
	return e.update(ctx, newest, func(t *txn) error {
		for i := range rows {
			r := &rows[i]
			ent := entry{writeTime: r.WriteTime, expiry: t.expiry(r.TTL)}
			lookup := r.WriteTime <= t.e.highWater
			var err error
			switch r.Table {
			case engine.DataPoints:
				err = t.putCellAt(&r.Cell, r.WriteTime, ent.expiry)
			case engine.RowKeyIndex:
				ent.value = []byte{0}
				err = t.putLegacyRowKeyAt(r.Legacy, ent)
			case engine.RowKeys:
				t.tags = canonicalTags(t.tags, r.Index.Tags)
				t.key = appendRowKeysKey(t.key[:0], r.Index.Metric, r.Index.RowTime, r.Index.DataType, t.tags)
				err = t.putIf(t.key, ent, lookup)
			case engine.TagIndexedRowKeys:
				t.tags = canonicalTags(t.tags, r.Index.Tags)
				t.key = appendTagIndexedKey(t.key[:0], r.Index.Metric, r.Index.RowTime, r.Index.Pair, r.Index.DataType, r.Index.Hash, t.tags)
				err = t.putIf(t.key, ent, lookup)
			case engine.RowKeyTimeIndex:
				t.key = appendRowTimesKey(t.key[:0], r.Index.Metric, r.Index.RowTime)
				err = t.putIf(t.key, ent, lookup)
			case engine.StringIndex:
				t.key = appendMetricNameKey(t.key[:0], r.Name)
				err = t.putIf(t.key, ent, lookup)
			case engine.Spec:
				ent.value = r.Value
				err = t.putIf(appendSpecKey(t.key[:0], r.Name), ent, lookup)
			case engine.ServiceIndex:
				ent.value = r.Value
				err = t.putIf(appendServiceKey(t.key[:0], r.Service, r.ServiceKey, r.Name), ent, lookup)
			default:
				err = fmt.Errorf("pebblekv: no table %d", r.Table)
			}
			if err != nil {
				return err
			}
		}
		return t.flushBlock()
	})
}

// ScanFraction estimates the share of table's bytes on disk before pos, a
// resume position of ScanRaw, for a copy's progress report. Writes not yet
// flushed from the memtable are not counted.
func (e *Engine) ScanFraction(table engine.Table, pos []byte) float64 {
	prefix, err := tablePrefix(table)
	if err != nil || e.closed.Load() || len(pos) == 0 || pos[0] != prefix {
		return 0
	}
	lower, upper := []byte{prefix}, []byte{prefix + 1}
	total, err := e.db.EstimateDiskUsage(lower, upper)
	if err != nil || total == 0 {
		return 0
	}
	done, err := e.db.EstimateDiskUsage(lower, pos)
	if err != nil {
		return 0
	}
	return min(1, float64(done)/float64(total))
}
