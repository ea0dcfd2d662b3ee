package pebblekv

import "context"

// Compact flushes the memtable and rewrites every sstable of the store
// through the merge operator and the store's compression, so that the
// store's size says what its data costs at rest rather than how far
// background compaction has got (BENCHMARKS.md, "bytes per sample"). It
// returns the bytes of the sstables after it. Other reads and writes may
// run meanwhile; it takes as long as rewriting the whole store does.
func (e *Engine) Compact(ctx context.Context) (int64, error) {
	if err := e.usable(ctx); err != nil {
		return 0, err
	}
	if err := e.db.Flush(); err != nil {
		return 0, err
	}
	// Every key of the store starts with its table's byte, so [0x00, 0xff
	// 0xff) holds all of them.
	if err := e.db.Compact(ctx, []byte{0}, []byte{0xff, 0xff}, true); err != nil {
		return 0, err
	}
	return e.db.Metrics().Total().TablesSize, nil
}
