package pebblekv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
)

// A store of layout kairosdb-1 (one Pebble key per data_points cell) is
// converted once, by Open, into a new directory beside it (dir.converting)
// that is then renamed into its place:
//
//  1. The old store is opened read-only and copied in key order, in batches
//     that each carry the last old key they include (convertProgressKey) and
//     are synced: a conversion killed at any moment resumes after the last
//     batch committed. data_points cells become blocks (merge operands, so a
//     row and window split between batches merges like any write); their
//     expiry index keys are made anew; every other key is copied as it is.
//  2. The layout key is written last. Then dir becomes dir.kairosdb-1,
//     dir.converting becomes dir, and dir.kairosdb-1 is removed; Open
//     finishes these renames if it finds them half done.
//
// Until step 2 the old store is untouched, so a conversion refused (too
// little room) or interrupted leaves the data where it was.

var convertProgressKey = []byte{tableMeta, 'c', 'o', 'n', 'v', 'e', 'r', 't'}

const (
	convertingSuffix = ".converting"
	oldLayoutSuffix  = ".kairosdb-1"
)

// Conversion knobs, variables for the tests that kill a conversion midway.
var (
	convertBatchCells  = 100_000
	convertLogEvery    = 10 * time.Second
	convertBatchPause  time.Duration
	convertMarginBytes = int64(64 << 20)
)

// moveSubdirs moves the directories in the old store's directory (the
// admin API's snapshots, whatever an operator keeps there; Pebble keeps
// none) into the new one, so that removing the old copy does not remove
// them. One moved before a kill is where the rerun's renames take it.
func moveSubdirs(fs vfs.FS, dir, tmp string) error {
	names, err := fs.List(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		fi, err := fs.Stat(fs.PathJoin(dir, name))
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			continue
		}
		if err := fs.Rename(fs.PathJoin(dir, name), fs.PathJoin(tmp, name)); err != nil {
			return fmt.Errorf("cannot keep %q: %w", name, err)
		}
	}
	return nil
}

// finishRenames completes step 2 of a conversion interrupted in it.
func finishRenames(fs vfs.FS, dir string) error {
	exists := func(p string) bool { _, err := fs.Stat(p); return err == nil }
	tmp, old := dir+convertingSuffix, dir+oldLayoutSuffix
	if exists(old) && exists(tmp) && !exists(dir) {
		if err := fs.Rename(tmp, dir); err != nil {
			return err
		}
	}
	if exists(old) && exists(dir) && !exists(tmp) {
		return fs.RemoveAll(old)
	}
	return nil
}

// isOldLayout reports whether dir holds a store of layout kairosdb-1:
// Pebble's OPTIONS file names the merger a store was made with, and that
// layout used Pebble's default one.
func isOldLayout(fs vfs.FS, dir string) (bool, error) {
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	if !desc.Exists || desc.OptionsFilename == "" {
		return false, nil
	}
	f, err := fs.Open(desc.OptionsFilename)
	if err != nil {
		return false, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return false, err
	}
	return strings.Contains(string(b), "merger="+pebble.DefaultMerger.Name+"\n"), nil
}

// convert converts the kairosdb-1 store in dir (see above).
func convert(dir string, opts Options, logger *slog.Logger) (err error) {
	fs := opts.FS
	tmp := dir + convertingSuffix
	lock, err := pebble.LockDirectory(dir, fs)
	if err != nil {
		return fmt.Errorf("pebble directory %q is locked; is another adapter using it? %w", dir, err)
	}
	locked := true
	defer func() {
		if locked {
			err = errors.Join(err, lock.Close())
		}
	}()
	old, err := pebble.Open(dir, &pebble.Options{FS: fs, ReadOnly: true, Lock: lock, Logger: pebbleLogger{logger}})
	if err != nil {
		return fmt.Errorf("cannot open the kairosdb-1 store: %w", err)
	}
	defer func() {
		if old != nil {
			err = errors.Join(err, old.Close())
		}
	}()
	if err := fs.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	newOpts := &pebble.Options{
		FS: fs, FormatMajorVersion: formatVersion, Merger: merger,
		MemTableSize: 64 << 20, Logger: pebbleLogger{logger},
	}
	applyCompression(newOpts)
	newDB, err := pebble.Open(tmp, newOpts)
	if err != nil {
		return fmt.Errorf("cannot open %q: %w", tmp, err)
	}
	defer func() {
		if newDB != nil {
			err = errors.Join(err, newDB.Close())
		}
	}()

	done, resume, err := convertState(newDB)
	if err != nil {
		return err
	}
	if !done {
		if err := checkRoom(fs, dir, old, newDB); err != nil {
			return err
		}
		if err := copyStore(old, newDB, resume, logger); err != nil {
			return err
		}
	}
	err = errors.Join(newDB.Close(), old.Close(), lock.Close())
	newDB, old, locked = nil, nil, false
	if err != nil {
		return err
	}
	if err := moveSubdirs(fs, dir, tmp); err != nil {
		return err
	}
	if err := fs.Rename(dir, dir+oldLayoutSuffix); err != nil {
		return err
	}
	if err := fs.Rename(tmp, dir); err != nil {
		return err
	}
	logger.Info("Converted the embedded store to data_points blocks; removing the old copy", "old", dir+oldLayoutSuffix)
	return fs.RemoveAll(dir + oldLayoutSuffix)
}

