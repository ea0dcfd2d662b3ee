package pebblekv

import (
	"context"
	"errors"

	"github.com/cockroachdb/pebble/v2"
)

// Compact rewrites every key of the store into the bottom level with the
// store's merge operator and the bottom level's compression, so that the
// store's size says what its data costs at rest rather than how far
// background compaction has got (BENCHMARKS.md, "Bytes per sample at
// rest"). It returns the bytes of the sstables after it. Pebble's own
// manual compaction moves a file that overlaps nothing below it without
// rewriting it, keeping the memtable flush's faster compression; so every
// key is written again first, at its current value, over itself, and the
// compaction then has to merge each file with its old copy. Writes wait
// while the keys are written again; it takes as long as rewriting the
// whole store twice.
func (e *Engine) Compact(ctx context.Context) (int64, error) {
	if err := e.usable(ctx); err != nil {
		return 0, err
	}
	// Flushed first, the keys' old versions are in sstables that the
	// flush of their new versions overlaps.
	for _, step := range []func() error{e.db.Flush, func() error { return e.rewriteAll(ctx) }, e.db.Flush} {
		if err := step(); err != nil {
			return 0, err
		}
	}
	// Every key of the store starts with its table's byte, so [0x00, 0xff
	// 0xff) holds all of them.
	if err := e.db.Compact(ctx, []byte{0}, []byte{0xff, 0xff}, true); err != nil {
		return 0, err
	}
	return e.db.Metrics().Total().TablesSize, nil
}

// rewriteAll sets every key to its current value, under the engine's lock
// so that no write lands between the read and the rewrite of a key. The
// snapshot it reads from is closed before the compaction, which would
// otherwise keep the old versions.
func (e *Engine) rewriteAll(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.drainHeadLocked(); err != nil {
		return err
	}
	snap := e.db.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIterWithContext(ctx, nil)
	if err != nil {
		return err
	}
	b := e.db.NewBatch()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return joinClose(err, it, b)
		}
		if err := b.Set(it.Key(), v, nil); err != nil {
			return joinClose(err, it, b)
		}
		if b.Len() > 16<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return joinClose(err, it, b)
			}
			b.Reset()
		}
	}
	if err := joinClose(it.Error(), it, nil); err != nil {
		return joinClose(err, nil, b)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return joinClose(err, nil, b)
	}
	return b.Close()
}

// joinClose closes what of it and b is not nil and joins their errors to err.
func joinClose(err error, it *pebble.Iterator, b *pebble.Batch) error {
	errs := []error{err}
	if it != nil {
		errs = append(errs, it.Close())
	}
	if b != nil {
		errs = append(errs, b.Close())
	}
	return errors.Join(errs...)
}
