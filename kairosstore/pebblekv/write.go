package pebblekv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// maxTTL is Cassandra's largest TTL in seconds (20 years); Cassandra rejects
// larger ones, and so does this engine.
const maxTTL = 630720000

// txn is one read-modify-write transaction, run under Engine.mu. Every
// statement of a transaction has the same write time.
type txn struct {
	e         *Engine
	b         *pebble.Batch
	now       int64 // unix seconds
	writeTime int64
	// newest: writeTime is above the write time of everything stored
	// (Engine.highWater), so no stored entry or tombstone can win against
	// this transaction and lookups in the store are skipped. Cells use the
	// finer per-partition marks otherwise.
	newest bool
	// tombRows holds the data_points partitions the transaction puts a
	// tombstone in, by their hash in Engine.marks.
	tombRows []uint64
	// written holds the entries this transaction already put, for a request
	// that carries one key twice: the batch is not indexed, so store lookups
	// do not see them.
	written map[string]entry

	key, val, xkey []byte
	tags           []codec.Tag

	// The data_points tombstones of the partition last written to; one
	// iterator serves every partition of the transaction.
	tombIter   *pebble.Iterator
	tombRow    []byte
	tombPrefix []byte
	tombs      []rangeTomb

	// The data_points cells of the block being built (putCell), and
	// what the row's next cells need of its first: whether writeTime is
	// above its row's tombstones, and its window shift. blockRow is the
	// caller's key, not a copy: the batch outlives the transaction, and
	// copies of ~200-byte keys were a part of a known sample's cost.
	block       []cellblock.Cell
	blockRow    []byte
	blockHash   uint64 // of blockRow, in marks
	haveRow     bool
	rowNewer    bool
	rowShift    uint
	blockWindow uint32

	// direct: blocks go to the batch, never the head.
	direct bool
	// The blocks for the head: logBuf is the transaction's head log record,
	// pendCells their cells (the log may change logBuf as it writes it,
	// vfs.File.Write).
	logBuf    []byte
	pending   []pendingBlock
	pendCells []cellblock.Cell
}

// rangeTomb is a data_points tombstone: it covers columns lo..hi
// (inclusive) and shadows writes with a write time <= its own.
type rangeTomb struct {
	lo, hi    uint32
	writeTime int64
}

// highWaterKey stores Engine.highWater, in the same batch as the writes that
// raise it.
var highWaterKey = []byte{tableMeta, 'h', 'i', 'g', 'h', 'w', 'a', 't', 'e', 'r'}

// update runs fn in a transaction with the given write time and commits it.
// With Options.Sync the logs are synced (or, in periodic mode, written to
// their files: commitlog.go) after the lock is released:
// concurrent writers then share one fsync, Pebble's in its commit pipeline
// and the head's in wal.syncTo, and since each log is sequential, syncing a
// later record makes the transaction durable too. A transaction syncs what
// was committed before it even when it changed nothing, because what it
// found may be another transaction's write that is not synced yet.
func (e *Engine) update(ctx context.Context, writeTime int64, fn func(t *txn) error) error {
	return e.run(ctx, writeTime, false, fn)
}

// run is update with an indexed batch if indexed: a transaction that reads
// what it wrote itself (a delete reading blocks it already rewrote).
func (e *Engine) run(ctx context.Context, writeTime int64, indexed bool, fn func(t *txn) error) error {
	if err := e.usable(ctx); err != nil {
		return err
	}
	pebbleSeq, logPos, err := e.commit(writeTime, indexed, false, fn)
	if err != nil || !e.opts.Sync {
		return err
	}
	if e.wal != nil {
		// In periodic mode append wrote the record to the file already;
		// only an fsync that failed since stops the acknowledgment.
		err := e.wal.failure()
		if e.walFS == nil {
			err = e.wal.syncTo(logPos)
		}
		if err != nil {
			return err
		}
	}
	if pebbleSeq <= e.pebbleSynced.Load() {
		return nil
	}
	// In periodic mode, this is what writes the batch out of Pebble's
	// buffer into its WAL file; walFile's Sync syncs nothing.
	start := time.Now()
	if err := e.db.LogData(nil, pebble.Sync); err != nil {
		return err
	}
	if e.walFS == nil {
		e.syncMetrics.observe("pebble", start)
	}
	e.notePebbleSynced(pebbleSeq)
	return nil
}

