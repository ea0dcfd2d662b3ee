package pebblekv

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// TestCompact: a full compaction rewrites every file (Pebble's manual
// compaction alone moves a flushed file down as it is), merges the operands
// of a block written in several requests, the last write of a cell still
// wins, and the size it reports is the sstables' after it.
func TestCompact(t *testing.T) {
	ctx := t.Context()
	e := open(t, t.TempDir(), DefaultOptions())
	require.NoError(t, e.Setup(ctx))
	wt := time.Now().UnixMilli()
	for i := range 5 {
		require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: wt + int64(i), Cells: []engine.Cell{
			{Key: []byte("k"), Column: uint32(i), Value: []byte{byte(i)}},
			{Key: []byte("k"), Column: 100, Value: []byte{byte(100 + i)}},
		}}))
	}
	require.Zero(t, e.db.Metrics().Total().TablesSize, "everything is still in the memtable")
	size, err := e.Compact(ctx)
	require.NoError(t, err)
	require.Positive(t, size)
	m := e.db.Metrics()
	require.Equal(t, size, m.Total().TablesSize)
	require.Zero(t, m.Compact.MoveCount, "no file moved without a rewrite")
	require.Positive(t, m.Compact.DefaultCount)
	require.Equal(t, 1, countKeys(t, e, tableBlock, "k"), "one block key")
	require.Equal(t, []string{"0=\x00", "1=\x01", "2=\x02", "3=\x03", "4=\x04", "100=h"}, cellValues(t, e, "k"))
}

// TestCompactEmpty: a store with nothing but its layout compacts without
// error and reads the same after.
func TestCompactEmpty(t *testing.T) {
	ctx := t.Context()
	e := open(t, t.TempDir(), DefaultOptions())
	require.NoError(t, e.Setup(ctx))
	_, err := e.Compact(ctx)
	require.NoError(t, err)
	require.Empty(t, cellValues(t, e, "k"))
	require.NoError(t, e.Ready(ctx))
}
