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
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// ctxCheckEvery is how many entries a scan reads between context checks.
const ctxCheckEvery = 1024

// scan calls fn with the rest of the key after skip bytes and the entry of
// every visible entry with lower <= key < upper, in key order.
func (e *Engine) scan(ctx context.Context, lower, upper []byte, skip int, fn func(rest []byte, ent entry) error) (err error) {
	if err := e.usable(ctx); err != nil {
		return err
	}
	if bytes.Compare(lower, upper) >= 0 {
		return nil
	}
	it, err := e.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	now := e.now().Unix()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		ent, err := decodeEntry(v)
		if err != nil {
			return fmt.Errorf("%w: key %x", err, it.Key())
		}
		if !ent.visible(now) {
			continue
		}
		if err := fn(it.Key()[skip:], ent); err != nil {
			return err
		}
	}
	return nil
}

// scanPrefix scans every key starting with prefix.
func (e *Engine) scanPrefix(ctx context.Context, prefix []byte, fn func(rest []byte, ent entry) error) error {
	return e.scan(ctx, prefix, prefixEnd(prefix), len(prefix), fn)
}

// get returns the visible value stored under key.
func (e *Engine) get(ctx context.Context, key []byte) (string, bool, error) {
	if err := e.usable(ctx); err != nil {
		return "", false, err
	}
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer closer.Close()
	ent, err := decodeEntry(v)
	if err != nil {
		return "", false, fmt.Errorf("%w: key %x", err, key)
	}
	if !ent.visible(e.now().Unix()) {
		return "", false, nil
	}
	return string(ent.value), true, nil
}

// Spec reads spec(cluster_config, name).
func (e *Engine) Spec(ctx context.Context, name string) (string, bool, error) {
	return e.get(ctx, appendSpecKey(nil, name))
}

// ServiceValue reads service_index(service, serviceKey, key).
func (e *Engine) ServiceValue(ctx context.Context, service, serviceKey, key string) (string, bool, error) {
	return e.get(ctx, appendServiceKey(nil, service, serviceKey, key))
}

// ServiceKeys lists the keys of (service, serviceKey) starting with prefix.
func (e *Engine) ServiceKeys(ctx context.Context, service, serviceKey, prefix string, fn func(key string) error) error {
	p := appendServicePrefix(nil, service, serviceKey)
	skip := len(p)
	p = appendEscapedPrefix(p, prefix)
	return e.scan(ctx, p, prefixEnd(p), skip, func(rest []byte, _ entry) error {
		key, _, err := cutEscaped(rest)
		if err != nil {
			return err
		}
		return fn(string(key))
	})
}

// RowTimes lists row times of metric with lo <= row_time <= hi, ascending.
func (e *Engine) RowTimes(ctx context.Context, metric string, lo, hi int64, fn func(rowTime int64) error) error {
	lower := appendRowTimesKey(nil, metric, lo)
	// Every key of the partition has exactly 8 bytes after the prefix, so
	// hi's key plus one byte is above hi and below anything larger.
	upper := append(appendRowTimesKey(nil, metric, hi), 0)
	return e.scan(ctx, lower, upper, len(lower)-8, func(rest []byte, _ entry) error {
		if len(rest) != 8 {
			return errCorrupt
		}
		return fn(decodeInt64(rest))
	})
}

// RowKeys lists the row_keys entries of (metric, rowTime).
func (e *Engine) RowKeys(ctx context.Context, metric string, rowTime int64, fn func(dataType string, tags []codec.Tag) error) error {
	var tags []codec.Tag
	return e.scanPrefix(ctx, appendRowKeysPrefix(nil, metric, rowTime), func(rest []byte, _ entry) error {
		dataType, rest, err := cutEscaped(rest)
		if err != nil {
			return err
		}
		if tags, _, err = decodeTags(tags[:0], rest); err != nil {
			return err
		}
		return fn(string(dataType), tags)
	})
}

// RowKeyExists reports whether one row_keys entry is visible.
func (e *Engine) RowKeyExists(ctx context.Context, metric string, rowTime int64, dataType string, tags []codec.Tag) (bool, error) {
	_, ok, err := e.get(ctx, appendRowKeysKey(nil, metric, rowTime, dataType, canonicalTags(nil, tags)))
	return ok, err
}

