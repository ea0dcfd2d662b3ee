package pebblekv

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Checkpoint writes a consistent copy of the store into dir, which must not
// exist, while the engine keeps serving: Pebble's checkpoint, with its
// tables hard-linked where dir is on the store's file system (so it costs
// little room until compactions replace the linked files) and its WAL
// copied. The WAL is synced first, so every write acknowledged before the
// call is in the copy, Sync or not; a write that runs during the call is in
// it whole or not at all, since each transaction commits as one batch. The
// copy holds the layout key and Pebble's OPTIONS (merger included), so this
// build opens it as a store of its own: Open(dir) is the restore.
func (e *Engine) Checkpoint(ctx context.Context, dir string) error {
	if err := e.usable(ctx); err != nil {
		return err
	}
	// One checkpoint at a time: a second one at the same moment would copy
	// the same WAL again for nothing and double the disk traffic.
	e.ckMu.Lock()
	defer e.ckMu.Unlock()
	if err := e.usable(ctx); err != nil {
		return err
	}
	if err := e.checkpoint(dir); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cannot snapshot the store into %q: it exists; give a new directory", dir)
		}
		return fmt.Errorf("cannot snapshot the store into %q: %w", dir, err)
	}
	return nil
}

// checkpoint drains the head and copies the store with writes held back,
// so that a write is in the copy whole, its row keys with its cells. The
// head's log is not copied: what it holds is in Pebble after the drain.
func (e *Engine) checkpoint(dir string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.drainHeadLocked(); err != nil {
		return err
	}
	return e.db.Checkpoint(dir, pebble.WithFlushedWAL())
}

// IsStore reports whether dir holds a Pebble store, without opening it or
// creating anything (Open creates an empty store where there is none).
func IsStore(dir string) (bool, error) {
	desc, err := pebble.Peek(dir, vfs.Default)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return desc.Exists, nil
}
