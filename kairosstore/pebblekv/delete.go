package pebblekv

import (
	"context"
	"errors"
	"math"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// Delete applies the deletes of one delete-by-query (§8) in one transaction.
// See the package doc for the tombstone model.
func (e *Engine) Delete(ctx context.Context, d *engine.Deletes) error {
	return e.update(ctx, d.WriteTime, func(t *txn) error {
		tomb := t.tombstone()
		for _, rowKey := range d.Rows {
			if err := t.deleteCells(rowKey, 0, math.MaxUint32, tomb); err != nil {
				return err
			}
		}
		for _, r := range d.CellRanges {
			if r.Lo > r.Hi {
				continue // Cassandra deletes nothing for an empty slice
			}
			if err := t.deleteCells(r.Key, r.Lo, r.Hi, tomb); err != nil {
				return err
			}
		}
		for i := range d.RowKeys {
			if err := t.putRowKey(&d.RowKeys[i], tomb); err != nil {
				return err
			}
		}
		for i := range d.TagIndexed {
			if err := t.putTagIndexed(&d.TagIndexed[i], tomb); err != nil {
				return err
			}
		}
		for _, r := range d.RowTimes {
			if err := t.put(appendRowTimesKey(t.key[:0], r.Metric, r.RowTime), tomb); err != nil {
				return err
			}
		}
		for _, k := range d.LegacyRowKeys {
			if err := t.put(appendLegacyKey(t.key[:0], k.Metric, k.RowKey), tomb); err != nil {
				return err
			}
		}
		for _, metric := range d.LegacyMetrics {
			prefix := appendLegacyPrefix(nil, metric)
			if err := t.deleteOlder(prefix, prefixEnd(prefix), tomb.writeTime); err != nil {
				return err
			}
			if err := t.put(appendLegacyTombKey(t.key[:0], metric), tomb); err != nil {
				return err
			}
		}
		for _, name := range d.MetricNames {
			if err := t.put(appendMetricNameKey(t.key[:0], name), tomb); err != nil {
				return err
			}
		}
		return nil
	})
}

// deleteCells removes the cells of rowKey with lo <= column <= hi that the
// tombstone shadows and records the range tombstone for later writes.
func (t *txn) deleteCells(rowKey []byte, lo, hi uint32, tomb entry) error {
	t.rows[string(rowKey)] = false
	lower := appendDataKey(nil, rowKey, lo)
	var upper []byte
	if hi == math.MaxUint32 {
		upper = prefixEnd(appendDataPrefix(nil, rowKey))
	} else {
		upper = appendDataKey(nil, rowKey, hi+1)
	}
	if err := t.deleteOlder(lower, upper, tomb.writeTime); err != nil {
		return err
	}
	return t.put(appendDataTombKey(t.key[:0], rowKey, lo, hi), tomb)
}

// deleteOlder removes the entries in [lower, upper) written at or before
// writeTime: a Cassandra tombstone shadows those and not newer ones. Their
// expiry index keys stay; the purge drops them when it finds the entry gone.
func (t *txn) deleteOlder(lower, upper []byte, writeTime int64) (err error) {
	// The transaction's own puts are not seen; none of them is a live entry
	// an older-or-equal delete would remove.
	it, err := t.e.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		ent, err := decodeEntry(v)
		if err != nil {
			return err
		}
		if ent.writeTime <= writeTime {
			if err := t.b.Delete(it.Key(), nil); err != nil {
				return err
			}
		}
	}
	return nil
}
