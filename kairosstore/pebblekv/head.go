package pebblekv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// The head keeps the data_points cells of small writes in memory, by row
// key and window, and hands each block key its cells as one merge operand
// (a drain), instead of one operand per write. A series written one sample
// per request otherwise costs a memtable key per sample, and flushes and
// compactions that merge those one-cell blocks (BENCHMARKS.md, "Issue #31,
// third pass"). Blocks of directCells cells or more go to Pebble at once.
//
// The transaction still decides what is written (tombstone checks, marks,
// highWater): the head only changes where the block goes. Its cells are in
// the head's log (wal.go), synced before the write is acknowledged, until a
// rotation (rotate) has made them durable in Pebble.
//
// Reads do not look into the head: a read of data_points drains the rows
// it reads into Pebble first (drainRow), without Engine.mu, so that a
// dashboard read during ingest neither waits for the writers nor pays for
// every other row's cells. ScanRaw drains the whole head (drainHead), and
// so do deletes (whose range deletes must see every cell older than
// them), checkpoints and compactions. The purge and Close rotate. Drains
// that are not rotations commit without fsync: the log still holds their
// cells.
//
// Replay (Open) puts the logged cells through the write path again, each
// with its own write time and expiry, so a tombstone stored after the cell
// was logged drops it as it drops a late write; a cell drained before the
// crash merges with itself.
const (
	defaultHeadBytes  = 128 << 20
	defaultHeadMaxAge = 2 * time.Minute
	// directCells: a block of this many cells from one write is as good an
	// operand as the head would make.
	directCells = 64
	// headFullCells: a window with this many cells is drained alone.
	headFullCells = 512
	// The head's memory beside its cells, estimated: a row's map entry and
	// struct, a window's slice headers.
	headRowBytes    = 96
	headWindowBytes = 64
	headCellBytes   = 32
)

// headCell is a cell in the head. A value of up to 8 bytes (a double, a
// long) is kept in the cell, a longer one in its window's vals.
type headCell struct {
	column    uint32
	vlen      uint32
	writeTime int64
	expiry    int64
	value     [8]byte
}

type headWindow struct {
	window uint32
	cells  []headCell
	vals   []byte // the values longer than 8 bytes, one after another
}

// headRow is a row key's cells in the head. Rows are found by the hash
// marks gives their row key, which a write has computed already: a map of
// ~200-byte strings cost a fifth of a known sample's CPU, mostly in cache
// misses on the keys. Rows whose keys share a hash are chained.
type headRow struct {
	key     string
	hash    uint64
	next    *headRow
	windows []headWindow
}

// head is guarded by its mu, and changed by writers only under Engine.mu
// too: Engine.mu is taken before mu, never after. A reader takes mu alone.
// since is Engine.mu's, and so is minExpiry, which readers leave alone
// (a drained row's cells only make it lower than it needs to be).
type head struct {
	mu sync.Mutex
	// drains counts the drains that committed, each before it releases mu
	// and before it lowers Engine.headRows: an iterator made before a
	// drain does not see the cells it moved (CellsOfRows).
	drains atomic.Uint64
	rows   map[uint64]*headRow
	n      int   // rows
	bytes  int64 // estimated memory
	// since is when the log got its first record after the last rotation.
	since time.Time
	// minExpiry is at most the earliest expiry of a cell in the head
	// (math.MaxInt64: none), for the purge: the cells' expiry index keys
	// are written when they drain.
	minExpiry int64
	// touched keeps touch's reads from being optimized away.
	touched uint32
}

func newHead() *head { return &head{rows: map[uint64]*headRow{}, minExpiry: math.MaxInt64} }