// notePebbleSynced records that Pebble's commits up to seq are durable.
func (e *Engine) notePebbleSynced(seq int64) {
	for {
		cur := e.pebbleSynced.Load()
		if cur >= seq || e.pebbleSynced.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// commit runs and commits a transaction; direct sends its cells to Pebble,
// not the head (replay). It returns the Pebble commit and the head log
// position that the transaction's durability needs.
func (e *Engine) commit(writeTime int64, indexed, direct bool, fn func(t *txn) error) (pebbleSeq, logPos int64, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return 0, 0, ErrClosed
	}
	b := e.db.NewBatch()
	if indexed {
		b = e.db.NewIndexedBatch()
	}
	t := &txn{
		e:         e,
		b:         b,
		now:       e.now().Unix(),
		writeTime: writeTime,
		newest:    writeTime > e.highWater,
		written:   map[string]entry{},
		direct:    direct || e.head == nil,
	}
	e.takeScratch(t)
	defer func() {
		e.keepScratch(t)
		if t.tombIter != nil {
			err = errors.Join(err, t.tombIter.Close())
		}
		err = errors.Join(err, t.b.Close())
	}()
	if err := fn(t); err != nil {
		return 0, 0, err
	}
	// Recorded even if the commit fails: too high a bound only costs lookups.
	for _, row := range t.tombRows {
		e.marks.recordHash(row, writeTime, max(e.highWater, writeTime))
	}
	if len(t.logBuf) > 0 {
		if _, err := e.wal.append(t.logBuf); err != nil {
			return 0, 0, err
		}
		if e.head.since.IsZero() {
			e.head.since = time.Now()
		}
	}
	if !t.b.Empty() {
		// A transaction whose cells all went to the head writes no
		// high-water mark: the drain writes it, and replay finds it again.
		// So the mark in memory may be above the stored one, and any batch
		// then carries it: replay skips the tombstone lookups of cells above
		// the stored mark, which must therefore bound every tombstone's
		// write time.
		if hw := max(e.highWater, writeTime); hw > e.storedHighWater {
			if err := t.b.Set(highWaterKey, binary.BigEndian.AppendUint64(nil, uint64(hw)), nil); err != nil {
				return 0, 0, err
			}
		}
		if err := t.b.Commit(pebble.NoSync); err != nil {
			return 0, 0, err
		}
		e.storedHighWater = max(e.highWater, writeTime, e.storedHighWater)
		e.pebbleSeq++
	}
	if t.newest && (len(t.logBuf) > 0 || !t.b.Empty()) {
		e.highWater = writeTime
	}
	if len(t.pending) > 0 {
		e.toHead(t)
	}
	pebbleSeq = e.pebbleSeq
	if e.wal != nil {
		logPos = e.wal.written.Load()
	}
	return pebbleSeq, logPos, nil
}

// toHead gives the head a committed transaction's blocks, and drains what
// is full: windows with headFullCells cells, the whole head past its
// memory bound or when the log is past its own. Their cells are logged, so
// a drain that fails only leaves them in the head, and is logged.
func (e *Engine) toHead(t *txn) {
	var full []*headRow
	h := e.head
	h.mu.Lock()
	h.touch(t.pending)
	for i := range t.pending {
		p := &t.pending[i]
		if r, isFull := h.add(p, t.pendCells[p.first:p.first+p.n]); isFull {
			full = append(full, r)
		}
	}
	e.headRows.Store(int64(h.n))
	var err error
	rotate := h.bytes > e.opts.HeadBytes || e.wal.size > e.logLimit()
	if !rotate && len(full) > 0 {
		// Still under head.mu: a reader may not take these rows meanwhile.
		err = e.drainRows(full)
	}
	h.mu.Unlock()
	if rotate {
		err = e.rotate()
	}
	if err != nil {
		e.logger.Warn("Cannot drain the head into Pebble; its cells stay in memory and in the head log", "err", err)
	}
}

// logLimit bounds the log's current segment: a log record repeats its row
// keys, so it is larger than the head that holds the same cells.
func (e *Engine) logLimit() int64 { return 4 * e.opts.HeadBytes }

// expiry returns the expiry of an entry written now with ttl seconds.
func (t *txn) expiry(ttl int32) int64 {
	if ttl == 0 {
		return 0
	}
	return t.now + int64(ttl)
}

// entry returns a live entry of the transaction.
func (t *txn) entry(ttl int32, value []byte) entry {
	return entry{writeTime: t.writeTime, expiry: t.expiry(ttl), value: value}
}

// tombstone returns the transaction's tombstone entry.
func (t *txn) tombstone() entry {
	return entry{tombstone: true, writeTime: t.writeTime, expiry: t.now + int64(t.e.opts.TombstoneGrace.Seconds())}
}

// put stores ent under key unless the entry key holds wins. key may be a
// scratch buffer: the batch copies it.
func (t *txn) put(key []byte, ent entry) error { return t.putIf(key, ent, !t.newest) }

// putIf is put that looks the key up in the store only if lookup is set;
// the caller knows when no stored entry can win.
func (t *txn) putIf(key []byte, ent entry, lookup bool) error {
	old, found, err := t.current(key, lookup)
	if err != nil {
		return err
	}
	if found && old.live(t.now) && !ent.supersedes(old) {
		return nil
	}
	t.written[string(key)] = ent
	t.val = ent.append(t.val[:0])
	if err := t.b.Set(key, t.val, nil); err != nil {
		return err
	}
	if ent.expiry == 0 {
		return nil
	}
	t.xkey = appendExpiryKey(t.xkey[:0], ent.expiry, key)
	return t.b.Set(t.xkey, nil, nil)
}

// current returns the entry key holds as of this transaction: its own
// earlier put, else (if lookup) the stored entry.
func (t *txn) current(key []byte, lookup bool) (entry, bool, error) {
	if ent, ok := t.written[string(key)]; ok {
		return ent, true, nil
	}
	if !lookup {
		return entry{}, false, nil
	}
	return t.stored(key)
}

// stored returns the entry key holds in the store. Its value is a copy.
func (t *txn) stored(key []byte) (entry, bool, error) {
	v, closer, err := t.e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return entry{}, false, nil
	}
	if err != nil {
		return entry{}, false, err
	}
	defer closer.Close()
	ent, err := decodeEntry(v)
	if err != nil {
		return entry{}, false, fmt.Errorf("%w: key %x", err, key)
	}
	ent.value = bytes.Clone(ent.value)
	return ent, true, nil
}

