package pebblekv

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// TestWriteAllocsPerCell bounds the allocations of a known-series write:
// one cell in each of 2,000 rows, as a remote-write request of one sample
// per series brings them. Each cell was several allocations before issue
// #31's third pass (the partition's name in the transaction's map, the
// block's bit stream); the bound catches one coming back.
func TestWriteAllocsPerCell(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e := open(t, "store", opts)
	const rows = 2000
	batch := &engine.Batch{Cells: make([]engine.Cell, rows)}
	keys := make([][]byte, rows)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "load_metric_%d\x00\x00\x00\x01\x3c\x69\xda\x9c\x00\x00\x0dkairos_doublehost=server%d:job=node:", i%100, i)
	}
	value := []byte{0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18}
	column := uint32(0)
	write := func() {
		column += 15000
		batch.WriteTime = time.Now().UnixMilli()
		for i := range batch.Cells {
			batch.Cells[i] = engine.Cell{Key: keys[i], Column: column, Value: value}
		}
		require.NoError(t, e.Write(t.Context(), batch))
	}
	write() // every row known
	perCell := testing.AllocsPerRun(20, write) / rows
	t.Logf("%.3f allocations per cell", perCell)
	require.Less(t, perCell, 0.5)
}

// TestMergeAllocs bounds the allocations of the merge operator folding
// the operands a flush finds under a known series' block: eight blocks of
// one cell, newest first. A copy of each operand, or a result grown from
// nothing, goes over the bound.
func TestMergeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	key := appendBlockKey(nil, []byte("load_metric_1\x00\x00\x00\x01\x3c\x69\xda\x9c\x00\x00\x0dkairos_doublehost=server1:"), 0)
	var ops [][]byte
	for i := range 8 {
		c := cellblock.Cell{Column: uint32(8-i) * 15000, WriteTime: int64(8 - i), Value: []byte{0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, byte(i)}}
		ops = append(ops, cellblock.Append(nil, []cellblock.Cell{c}))
	}
	var out []byte
	merge := func() {
		m, err := merger.Merge(key, ops[0])
		require.NoError(t, err)
		for _, op := range ops[1:] {
			require.NoError(t, m.MergeOlder(op))
		}
		out, _, err = m.Finish(true)
		require.NoError(t, err)
	}
	allocs := testing.AllocsPerRun(50, merge)
	r, err := cellblock.NewReader(out)
	require.NoError(t, err)
	require.Equal(t, 8, r.Len())
	t.Logf("%.0f allocations per merge of %d operands", allocs, len(ops))
	require.LessOrEqual(t, allocs, 12.0)
}

// TestWriteBytesPerCell bounds the bytes a write of large requests
// allocates, the year load's shape: 20 rows of 10,000 cells in one batch.
// A TTL check that keeps a nil error per cell, in a slice grown by
// doubling, goes over the bound.
func TestWriteBytesPerCell(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e := open(t, "store", opts)
	const rows, perRow = 20, 10_000
	batch := &engine.Batch{Cells: make([]engine.Cell, rows*perRow)}
	keys := make([][]byte, rows)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "load_metric_0\x00\x00\x00\x01\x3c\x69\xda\x9c\x00\x00\x0dkairos_doublehost=server%d:job=node:", i)
	}
	values := make([]byte, 8*len(batch.Cells))
	column := uint32(0)
	write := func() {
		batch.WriteTime = time.Now().UnixMilli()
		for i := range batch.Cells {
			v := values[8*i : 8*i+8]
			binary.BigEndian.PutUint64(v, math.Float64bits(float64(column)*1.5))
			batch.Cells[i] = engine.Cell{Key: keys[i/perRow], Column: column + uint32(i%perRow)*60, Value: v}
		}
		column += 60 * perRow
		require.NoError(t, e.Write(t.Context(), batch))
	}
	write()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 5
	for range n {
		write()
	}
	runtime.ReadMemStats(&after)
	perCell := float64(after.TotalAlloc-before.TotalAlloc) / (n * rows * perRow)
	t.Logf("%.1f bytes allocated per cell", perCell)
	require.Less(t, perCell, 25.0)
}
