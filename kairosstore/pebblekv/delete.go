package pebblekv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// Delete applies the deletes of one delete-by-query (§8) in one transaction.
// See the package doc for the tombstone model.
func (e *Engine) Delete(ctx context.Context, d *engine.Deletes) error {
	return e.run(ctx, d.WriteTime, true, func(t *txn) error {
		// The deletes below read the blocks from Pebble, and a cell they
		// shadow must not come out of the head after them.
		if err := e.drainHeadLocked(); err != nil {
			return err
		}
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
// tombstone shadows and records the range tombstone for later writes. Each
// block of the range is read merged (the transaction's own rewrites
// included: its batch is indexed) and Set without those cells, which
// replaces its operands.
func (t *txn) deleteCells(rowKey []byte, lo, hi uint32, tomb entry) (err error) {
	t.tombRows = append(t.tombRows, t.e.marks.hash(rowKey))
	lower := appendBlockKey(nil, rowKey, windowOf(rowKey, lo))
	upper := prefixEnd(appendBlockKey(nil, rowKey, windowOf(rowKey, hi)))
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	type rewrite struct {
		key   []byte
		block []byte // nil: delete the key
	}
	var rewrites []rewrite
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return errors.Join(err, it.Close())
		}
		var arena []byte
		cells, err := decodeBlock(nil, &arena, v)
		if err != nil {
			return errors.Join(fmt.Errorf("pebblekv: data_points block %s: %w", describeBlockKey(it.Key()), err), it.Close())
		}
		kept := slices.DeleteFunc(slices.Clone(cells), func(c cellblock.Cell) bool {
			return lo <= c.Column && c.Column <= hi && c.WriteTime <= tomb.writeTime
		})
		switch {
		case len(kept) == len(cells):
		case len(kept) == 0:
			rewrites = append(rewrites, rewrite{key: bytes.Clone(it.Key())})
		default:
			rewrites = append(rewrites, rewrite{key: bytes.Clone(it.Key()), block: cellblock.Append(nil, kept)})
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, r := range rewrites {
		if r.block == nil {
			err = t.b.Delete(r.key, nil)
		} else {
			err = t.b.Set(r.key, r.block, nil)
		}
		if err != nil {
			return err
		}
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
