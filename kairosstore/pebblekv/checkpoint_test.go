package pebblekv

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// TestCheckpointWhileWriting takes a checkpoint while a writer commits
// batches as fast as it can, and reopens it with this build: every batch
// acknowledged before the call is there, every key byte-equal to the
// source's (write times and expiries included; data_points cells compared
// cell by cell, since a block's bytes depend on how its operands merged),
// a batch that ran during the call is there whole or not at all, and none
// issued after the call returned is.
func TestCheckpointWhileWriting(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	opts := DefaultOptions()
	opts.Sync = false // acknowledged but not synced: the checkpoint must flush the WAL
	src := open(t, filepath.Join(root, "db"), opts)
	require.NoError(t, src.Setup(ctx))

	const cols = 10
	base := time.Now().UnixMilli()
	rowKey := func(i int64) []byte { return fmt.Appendf(nil, "row-%08d", i) }
	var acked, issued atomic.Int64
	issued.Store(-1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var writeErr error
	go func() {
		defer wg.Done()
		for i := int64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b := &engine.Batch{WriteTime: base + i, MetricNames: []string{fmt.Sprintf("m%08d", i)}}
			for c := range uint32(cols) {
				b.Cells = append(b.Cells, engine.Cell{Key: rowKey(i), Column: c, Value: fmt.Appendf(nil, "v%d.%d", i, c), TTL: int32(i%3) * 100_000})
			}
			issued.Store(i)
			if writeErr = src.Write(ctx, b); writeErr != nil {
				return
			}
			acked.Store(i + 1)
		}
	}()
	require.Eventually(t, func() bool { return acked.Load() >= 200 }, 30*time.Second, time.Millisecond)

	snap := filepath.Join(root, "db", "snapshots", "one")
	before := acked.Load()
	require.NoError(t, src.Checkpoint(ctx, snap))
	lastIssued := issued.Load()
	// Let the writer go on after the call before stopping it, so that a
	// checkpoint that kept reading the live WAL would show it.
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	require.NoError(t, writeErr)
	require.Greater(t, acked.Load(), lastIssued+1, "the writer went on after the checkpoint")

	err := src.Checkpoint(ctx, snap)
	require.ErrorContains(t, err, "it exists; give a new directory")

	// The source still opens with the snapshot inside its directory.
	dst := open(t, snap, DefaultOptions())
	require.NoError(t, dst.Setup(ctx))

	cellsOf := func(e *Engine, key []byte) []cellblock.Cell {
		prefix := appendBlockPrefix(nil, key)
		it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		require.NoError(t, err)
		defer it.Close()
		var cells []cellblock.Cell
		for ok := it.First(); ok; ok = it.Next() {
			arena := make([]byte, 0, 1024)
			got, err := decodeBlock(nil, &arena, bytes.Clone(it.Value()))
			require.NoError(t, err)
			cells = append(cells, got...)
		}
		return cells
	}
	for i := int64(0); i <= acked.Load(); i++ {
		got := cellsOf(dst, rowKey(i))
		switch {
		case i < before:
			require.Len(t, got, cols, "batch %d was acknowledged before the checkpoint", i)
		case i > lastIssued:
			require.Empty(t, got, "batch %d was issued after the checkpoint returned", i)
		default:
			require.Contains(t, []int{0, cols}, len(got), "batch %d is torn", i)
		}
		if len(got) > 0 {
			require.Equal(t, cellsOf(src, rowKey(i)), got, "batch %d", i)
			require.Equal(t, base+i, got[0].WriteTime)
		}
	}
	// Every other key of the copy (index rows, metric names, expiry
	// index) is byte-equal to the source's; only the high-water mark moved on.
	it, err := dst.db.NewIter(nil)
	require.NoError(t, err)
	keys := 0
	for ok := it.First(); ok; ok = it.Next() {
		if it.Key()[0] == tableData || bytes.Equal(it.Key(), highWaterKey) {
			continue
		}
		v, closer, err := src.db.Get(it.Key())
		require.NoError(t, err, "key %x", it.Key())
		require.Equal(t, v, it.Value(), "key %x", it.Key())
		require.NoError(t, closer.Close())
		keys++
	}
	require.NoError(t, it.Close())
	require.Greater(t, keys, int(before))
	require.NoError(t, dst.Close())

	// The source reopens with a snapshots directory inside its own.
	require.NoError(t, src.Close())
	src = open(t, filepath.Join(root, "db"), DefaultOptions())
	require.Len(t, cellsOf(src, rowKey(0)), cols)
	ok, err := IsStore(snap)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = IsStore(filepath.Join(root, "nothing"))
	require.NoError(t, err)
	require.False(t, ok)
}

func TestCheckpointClosed(t *testing.T) {
	e := open(t, t.TempDir(), DefaultOptions())
	require.NoError(t, e.Close())
	require.ErrorIs(t, e.Checkpoint(t.Context(), filepath.Join(t.TempDir(), "x")), ErrClosed)
}