// RowKeysExist reports which of the row_keys entries (metric, rowTime,
// dataType, tags[i]) are visible, as RowKeyExists each, through one
// iterator over the partition: the index checks a kept listing's
// candidates with it, where a point read per candidate cost a lookup of
// every level's sstables each (BENCHMARKS.md, "Issue #30: the embedded
// panels"). The entries are sought in key order, so the iterator only
// moves forward.
func (e *Engine) RowKeysExist(ctx context.Context, metric string, rowTime int64, dataType string, tags [][]codec.Tag) (_ []bool, err error) {
	exists := make([]bool, len(tags))
	if len(tags) == 0 {
		return exists, nil
	}
	if err := e.usable(ctx); err != nil {
		return nil, err
	}
	prefix := appendRowKeysPrefix(nil, metric, rowTime)
	keys := make([][]byte, len(tags))
	var scratch []codec.Tag
	for i, t := range tags {
		scratch = canonicalTags(scratch, t)
		keys[i] = appendRowKeysKey(nil, metric, rowTime, dataType, scratch)
	}
	order := make([]int, len(tags))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
	it, err := e.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	now := e.now().Unix()
	for _, i := range order {
		if !it.SeekGE(keys[i]) || !bytes.Equal(it.Key(), keys[i]) {
			if err := it.Error(); err != nil {
				return nil, err
			}
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, err
		}
		ent, err := decodeEntry(v)
		if err != nil {
			return nil, fmt.Errorf("%w: key %x", err, keys[i])
		}
		exists[i] = ent.visible(now)
	}
	return exists, nil
}

// TagIndexedRowKeys lists the tag_indexed_row_keys entries of (metric,
// rowTime, pair).
func (e *Engine) TagIndexedRowKeys(ctx context.Context, metric string, rowTime int64, pair string, fn func(dataType string, tags []codec.Tag) error) error {
	var tags []codec.Tag
	return e.scanPrefix(ctx, appendTagIndexedPrefix(nil, metric, rowTime, pair), func(rest []byte, _ entry) error {
		dataType, rest, err := cutEscaped(rest)
		if err != nil {
			return err
		}
		if len(rest) < 4 {
			return errCorrupt
		}
		if tags, _, err = decodeTags(tags[:0], rest[4:]); err != nil { // skip tag_collection_hash
			return err
		}
		return fn(string(dataType), tags)
	})
}

// LegacyRowKeys lists row_key_index column1 values of metric with
// lo <= column1 < hi in unsigned byte order.
func (e *Engine) LegacyRowKeys(ctx context.Context, metric string, lo, hi []byte, fn func(rowKey []byte) error) error {
	prefix := appendLegacyPrefix(nil, metric)
	lower := appendEscaped(bytes.Clone(prefix), lo)
	upper := appendEscaped(bytes.Clone(prefix), hi)
	return e.scan(ctx, lower, upper, len(prefix), func(rest []byte, _ entry) error {
		rowKey, _, err := cutEscaped(rest)
		if err != nil {
			return err
		}
		return fn(rowKey)
	})
}

// Cells lists the cells of rowKey with lo <= column1 < hi, ascending: the
// blocks of the windows the range touches, in key order.
func (e *Engine) Cells(ctx context.Context, rowKey []byte, lo, hi uint32, fn func(column uint32, value []byte) error) error {
	return e.CellsOfRows(ctx, func(cells func(rowKey []byte, lo, hi uint32, fn func(column uint32, value []byte) error) error) error {
		return cells(rowKey, lo, hi, fn)
	})
}

// CellsOfRows calls read with a cells function that reads as Cells does,
// through one Pebble iterator for every call, moved to each row by new
// bounds and a seek: for a read of several rows (the rows of one series),
// where a new iterator per row costs more than the row's few blocks
// (BENCHMARKS.md, "BenchmarkRollupRows"). Each row is drained from the
// head when it is read, and the iterator made again if any drain has
// committed since it was made, which it would not see. It is closed when
// read returns; cells must not be called after that, nor from another
// goroutine.
func (e *Engine) CellsOfRows(ctx context.Context, read func(cells func(rowKey []byte, lo, hi uint32, fn func(column uint32, value []byte) error) error) error) (err error) {
	if err := e.usable(ctx); err != nil {
		return err
	}
	ri := &rowsIter{e: e, ctx: ctx}
	defer func() { err = errors.Join(err, ri.close()) }()
	// One reader for every block: fn's value may be the reader's own
	// 8 bytes, so a reader per block would be an allocation per block.
	r := new(cellblock.Reader)
	return read(func(rowKey []byte, lo, hi uint32, fn func(column uint32, value []byte) error) error {
		it, ok, err := ri.seek(rowKey, lo, hi)
		if err != nil || it == nil {
			return err
		}
		return e.blockCells(ctx, it, ok, r, lo, hi, fn)
	})
}

