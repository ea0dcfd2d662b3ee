package pebblekv

import (
	"encoding/binary"
	"errors"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
)

// purgeChunk bounds how many expiry index keys one purge step handles while
// holding the write lock, so writers wait at most one step.
const purgeChunk = 1000

func (e *Engine) purgeLoop() {
	defer close(e.done)
	ticker := time.NewTicker(e.opts.PurgeInterval)
	defer ticker.Stop()
	headTicker := time.NewTicker(max(e.opts.HeadMaxAge/4, time.Millisecond))
	defer headTicker.Stop()
	for {
		select {
		case <-e.stop:
			return
		case now := <-headTicker.C:
			if err := e.rotateIfOld(now); err != nil {
				e.logger.Warn("Cannot drain the head into Pebble; its cells stay in memory and in the head log", "err", err)
			}
		case <-ticker.C:
			start := time.Now()
			n, err := e.purge()
			if err != nil {
				e.logger.Warn("Purge of expired entries failed", "err", err, "purged", n)
				continue
			}
			if n > 0 {
				e.logger.Debug("Purged expired entries", "purged", n, "duration", time.Since(start))
			}
		}
	}
}

// purge removes every entry whose expiry has passed, TTL'd entries and
// tombstones past their grace alike, and returns how many it removed. Reads
// already hide them; this only reclaims space.
func (e *Engine) purge() (int, error) {
	now := e.now().Unix()
	// Expiry keys below x|now+1 are due.
	upper := appendExpiryKey(nil, now+1, nil)
	total := 0
	for {
		select {
		case <-e.stop:
			return total, nil
		default:
		}
		n, more, err := e.purgeStep(upper)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

// purgeStep handles up to purgeChunk due expiry keys and deletes them, so
// the next step starts at the first due key again.
func (e *Engine) purgeStep(upper []byte) (purged int, more bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return 0, false, nil
	}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tableExpiry}, UpperBound: upper})
	if err != nil {
		return 0, false, err
	}
	// When something is due, in the index or in the head (whose cells
	// are indexed when they drain), the head's cells must be in the blocks
	// the step rewrites: one that lost to an expired cell would otherwise
	// show once that is purged. And none may stay in the log, where a
	// replay would bring it back the same way, or from under a tombstone
	// purged past its grace. (With TTLs on every write, something is due
	// at most purges, so the head drains about once a purge interval.)
	if it.First() || e.head != nil && e.head.minExpiry <= e.now().Unix() {
		// The iterator is made again after the rotation, to see the expiry
		// index keys of the cells it drained.
		if err := errors.Join(e.rotate(), it.Close()); err != nil {
			return 0, false, err
		}
		if it, err = e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tableExpiry}, UpperBound: upper}); err != nil {
			return 0, false, err
		}
	}
	b := e.db.NewBatch()
	defer func() { err = errors.Join(err, it.Close(), b.Close()) }()
	n := 0
	for ok := it.First(); ok && n < purgeChunk; ok = it.Next() {
		n++
		xkey := it.Key()
		if len(xkey) < 9 {
			return purged, false, errCorrupt
		}
		if len(xkey) > 9 && xkey[9] == tableBlock {
			n, err := e.purgeBlock(b, xkey[9:])
			if err != nil {
				return purged, false, err
			}
			purged += n
			if err := b.Delete(xkey, nil); err != nil {
				return purged, false, err
			}
			continue
		}
		gone, err := e.expired(xkey[9:], int64(binary.BigEndian.Uint64(xkey[1:9])))
		if err != nil {
			return purged, false, err
		}
		if gone {
			purged++
			if err := b.Delete(xkey[9:], nil); err != nil {
				return purged, false, err
			}
		}
		if err := b.Delete(xkey, nil); err != nil {
			return purged, false, err
		}
	}
	more = it.Valid()
	if b.Empty() {
		return purged, more, nil
	}
	// Losing a purge in a crash only means doing it again: no fsync.
	return purged, more, b.Commit(pebble.NoSync)
}

// expired reports whether key still holds the entry the expiry key was made
// for. A rewrite since then has another expiry (or none) and must stay.
func (e *Engine) expired(key []byte, expiry int64) (bool, error) {
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer closer.Close()
	ent, err := decodeEntry(v)
	if err != nil {
		return false, err
	}
	return ent.expiry == expiry, nil
}

// purgeBlock rewrites the block under key without its expired cells (all
// of them, not only those the index key was made for: they are as gone) and
// returns how many it dropped. The block is read merged, so the Set
// replaces every operand; under Engine.mu no write can come between.
func (e *Engine) purgeBlock(b *pebble.Batch, key []byte) (int, error) {
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	var arena []byte
	cells, err := decodeBlock(nil, &arena, v)
	if err != nil {
		// Left as it is, for an operator to see, and not in the way of the
		// purge of everything after it.
		e.logger.Error("Corrupt data_points block not purged", "block", describeBlockKey(key), "err", err)
		return 0, nil
	}
	now := e.now().Unix()
	kept := slices.DeleteFunc(slices.Clone(cells), func(c cellblock.Cell) bool { return cellExpired(&c, now) })
	switch {
	case len(kept) == len(cells):
		return 0, nil
	case len(kept) == 0:
		return len(cells), b.Delete(key, nil)
	}
	return len(cells) - len(kept), b.Set(key, cellblock.Append(nil, kept), nil)
}