// convertState reads how far a conversion into db got: done, or the old
// key to resume after (nil: from the start).
func convertState(db *pebble.DB) (done bool, resume []byte, err error) {
	get := func(k []byte) ([]byte, error) {
		v, closer, err := db.Get(k)
		if errors.Is(err, pebble.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		defer closer.Close()
		return bytes.Clone(v), nil
	}
	layout, err := get(layoutKey)
	if err != nil {
		return false, nil, err
	}
	if bytes.Equal(layout, layoutVersion) {
		return true, nil, nil
	}
	resume, err = get(convertProgressKey)
	return false, resume, err
}

// checkRoom refuses a conversion the disk has no room for: the new store
// holds every key but the cells as they are, and the cells in blocks,
// which take far less than a key each (a fourth is assumed, with a margin).
func checkRoom(fs vfs.FS, dir string, old, newDB *pebble.DB) error {
	total := int64(old.Metrics().DiskSpaceUsage())
	cells, err := old.EstimateDiskUsage([]byte{tableData}, []byte{tableData + 1})
	if err != nil {
		return err
	}
	need := total - int64(cells) + int64(cells)/4 + convertMarginBytes - int64(newDB.Metrics().DiskSpaceUsage())
	du, err := fs.GetDiskUsage(dir)
	if err != nil {
		return fmt.Errorf("cannot tell the free space for converting the store in %q: %w", dir, err)
	}
	if int64(du.AvailBytes) < need {
		return fmt.Errorf("it needs about %d MiB free on its disk and %d MiB are: free some space and start again (the store is unchanged)", need>>20, du.AvailBytes>>20)
	}
	return nil
}

// copyStore copies old into newDB from after resume, in synced batches.
func copyStore(old, newDB *pebble.DB, resume []byte, logger *slog.Logger) (err error) {
	var lower []byte
	if resume != nil {
		lower = append(bytes.Clone(resume), 0) // the next key after resume
	}
	total, err := countCells(old, lower)
	if err != nil {
		return err
	}
	logger.Info("Converting the embedded store to data_points blocks", "cells", total, "resuming", resume != nil)
	it, err := old.NewIter(&pebble.IterOptions{LowerBound: lower})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()

	c := &converter{db: newDB, b: newDB.NewBatch()}
	defer func() { err = errors.Join(err, c.b.Close()) }()
	start, lastLog := time.Now(), time.Now()
	var done int64
	now := time.Now().Unix()
	for ok := it.First(); ok; ok = it.Next() {
		key := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		switch {
		case len(key) > 0 && key[0] == tableData:
			if err := c.cell(key, v, now); err != nil {
				return err
			}
			done++
		case len(key) > 9 && key[0] == tableExpiry && key[9] == tableData:
			// Cells get block index keys from c.cell.
		case bytes.Equal(key, layoutKey):
			// Written last.
		default:
			if err := c.b.Set(key, v, nil); err != nil {
				return err
			}
		}
		if c.cells >= convertBatchCells || c.b.Len() >= 32<<20 {
			if err := c.commit(key); err != nil {
				return err
			}
			if time.Since(lastLog) >= convertLogEvery {
				lastLog = time.Now()
				rate := float64(done) / time.Since(start).Seconds()
				left := time.Duration(float64(total-done)/max(rate, 1)) * time.Second
				logger.Info("Converting the embedded store", "cells_done", done, "cells", total, "cells_per_second", int64(rate), "time_left", left.Round(time.Second))
			}
			time.Sleep(convertBatchPause)
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if err := c.flush(); err != nil {
		return err
	}
	if err := c.b.Delete(convertProgressKey, nil); err != nil {
		return err
	}
	if err := c.b.Set(layoutKey, layoutVersion, nil); err != nil {
		return err
	}
	if err := c.b.Commit(pebble.Sync); err != nil {
		return err
	}
	logger.Info("Converted the embedded store's cells", "cells", done, "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// countCells counts the old data_points keys from lower on, for the
// progress log.
func countCells(old *pebble.DB, lower []byte) (int64, error) {
	lo := []byte{tableData}
	if bytes.Compare(lower, lo) > 0 {
		lo = lower
	}
	it, err := old.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: []byte{tableData + 1}})
	if err != nil {
		return 0, err
	}
	var n int64
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, errors.Join(it.Error(), it.Close())
}

// converter builds the blocks of the cells it is given in key order.
type converter struct {
	db    *pebble.DB
	b     *pebble.Batch
	cells int

	row    []byte
	window uint32
	block  []cellblock.Cell
	arena  []byte
	key    []byte
}

func (c *converter) cell(key, value []byte, now int64) error {
	rowKey, rest, err := cutEscaped(key[1:])
	if err != nil || len(rest) != 4 {
		return fmt.Errorf("%w: data_points key %x", errCorrupt, key)
	}
	ent, err := decodeEntry(value)
	if err != nil {
		return fmt.Errorf("%w: data_points key %x", err, key)
	}
	if ent.tombstone || !ent.live(now) {
		return nil // nothing a read would return, nor a write find
	}
	col := binary.BigEndian.Uint32(rest)
	if len(c.block) == 0 || windowOf(rowKey, col) != c.window || !bytes.Equal(rowKey, c.row) {
		if err := c.flush(); err != nil {
			return err
		}
		c.row = append(c.row[:0], rowKey...)
		c.window = windowOf(rowKey, col)
	}
	n := len(c.arena)
	c.arena = append(c.arena, ent.value...)
	c.block = append(c.block, cellblock.Cell{Column: col, WriteTime: ent.writeTime, Expiry: ent.expiry, Value: c.arena[n:len(c.arena):len(c.arena)]})
	c.cells++
	return nil
}

// flush merges the block being built into the batch, with the expiry
// index keys its TTL'd cells need.
func (c *converter) flush() error {
	if len(c.block) == 0 {
		return nil
	}
	c.key = appendBlockKey(c.key[:0], c.row, c.window)
	if err := c.b.Merge(c.key, cellblock.Append(nil, c.block), nil); err != nil {
		return err
	}
	last := int64(-1)
	for i := range c.block {
		if exp := c.block[i].Expiry; exp != 0 {
			if due := blockPurgeTime(exp, defaultBlockPurgeStep); due != last {
				last = due
				if err := c.b.Set(appendExpiryKey(nil, due, c.key), nil, nil); err != nil {
					return err
				}
			}
		}
	}
	c.block, c.arena = c.block[:0], c.arena[:0]
	return nil
}

// commit writes the batch with the last old key it covers, synced, and
// starts the next one.
func (c *converter) commit(lastKey []byte) error {
	if err := c.flush(); err != nil {
		return err
	}
	if err := c.b.Set(convertProgressKey, lastKey, nil); err != nil {
		return err
	}
	if err := c.b.Commit(pebble.Sync); err != nil {
		return err
	}
	if err := c.b.Close(); err != nil {
		return err
	}
	c.b, c.cells = c.db.NewBatch(), 0
	return nil
}

// A store of layout kairosdb-2 keeps rollup rows in windows of 2^24 columns
// like raw rows; this build keeps them in larger ones (windowOf). Open
// turns the one into the other in place before anything reads or writes
// (densify): each rollup row is read (each block merged, as a read sees
// it), its cells reconciled as the merge operator does (mergeBlocks), and
// set as its new blocks with their expiry index keys while its old keys
// are deleted, in the same batch: a row is converted whole or not at all,
// so a conversion killed at any moment is resumed by the next Open, which
// finds the rows done already in their new blocks and skips them. A batch carries whole rows, up to
// densifyBatchRows or 16 MiB, and is synced: Pebble keeps an unsynced
// batch's log record in the process until a later sync. The layout key,
// set last, ends it. The old blocks' expiry index keys stay; the purge
// drops them when it finds their blocks gone.
var layoutVersionWindows = []byte("kairosdb-2")

// Knobs of densify, variables for the test that kills it midway.
var (
	densifyLogEvery  = 10 * time.Second
	densifyBatchRows = 256
	densifyRowPause  time.Duration
)

// densify converts a store of layout kairosdb-2 (see above); any other
// layout is left to checkLayout.
func (e *Engine) densify() (err error) {
	v, closer, err := e.db.Get(layoutKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	old := bytes.Equal(v, layoutVersionWindows)
	if err := closer.Close(); err != nil || !old {
		return err
	}
	e.logger.Info("Converting the embedded store's rollup rows to larger blocks")
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tableBlock}, UpperBound: []byte{tableBlock + 1}})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	start, lastLog := time.Now(), time.Now()
	var rows, converted int64
	var blocks [][]byte
	var keys [][]byte
	var xkey []byte
	b := e.db.NewBatch()
	defer func() { err = errors.Join(err, b.Close()) }()
	batchRows := 0
	for ok := it.First(); ok; {
		rowKey, rest, err := cutEscaped(it.Key()[1:])
		if err != nil || len(rest) != 4 {
			return fmt.Errorf("%w: data_points block key %x", errCorrupt, it.Key())
		}
		rowKey = bytes.Clone(rowKey)
		prefix := appendBlockPrefix(nil, rowKey)
		if windowShiftOf(rowKey) == windowShift {
			ok = it.SeekGE(prefixEnd(prefix))
			continue
		}
		rows++
		blocks, keys = blocks[:0], keys[:0]
		for ; ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
			v, err := it.ValueAndErr()
			if err != nil {
				return err
			}
			keys = append(keys, bytes.Clone(it.Key()))
			blocks = append(blocks, bytes.Clone(v))
		}
		cells, err := mergeBlocks(blocks)
		if err != nil {
			return fmt.Errorf("pebblekv: data_points row %q: %w", rowKey, err)
		}
		// The cells in their new blocks; a row whose keys are those already
		// was converted before a kill (or never reached its second old
		// window), since an old window above 0 is never a new one.
		type newBlock struct {
			key   []byte
			cells []cellblock.Cell
		}
		var news []newBlock
		for i := 0; i < len(cells); {
			w := windowOf(rowKey, cells[i].Column)
			j := i + 1
			for j < len(cells) && windowOf(rowKey, cells[j].Column) == w {
				j++
			}
			news = append(news, newBlock{appendBlockKey(nil, rowKey, w), cells[i:j]})
			i = j
		}
		if slices.EqualFunc(keys, news, func(k []byte, n newBlock) bool { return bytes.Equal(k, n.key) }) {
			continue
		}
		for _, k := range keys {
			if !slices.ContainsFunc(news, func(n newBlock) bool { return bytes.Equal(k, n.key) }) {
				if err := b.Delete(k, nil); err != nil {
					return err
				}
			}
		}
		for _, n := range news {
			if err := errors.Join(b.Set(n.key, cellblock.Append(nil, n.cells), nil), indexBlock(b, n.key, n.cells, e.blockPurgeStep, &xkey)); err != nil {
				return err
			}
		}
		converted++
		if batchRows++; batchRows >= densifyBatchRows || b.Len() >= 16<<20 {
			if err := b.Commit(pebble.Sync); err != nil {
				return err
			}
			b.Reset()
			batchRows = 0
			if time.Since(lastLog) >= densifyLogEvery {
				lastLog = time.Now()
				e.logger.Info("Converting the embedded store's rollup rows", "rows_done", rows, "rows_converted", converted, "rows_per_second", int64(float64(rows)/time.Since(start).Seconds()))
			}
			time.Sleep(densifyRowPause)
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if err := b.Set(layoutKey, layoutVersion, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	e.logger.Info("Converted the embedded store's rollup rows", "rows", rows, "rows_converted", converted, "duration", time.Since(start).Round(time.Millisecond))
	return nil
}