// CellDoublesOfRows is CellsOfRows with a reader of rows that reads as
// CellDoubles does: the 8-byte cells of a row appended to *cols and *vals
// in bulk, its other cells one call each to other. The rows of rollups
// are 8-byte doubles, and a call per cell was a quarter of a rate
// panel's CPU (BENCHMARKS.md, "Issue #30: rate's rollup rows in bulk").
func (e *Engine) CellDoublesOfRows(ctx context.Context, read func(doubles func(rowKey []byte, lo, hi uint32, cols *[]int64, vals *[]float64, flush func() error, other func(column uint32, value []byte) error) error) error) (err error) {
	if err := e.usable(ctx); err != nil {
		return err
	}
	ri := &rowsIter{e: e, ctx: ctx}
	defer func() { err = errors.Join(err, ri.close()) }()
	r := new(cellblock.Reader)
	return read(func(rowKey []byte, lo, hi uint32, cols *[]int64, vals *[]float64, flush func() error, other func(column uint32, value []byte) error) error {
		it, ok, err := ri.seek(rowKey, lo, hi)
		if err != nil || it == nil {
			return err
		}
		now := e.now().Unix()
		n := 0
		for ; ok; ok = it.Next() {
			v, err := it.ValueAndErr()
			if err != nil {
				return err
			}
			if err := r.Reset(v); err != nil {
				return fmt.Errorf("pebblekv: data_points block %s: %w", describeBlockKey(it.Key()), err)
			}
			if r.Fixed8() {
				err = fixed8Cells(ctx, r, now, lo, hi, cols, vals, flush)
			} else {
				err = readerCells(ctx, r, now, lo, hi, &n, other)
			}
			if err != nil {
				return err
			}
			if err := r.Err(); err != nil {
				return fmt.Errorf("pebblekv: data_points block %s: %w", describeBlockKey(it.Key()), err)
			}
		}
		return it.Error()
	})
}

// rowsIter is the one iterator of a read of several rows.
type rowsIter struct {
	e            *Engine
	ctx          context.Context
	it           *pebble.Iterator
	lower, upper []byte
	drains       uint64 // the head's drains when it was made
}

// seek moves the iterator to the blocks of rowKey that hold columns in
// [lo, hi): ok says it is at one. A nil iterator is nothing to read.
func (ri *rowsIter) seek(rowKey []byte, lo, hi uint32) (*pebble.Iterator, bool, error) {
	e := ri.e
	if err := e.usable(ri.ctx); err != nil {
		return nil, false, err
	}
	if lo >= hi {
		return nil, false, nil
	}
	// The iterator does not see what is committed after it was made,
	// and SetOptions does not refresh it: after any drain since then
	// (this row's, or a writer's or another reader's that took this
	// row's cells out of the head), a new one is made.
	if _, err := e.drainRow(rowKey); err != nil {
		return nil, false, err
	}
	if ri.it != nil && e.headDrains() != ri.drains {
		err := ri.it.Close()
		ri.it = nil
		if err != nil {
			return nil, false, err
		}
	}
	ri.lower = appendBlockKey(ri.lower[:0], rowKey, windowOf(rowKey, lo))
	ri.upper = toPrefixEnd(appendBlockKey(ri.upper[:0], rowKey, windowOf(rowKey, hi-1)))
	if ri.it == nil {
		ri.drains = e.headDrains()
		it, err := e.db.NewIterWithContext(ri.ctx, &pebble.IterOptions{LowerBound: ri.lower, UpperBound: ri.upper})
		if err != nil {
			return nil, false, err
		}
		ri.it = it
	} else {
		ri.it.SetBounds(ri.lower, ri.upper)
	}
	return ri.it, ri.it.SeekGE(ri.lower), nil
}

func (ri *rowsIter) close() error {
	if ri.it == nil {
		return nil
	}
	err := ri.it.Close()
	ri.it = nil
	return err
}

// toPrefixEnd is prefixEnd(key) made in key's own bytes: Pebble copies the
// bounds it is given, so one buffer serves every row.
func toPrefixEnd(key []byte) []byte {
	for len(key) > 0 && key[len(key)-1] == 0xff {
		key = key[:len(key)-1]
	}
	key[len(key)-1]++
	return key
}

// blockCells calls fn for the cells with lo <= column1 < hi of the blocks
// it walks from its current position (ok: it has one), decoded with r.
func (e *Engine) blockCells(ctx context.Context, it *pebble.Iterator, ok bool, r *cellblock.Reader, lo, hi uint32, fn func(column uint32, value []byte) error) error {
	now := e.now().Unix()
	n := 0
	for ; ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := r.Reset(v); err != nil {
			return fmt.Errorf("pebblekv: data_points block %s: %w", describeBlockKey(it.Key()), err)
		}
		if err := readerCells(ctx, r, now, lo, hi, &n, fn); err != nil {
			return err
		}
		if err := r.Err(); err != nil {
			return fmt.Errorf("pebblekv: data_points block %s: %w", describeBlockKey(it.Key()), err)
		}
	}
	return it.Error()
}