// add puts cells (sorted, one per column) into the window of p's row, and
// returns its row and whether the window is full. p.found, from touch, spares
// a second lookup of the row in the map.
func (h *head) add(p *pendingBlock, cells []cellblock.Cell) (*headRow, bool) {
	hash, rowKey, win := p.hash, p.row, p.window
	r := p.found
	if r == nil || r.key != string(rowKey) {
		// A new row, maybe added by an earlier block of this transaction,
		// or a row that shares its hash.
		r = h.rows[hash]
		for r != nil && r.key != string(rowKey) {
			r = r.next
		}
	}
	if r == nil {
		r = &headRow{key: string(rowKey), hash: hash, next: h.rows[hash]}
		h.rows[hash] = r
		h.n++
		h.bytes += int64(len(rowKey)) + headRowBytes
	}
	i := 0
	for i < len(r.windows) && r.windows[i].window != win {
		i++
	}
	if i == len(r.windows) {
		// Room for a few writes, not more: the bound is reached by rows of
		// few cells when there are many rows, and counts their capacity.
		r.windows = append(r.windows, headWindow{window: win, cells: make([]headCell, 0, 4)})
		h.bytes += headWindowBytes + 4*headCellBytes
	}
	w := &r.windows[i]
	cellsCap, valsCap := cap(w.cells), cap(w.vals)
	for j := range cells {
		c := &cells[j]
		hc := headCell{column: c.Column, vlen: uint32(len(c.Value)), writeTime: c.WriteTime, expiry: c.Expiry}
		if c.Expiry != 0 {
			h.minExpiry = min(h.minExpiry, c.Expiry)
		}
		if len(c.Value) <= len(hc.value) {
			copy(hc.value[:], c.Value)
		} else {
			w.vals = append(w.vals, c.Value...)
		}
		w.cells = append(w.cells, hc)
	}
	h.bytes += int64(cap(w.cells)-cellsCap)*headCellBytes + int64(cap(w.vals)-valsCap)
	return r, len(w.cells) >= headFullCells
}

// touch finds the row of each block by its hash (found), and reads its last
// window, so that add finds them in the CPU cache. Each read is a cache
// miss when the head holds many rows, and add's reads of one row depend on
// each other, so a loop of adds waits for them one after another; the reads
// of this loop are independent, and the CPU overlaps their misses.
func (h *head) touch(blocks []pendingBlock) {
	var sum uint32
	for i := range blocks {
		r := h.rows[blocks[i].hash]
		blocks[i].found = r
		if r != nil && len(r.windows) > 0 {
			sum += r.windows[len(r.windows)-1].window
		}
	}
	h.touched = sum
}

// remove takes r out of the head, if it is there.
func (h *head) remove(r *headRow) {
	for p := h.rows[r.hash]; p != nil; p = p.next {
		if p != r && p.next != r {
			continue
		}
		if p == r {
			if r.next == nil {
				delete(h.rows, r.hash)
			} else {
				h.rows[r.hash] = r.next
			}
		} else {
			p.next = r.next
		}
		h.n--
		h.bytes -= int64(len(r.key)) + headRowBytes
		for i := range r.windows {
			h.bytes -= headWindowBytes + int64(cap(r.windows[i].cells))*headCellBytes + int64(cap(r.windows[i].vals))
		}
		return
	}
}

// headScratch holds the buffers of txn.logBuf, pending and pendCells
// between transactions.
type headScratch struct {
	logBuf    []byte
	pending   []pendingBlock
	pendCells []cellblock.Cell
}

// maxHeadScratch bounds the bytes of log record kept for the next
// transaction: one large request's buffers are not kept for good.
const maxHeadScratch = 4 << 20

func (e *Engine) takeScratch(t *txn) {
	s := &e.headScratch
	t.logBuf, t.pending, t.pendCells = s.logBuf[:0], s.pending[:0], s.pendCells[:0]
}

func (e *Engine) keepScratch(t *txn) {
	// The cells' values and the rows' keys are the request's memory.
	clear(t.pendCells)
	clear(t.pending)
	if cap(t.logBuf) > maxHeadScratch {
		e.headScratch = headScratch{}
		return
	}
	e.headScratch = headScratch{logBuf: t.logBuf, pending: t.pending, pendCells: t.pendCells}
}

// pendingBlock is a block a transaction gives the head once it committed:
// its row key is the caller's, its cells in txn.pendCells.
type pendingBlock struct {
	hash     uint64
	row      []byte
	window   uint32
	first, n int
	found    *headRow // the first row of hash in the head, as touch found it
}

// A log record is the transaction's clock (unix seconds, u64), then its
// blocks, each as appendLogBlock writes it. Replay runs the record's
// transaction again at that clock: whether a tombstone shadowed a cell
// depends on whether it was live then.
//
// appendLogBlock appends one block's cells to a log record:
//
//	uvarint len(rowKey) | rowKey | uvarint n | n x (u32 column | u64 write
//	time | u64 expiry | uvarint len(value) | value)
func appendLogBlock(dst, rowKey []byte, cells []cellblock.Cell) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(rowKey)))
	dst = append(dst, rowKey...)
	dst = binary.AppendUvarint(dst, uint64(len(cells)))
	for i := range cells {
		c := &cells[i]
		dst = binary.BigEndian.AppendUint32(dst, c.Column)
		dst = binary.BigEndian.AppendUint64(dst, uint64(c.WriteTime))
		dst = binary.BigEndian.AppendUint64(dst, uint64(c.Expiry))
		dst = binary.AppendUvarint(dst, uint64(len(c.Value)))
		dst = append(dst, c.Value...)
	}
	return dst
}