// Write stores every row of the batch in one Pebble batch.
func (e *Engine) Write(ctx context.Context, b *engine.Batch) error {
	if err := checkTTLs(b); err != nil {
		return err
	}
	return e.update(ctx, b.WriteTime, func(t *txn) error {
		for i := range b.Cells {
			if err := t.putCell(&b.Cells[i]); err != nil {
				return err
			}
		}
		if err := t.flushBlock(); err != nil {
			return err
		}
		for i := range b.RowKeys {
			if err := t.putRowKey(&b.RowKeys[i], t.entry(b.RowKeys[i].TTL, nil)); err != nil {
				return err
			}
		}
		for i := range b.TagIndexed {
			if err := t.putTagIndexed(&b.TagIndexed[i], t.entry(b.TagIndexed[i].TTL, nil)); err != nil {
				return err
			}
		}
		for _, r := range b.RowTimes {
			t.key = appendRowTimesKey(t.key[:0], r.Metric, r.RowTime)
			if err := t.put(t.key, t.entry(r.TTL, nil)); err != nil {
				return err
			}
		}
		for _, name := range b.MetricNames {
			t.key = appendMetricNameKey(t.key[:0], name)
			if err := t.put(t.key, t.entry(0, nil)); err != nil {
				return err
			}
		}
		for _, k := range b.LegacyRowKeys {
			if err := t.putLegacyRowKey(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkTTLs rejects the TTLs Cassandra rejects, before anything is written.
// Only the errors are collected: a nil error kept per cell made a large
// request's check cost more than its blocks (BENCHMARKS.md, "Issue #31,
// third pass").
func checkTTLs(b *engine.Batch) error {
	var errs []error
	check := func(ttl int32) {
		if ttl < 0 || ttl > maxTTL {
			errs = append(errs, fmt.Errorf("ttl %d out of range [0, %d]", ttl, maxTTL))
		}
	}
	for i := range b.Cells {
		check(b.Cells[i].TTL)
	}
	for i := range b.RowKeys {
		check(b.RowKeys[i].TTL)
	}
	for i := range b.TagIndexed {
		check(b.TagIndexed[i].TTL)
	}
	for i := range b.RowTimes {
		check(b.RowTimes[i].TTL)
	}
	return errors.Join(errs...)
}

func (t *txn) putCell(c *engine.Cell) error {
	return t.putCellAt(c, t.writeTime, t.expiry(c.TTL))
}

// putCellAt is putCell with the cell's own write time and expiry, which a
// raw load (LoadRaw) carries per cell; writeTime is at most t.writeTime.
func (t *txn) putCellAt(c *engine.Cell, writeTime, expiry int64) error {
	sameRow := t.haveRow && bytes.Equal(c.Key, t.blockRow)
	h := t.blockHash
	shift := t.rowShift
	if !sameRow {
		h = t.e.marks.hash(c.Key)
		// Above the high-water mark is above every tombstone: no lookup.
		t.rowNewer = t.newest || t.e.marks.newerHash(h, t.writeTime)
		shift = windowShiftOf(c.Key)
	}
	newer := t.rowNewer
	if writeTime != t.writeTime {
		newer = t.e.marks.newerHash(h, writeTime)
	}
	if !newer {
		shadowed, err := t.cellShadowed(c.Key, c.Column, writeTime)
		if err != nil || shadowed {
			return err
		}
	}
	// Cells come grouped by row key, so a block is usually built from
	// consecutive cells; a row and window seen again later in the batch is
	// one more merge operand, which the merge operator reconciles the same.
	if win := windowAt(c.Column, shift); !sameRow || win != t.blockWindow {
		if err := t.flushBlock(); err != nil {
			return err
		}
		if !sameRow {
			t.blockRow, t.blockHash, t.rowShift = c.Key, h, shift
			t.haveRow = true
		}
		t.blockWindow = win
	}
	t.block = append(t.block, cellblock.Cell{Column: c.Column, WriteTime: writeTime, Expiry: expiry, Value: c.Value})
	return nil
}

// flushBlock sends the cells collected for one row and window to the head,
// or merges them into their key when they are a block large enough or the
// transaction is direct.
func (t *txn) flushBlock() error {
	if len(t.block) == 0 {
		return nil
	}
	cells := sortCells(t.block)
	t.block = t.block[:0]
	if t.direct || len(cells) >= directCells {
		return mergeBlock(t.b, t.blockRow, t.blockWindow, cells, t.e.blockPurgeStep, &t.key, &t.val, &t.xkey)
	}
	if len(t.logBuf) == 0 {
		t.logBuf = binary.BigEndian.AppendUint64(t.logBuf, uint64(t.now))
	}
	t.logBuf = appendLogBlock(t.logBuf, t.blockRow, cells)
	t.pending = append(t.pending, pendingBlock{hash: t.blockHash, row: t.blockRow, window: t.blockWindow, first: len(t.pendCells), n: len(cells)})
	t.pendCells = append(t.pendCells, cells...)
	return nil
}

// blockPurgeTime is when the purge looks at a block holding a cell that
// expires at expiry: the end of expiry's step.
func blockPurgeTime(expiry, step int64) int64 {
	if r := expiry % step; r != 0 {
		return expiry - r + step
	}
	return expiry
}

// cellShadowed reports whether a data_points tombstone hides a write of
// (rowKey, column) at writeTime. Cells usually come grouped by row key, so
// the tombstones of the last partition are kept.
func (t *txn) cellShadowed(rowKey []byte, column uint32, writeTime int64) (bool, error) {
	if t.tombIter == nil || !bytes.Equal(t.tombRow, rowKey) {
		if err := t.loadDataTombs(rowKey); err != nil {
			return false, err
		}
	}
	for _, tb := range t.tombs {
		if tb.lo <= column && column <= tb.hi && tb.writeTime >= writeTime {
			return true, nil
		}
	}
	return false, nil
}

// loadDataTombs reads the live tombstones of rowKey's partition. Write
// transactions put none, so the store is all there is to read.
func (t *txn) loadDataTombs(rowKey []byte) error {
	if t.tombIter == nil {
		it, err := t.e.db.NewIter(&pebble.IterOptions{
			LowerBound: []byte{tableDataTomb},
			UpperBound: []byte{tableDataTomb + 1},
		})
		if err != nil {
			return err
		}
		t.tombIter = it
	}
	t.tombRow = append(t.tombRow[:0], rowKey...)
	t.tombs = t.tombs[:0]
	// In a scratch buffer: a write that reaches the lock in the same
	// millisecond as the one before it takes this path for every row.
	t.tombPrefix = appendDataTombPrefix(t.tombPrefix[:0], rowKey)
	prefix := t.tombPrefix
	it := t.tombIter
	for ok := it.SeekGE(prefix); ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
		k := it.Key()[len(prefix):]
		if len(k) != 8 {
			return errCorrupt
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		ent, err := decodeEntry(v)
		if err != nil {
			return err
		}
		if ent.live(t.now) {
			t.tombs = append(t.tombs, rangeTomb{
				lo:        binary.BigEndian.Uint32(k[:4]),
				hi:        binary.BigEndian.Uint32(k[4:]),
				writeTime: ent.writeTime,
			})
		}
	}
	return it.Error()
}

func (t *txn) putRowKey(r *engine.IndexedRowKey, ent entry) error {
	t.tags = canonicalTags(t.tags, r.Tags)
	t.key = appendRowKeysKey(t.key[:0], r.Metric, r.RowTime, r.DataType, t.tags)
	return t.put(t.key, ent)
}

func (t *txn) putTagIndexed(r *engine.TagIndexedRowKey, ent entry) error {
	t.tags = canonicalTags(t.tags, r.Tags)
	t.key = appendTagIndexedKey(t.key[:0], r.Metric, r.RowTime, r.Pair, r.DataType, r.Hash, t.tags)
	return t.put(t.key, ent)
}

// SetSpec writes spec(cluster_config, name) = value.
func (e *Engine) SetSpec(ctx context.Context, name, value string, writeTime int64) error {
	return e.update(ctx, writeTime, func(t *txn) error {
		return t.put(appendSpecKey(nil, name), t.entry(0, []byte(value)))
	})
}

// SetServiceValue writes service_index(service, serviceKey, key) = value.
// The static mtime column has no reader in engine.Engine, so it is not
// kept.
func (e *Engine) SetServiceValue(ctx context.Context, service, serviceKey, key, value string, writeTime int64) error {
	return e.update(ctx, writeTime, func(t *txn) error {
		return t.put(appendServiceKey(nil, service, serviceKey, key), t.entry(0, []byte(value)))
	})
}

// DeleteServiceValue removes service_index(service, serviceKey, key) with a
// tombstone, as Cassandra does.
func (e *Engine) DeleteServiceValue(ctx context.Context, service, serviceKey, key string, writeTime int64) error {
	return e.update(ctx, writeTime, func(t *txn) error {
		return t.put(appendServiceKey(nil, service, serviceKey, key), t.tombstone())
	})
}

// putLegacyRowKey writes one row_key_index cell; KairosDB's value is 0x00.
func (t *txn) putLegacyRowKey(k engine.LegacyRowKey) error {
	return t.putLegacyRowKeyAt(k, t.entry(0, []byte{0}))
}

// putLegacyRowKeyAt is putLegacyRowKey with the entry's own write time.
func (t *txn) putLegacyRowKeyAt(k engine.LegacyRowKey, ent entry) error {
	shadowed, err := t.legacyShadowed(k.Metric, ent.writeTime)
	if err != nil || shadowed {
		return err
	}
	t.key = appendLegacyKey(t.key[:0], k.Metric, k.RowKey)
	return t.putIf(t.key, ent, ent.writeTime <= t.e.highWater)
}

// legacyShadowed reports whether a row_key_index partition tombstone hides
// a write to metric's partition at writeTime.
func (t *txn) legacyShadowed(metric string, writeTime int64) (bool, error) {
	if writeTime > t.e.highWater {
		return false, nil
	}
	ent, found, err := t.stored(appendLegacyTombKey(nil, metric))
	if err != nil || !found {
		return false, err
	}
	return ent.live(t.now) && ent.writeTime >= writeTime, nil
}