// readerCells calls fn for the cells of r with lo <= column1 < hi that
// have not expired at now; n counts the cells decoded, for the context
// checks.
func readerCells(ctx context.Context, r *cellblock.Reader, now int64, lo, hi uint32, n *int, fn func(column uint32, value []byte) error) error {
	expiring := r.HasExpiry()
	for r.Next() {
		if *n++; *n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		col := r.Column()
		if col < lo || expiring && r.Expiry() != 0 && r.Expiry() <= now {
			continue
		}
		if col >= hi {
			break
		}
		if err := fn(col, r.Value()); err != nil {
			return err
		}
	}
	return nil
}

// CellDoubles reads the cells of rowKey with lo <= column1 < hi as Cells
// does, without a call per cell where a block's values are all 8 bytes
// (the rows of doubles the adapter writes): each such cell's column and
// value (the 8 bytes as a big-endian float64) are appended to *cols and
// *vals, and flush is called after every block and every ctxCheckEvery
// cells appended, so that the caller turns them into samples and counts
// them; flush may shorten both slices. The cells of any other block go to
// other, one call each, in column order with the rest: flush has taken
// every cell appended before them. A callback's error stops the read and
// is returned.
func (e *Engine) CellDoubles(ctx context.Context, rowKey []byte, lo, hi uint32, cols *[]int64, vals *[]float64, flush func() error, other func(column uint32, value []byte) error) (err error) {
	if err := e.usable(ctx); err != nil {
		return err
	}
	if lo >= hi {
		return nil
	}
	if _, err := e.drainRow(rowKey); err != nil {
		return err
	}
	lower := appendBlockKey(nil, rowKey, windowOf(rowKey, lo))
	upper := toPrefixEnd(appendBlockKey(nil, rowKey, windowOf(rowKey, hi-1)))
	it, err := e.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	now := e.now().Unix()
	var r cellblock.Reader
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := r.Reset(v); err != nil {
			return fmt.Errorf("pebblekv: data_points block %s: %w", describeBlockKey(it.Key()), err)
		}
		if r.Fixed8() {
			err = fixed8Cells(ctx, &r, now, lo, hi, cols, vals, flush)
		} else {
			err = readerCells(ctx, &r, now, lo, hi, &n, other)
		}
		if err != nil {
			return err
		}
		if err := r.Err(); err != nil {
			return fmt.Errorf("pebblekv: data_points block %s: %w", describeBlockKey(it.Key()), err)
		}
	}
	return it.Error()
}

// fixed8Cells is CellDoubles' loop over one block of 8-byte values.
func fixed8Cells(ctx context.Context, r *cellblock.Reader, now int64, lo, hi uint32, cols *[]int64, vals *[]float64, flush func() error) error {
	expiring := r.HasExpiry()
	if !expiring {
		for {
			n := len(*cols)
			var full bool
			*cols, *vals, full = r.AppendFloats(*cols, *vals, lo, hi, ctxCheckEvery)
			if len(*cols) > n {
				if err := flush(); err != nil {
					return err
				}
			}
			if !full {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	cs, vs := *cols, *vals
	pending := 0
	for r.Next() {
		col := r.Column()
		if col < lo || expiring && r.Expiry() != 0 && r.Expiry() <= now {
			continue
		}
		if col >= hi {
			break
		}
		cs = append(cs, int64(col))
		vs = append(vs, math.Float64frombits(r.Bits()))
		if pending++; pending == ctxCheckEvery {
			*cols, *vals = cs, vs
			if err := flush(); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			cs, vs, pending = *cols, *vals, 0
		}
	}
	*cols, *vals = cs, vs
	if pending == 0 {
		return nil
	}
	return flush()
}

// FirstCell is the first column of rowKey with lo <= column1 < hi: the
// iterator stops at it.
func (e *Engine) FirstCell(ctx context.Context, rowKey []byte, lo, hi uint32) (uint32, bool, error) {
	var first uint32
	found := false
	err := e.Cells(ctx, rowKey, lo, hi, func(col uint32, _ []byte) error {
		first, found = col, true
		return errFirstCell
	})
	if err != nil && !errors.Is(err, errFirstCell) {
		return 0, false, err
	}
	return first, found, nil
}

var errFirstCell = errors.New("first cell found")

// MetricNames lists string_index['metric_names'] in byte order.
func (e *Engine) MetricNames(ctx context.Context, fn func(name string) error) error {
	return e.scanPrefix(ctx, appendStringsPrefix(nil), func(rest []byte, _ entry) error {
		name, _, err := cutEscaped(rest)
		if err != nil {
			return err
		}
		return fn(string(name))
	})
}