var errLogRecord = errors.New("malformed head log record")

// decodeLogRecord calls fn with each block of a record; rowKey and the
// cells' values alias payload.
func decodeLogRecord(payload []byte, cells []cellblock.Cell, fn func(rowKey []byte, cells []cellblock.Cell) error) error {
	if len(payload) < 8 {
		return errLogRecord
	}
	p := payload[8:]
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	for len(p) > 0 {
		n, ok := uvarint()
		if !ok || n > uint64(len(p)) {
			return errLogRecord
		}
		rowKey := p[:n]
		p = p[n:]
		count, ok := uvarint()
		// Each cell takes at least 21 bytes: a corrupt count allocates
		// nothing beyond the record's size.
		if !ok || count > uint64(len(p))/21 {
			return errLogRecord
		}
		cells = cells[:0]
		for range count {
			if len(p) < 20 {
				return errLogRecord
			}
			c := cellblock.Cell{
				Column:    binary.BigEndian.Uint32(p),
				WriteTime: int64(binary.BigEndian.Uint64(p[4:])),
				Expiry:    int64(binary.BigEndian.Uint64(p[12:])),
			}
			p = p[20:]
			vlen, ok := uvarint()
			if !ok || vlen > uint64(len(p)) {
				return errLogRecord
			}
			c.Value = p[:vlen:vlen]
			p = p[vlen:]
			cells = append(cells, c)
		}
		if err := fn(rowKey, cells); err != nil {
			return err
		}
	}
	return nil
}

// mergeBlock merges a block of cells (sorted, one per column) into the key
// of rowKey's window win, and notes it in the expiry index when a cell has
// a TTL. key, val and xkey are scratch buffers.
func mergeBlock(b *pebble.Batch, rowKey []byte, win uint32, cells []cellblock.Cell, purgeStep int64, key, val, xkey *[]byte) error {
	*key = appendBlockKey((*key)[:0], rowKey, win)
	*val = cellblock.Append((*val)[:0], cells)
	if err := b.Merge(*key, *val, nil); err != nil {
		return err
	}
	return indexBlock(b, *key, cells, purgeStep, xkey)
}

// indexBlock notes the block under key in the expiry index once for every
// step of expiry among cells.
func indexBlock(b *pebble.Batch, key []byte, cells []cellblock.Cell, purgeStep int64, xkey *[]byte) error {
	last := int64(-1)
	for i := range cells {
		if cells[i].Expiry == 0 {
			continue
		}
		// One index key per block and step of expiry: a block written every
		// few seconds with a TTL adds one key per step, not one per write.
		due := blockPurgeTime(cells[i].Expiry, purgeStep)
		if due == last {
			continue
		}
		last = due
		*xkey = appendExpiryKey((*xkey)[:0], due, key)
		if err := b.Set(*xkey, nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// drain hands every cell of the head to Pebble, one merge operand per
// block key, and empties the head once everything committed (synced if
// sync). Called under Engine.mu; takes head.mu. Every writer waits for a
// whole-head drain, so the rows are merged and committed in up to
// drainParts batches at once, each on its own goroutine: the cores the
// waiting writers would use are otherwise idle. A drain that fails part
// way leaves the head as it was; the parts that committed merge again with
// themselves on the next drain, as a replay's do.
func (e *Engine) drain(sync bool) error {
	e.head.mu.Lock()
	defer e.head.mu.Unlock()
	if err := e.mergeParts(e.head.rows); err != nil {
		return err
	}
	if e.highWater != math.MinInt64 {
		b := e.db.NewBatch()
		err := b.Set(highWaterKey, binary.BigEndian.AppendUint64(nil, uint64(e.highWater)), nil)
		if err == nil {
			err = b.Commit(pebble.NoSync)
		}
		if err := errors.Join(err, b.Close()); err != nil {
			return err
		}
	}
	e.head.drains.Add(1)
	e.storedHighWater = max(e.storedHighWater, e.highWater)
	if sync {
		// Synced for real in periodic mode too: the caller removes the
		// log segments that held these cells.
		if err := e.syncPebble(); err != nil {
			return err
		}
		e.notePebbleSynced(e.pebbleSeq)
	}
	clear(e.head.rows)
	e.head.n = 0
	e.head.bytes = 0
	e.head.minExpiry = math.MaxInt64
	e.headRows.Store(0)
	return nil
}

// drainPartRows: a part of a whole-head drain has at least this many rows,
// so that a small head is not split into batches for nothing.
const drainPartRows = 4096

// mergeParts merges and commits every row of rows (and the rows chained
// behind them) in up to e.drainParts batches committed concurrently, which
// Pebble's commit pipeline allows.
func (e *Engine) mergeParts(rows map[uint64]*headRow) error {
	parts := min(e.drainParts, len(rows)/drainPartRows)
	if parts <= 1 {
		return e.mergeCommit(maps.Values(rows))
	}
	list := slices.Collect(maps.Values(rows))
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := range parts {
		part := list[i*len(list)/parts : (i+1)*len(list)/parts]
		wg.Go(func() {
			errs[i] = e.mergeCommit(slices.Values(part))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// mergeCommit merges the rows in one batch and commits it.
func (e *Engine) mergeCommit(rows iter.Seq[*headRow]) error {
	b := e.db.NewBatch()
	defer b.Close()
	var s mergeScratch
	for r := range rows {
		for ; r != nil; r = r.next {
			if err := e.mergeRow(b, r, &s); err != nil {
				return err
			}
		}
	}
	if b.Empty() {
		return nil
	}
	return b.Commit(pebble.NoSync)
}

type mergeScratch struct {
	cells          []cellblock.Cell
	key, val, xkey []byte
}

// mergeRow merges each window of a head row into b.
func (e *Engine) mergeRow(b *pebble.Batch, r *headRow, s *mergeScratch) error {
	for i := range r.windows {
		w := &r.windows[i]
		s.cells = s.cells[:0]
		off := 0
		for j := range w.cells {
			c := &w.cells[j]
			cell := cellblock.Cell{Column: c.column, WriteTime: c.writeTime, Expiry: c.expiry}
			if n := int(c.vlen); n <= len(c.value) {
				cell.Value = c.value[:n:n]
			} else {
				cell.Value = w.vals[off : off+n : off+n]
				off += n
			}
			s.cells = append(s.cells, cell)
		}
		// Every cell of the window is noted in the expiry index, those that
		// lose to a later write of their column too: had each write merged
		// its own block, each would have noted its own, and the purge looks
		// at a block when any of them is due.
		// appendBlockKey of a string row key.
		s.key = binary.BigEndian.AppendUint32(appendEscaped(append(s.key[:0], tableBlock), r.key), w.window)
		if err := indexBlock(b, s.key, s.cells, e.blockPurgeStep, &s.xkey); err != nil {
			return err
		}
		s.val = cellblock.Append(s.val[:0], sortCells(s.cells))
		if err := b.Merge(s.key, s.val, nil); err != nil {
			return err
		}
	}
	return nil
}

// drainRows drains the rows alone, without fsync. Called under Engine.mu
// and head.mu, which was held since the rows were added: no reader has
// drained them since.
func (e *Engine) drainRows(rows []*headRow) error {
	b := e.db.NewBatch()
	defer b.Close()
	var s mergeScratch
	seen := make(map[*headRow]bool, len(rows))
	for _, r := range rows {
		if seen[r] {
			continue
		}
		seen[r] = true
		if err := e.mergeRow(b, r, &s); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	e.head.drains.Add(1)
	for r := range seen {
		e.head.remove(r)
	}
	e.headRows.Store(int64(e.head.n))
	return nil
}

// rotate makes everything the log holds durable in Pebble and starts a
// new segment, removing the old ones. Called under mu.
func (e *Engine) rotate() error {
	if e.wal == nil {
		return nil
	}
	if e.wal.size == 0 && e.headRows.Load() == 0 && !e.wal.older {
		return nil
	}
	if err := e.drain(true); err != nil {
		return err
	}
	e.wal.markSynced()
	if err := e.wal.start(e.wal.seg + 1); err != nil {
		return err
	}
	e.head.since = time.Time{}
	return e.wal.removeBefore()
}

// drainHead hands the head to Pebble before a read of data_points, so the
// read sees every cell written before it.
func (e *Engine) drainHead() error {
	if e.headRows.Load() == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return ErrClosed
	}
	return e.drain(false)
}

// drainHeadLocked is drainHead under mu. A reader's drain of the last row
// counts it in headRows until it has committed, so an empty count means
// that no row is on its way to Pebble.
func (e *Engine) drainHeadLocked() error {
	if e.head == nil || e.headRows.Load() == 0 {
		return nil
	}
	return e.drain(false)
}

// drainRow hands the cells rowKey has in the head to Pebble and takes the
// row out of the head, for a read of it, and reports whether it moved any.
// head.mu is held until the batch has committed, so that a concurrent read
// of the row finds its cells either still in the head, and drains them
// itself, or already in Pebble. Called without Engine.mu: a read waits
// for no writer, only for drains.
func (e *Engine) drainRow(rowKey []byte) (bool, error) {
	if e.head == nil || e.headRows.Load() == 0 {
		return false, nil
	}
	return e.drainRowHash(e.marks.hash(rowKey), rowKey)
}

// drainRowHash is drainRow for rowKey's hash.
func (e *Engine) drainRowHash(hash uint64, rowKey []byte) (bool, error) {
	h := e.head
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rows[hash]
	for r != nil && r.key != string(rowKey) {
		r = r.next
	}
	if r == nil {
		return false, nil
	}
	// Close drains the head under head.mu before it closes Pebble: a row
	// still here after Close is one its rotation could not drain.
	if e.closed.Load() {
		return false, ErrClosed
	}
	b := e.db.NewBatch()
	defer b.Close()
	var s mergeScratch
	if err := e.mergeRow(b, r, &s); err != nil {
		return false, err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return false, err
	}
	h.drains.Add(1)
	h.remove(r)
	e.headRows.Store(int64(h.n))
	return true, nil
}

// headDrains is head.drains, 0 without a head.
func (e *Engine) headDrains() uint64 {
	if e.head == nil {
		return 0
	}
	return e.head.drains.Load()
}

// rotateIfOld rotates when the log's first record since the last rotation
// is older than Options.HeadMaxAge, bounding how long a cell stays only in
// the log, and so the replay after a crash.
func (e *Engine) rotateIfOld(now time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() || e.wal == nil || e.head.since.IsZero() || now.Sub(e.head.since) < e.opts.HeadMaxAge {
		return nil
	}
	return e.rotate()
}

// replay puts the cells of every segment left in dir through the write
// path into Pebble, syncs, and removes the segments. It returns the
// segment to start the log at.
func (e *Engine) replay(dir string) (uint64, error) {
	segs, err := walSegments(e.opts.FS, dir)
	if err != nil || len(segs) == 0 {
		return 1, err
	}
	start := time.Now()
	var cells []cellblock.Cell
	total := 0
	for _, seg := range segs {
		records, badAt, err := readWAL(e.opts.FS, dir, seg, func(payload []byte) error {
			// The newest write time of the record is the transaction's: it
			// decides, as in a write, whether the partitions need lookups.
			newest := int64(math.MinInt64)
			if err := decodeLogRecord(payload, cells, func(_ []byte, cs []cellblock.Cell) error {
				for i := range cs {
					newest = max(newest, cs[i].WriteTime)
				}
				return nil
			}); err != nil {
				return err
			}
			_, _, err := e.commit(newest, false, true, func(t *txn) error {
				t.now = int64(binary.BigEndian.Uint64(payload))
				return decodeLogRecord(payload, cells, func(rowKey []byte, cs []cellblock.Cell) error {
					for i := range cs {
						// An expired cell is replayed too: until the purge removes
						// it, it still wins over older writes of its column.
						c := &cs[i]
						total++
						if err := t.putCellAt(&engine.Cell{Key: rowKey, Column: c.Column, Value: c.Value}, c.WriteTime, c.Expiry); err != nil {
							return err
						}
					}
					return t.flushBlock()
				})
			})
			return err
		})
		if errors.Is(err, errTorn) {
			e.logger.Warn("The head log ends in a torn or corrupt record; replayed the records before it",
				"segment", walName(seg), "offset", badAt, "records", records)
		} else if err != nil {
			return 0, fmt.Errorf("cannot replay the head log %s at offset %d: %w", walName(seg), badAt, err)
		}
	}
	if err := e.syncPebble(); err != nil {
		return 0, err
	}
	for _, seg := range segs {
		if err := e.opts.FS.Remove(e.opts.FS.PathJoin(dir, walName(seg))); err != nil {
			return 0, err
		}
	}
	if err := syncDir(e.opts.FS, dir); err != nil {
		return 0, err
	}
	e.logger.Info("Replayed the head log", "segments", len(segs), "cells", total, "duration", time.Since(start))
	return segs[len(segs)-1] + 1, nil
}
