package pebblekv

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/enginetest"
)

func open(t testing.TB, dir string, opts Options) *Engine {
	t.Helper()
	e, err := Open(dir, opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func TestEngine(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		return open(t, t.TempDir(), DefaultOptions())
	})
}

func TestReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	wt := time.Now().UnixMilli()
	e, err := Open(dir, DefaultOptions(), nil)
	require.NoError(t, err)
	require.NoError(t, e.Setup(ctx))
	require.NoError(t, e.Write(ctx, &engine.Batch{
		WriteTime:   wt,
		Cells:       []engine.Cell{{Key: []byte("k"), Column: 1, Value: []byte("v")}},
		MetricNames: []string{"m"},
	}))
	require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: wt + 100, Rows: [][]byte{[]byte("gone")}}))
	require.NoError(t, e.Close())
	require.ErrorIs(t, e.Close(), ErrClosed)
	require.ErrorIs(t, e.Ready(ctx), ErrClosed)

	e = open(t, dir, DefaultOptions())
	require.NoError(t, e.Setup(ctx))
	var got []string
	require.NoError(t, e.Cells(ctx, []byte("k"), 0, 10, func(c uint32, v []byte) error {
		got = append(got, fmt.Sprintf("%d=%s", c, v))
		return nil
	}))
	require.Equal(t, []string{"1=v"}, got)
	require.NoError(t, e.MetricNames(ctx, func(name string) error {
		got = append(got, name)
		return nil
	}))
	require.Equal(t, []string{"1=v", "m"}, got)

	// The tombstone survived too.
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: wt + 50, Cells: []engine.Cell{{Key: []byte("gone"), Column: 1, Value: []byte("old")}}}))
	require.Zero(t, storedCells(t, e, "gone"))
}

func TestOpenLockedDirectory(t *testing.T) {
	dir := t.TempDir()
	first := open(t, dir, DefaultOptions())

	_, err := Open(dir, DefaultOptions(), nil)
	require.ErrorContains(t, err, fmt.Sprintf("pebble directory %q is locked; is another adapter using it? ", dir))

	require.NoError(t, first.Close())
	open(t, dir, DefaultOptions())
}

func TestOpenUnreadableDirectory(t *testing.T) {
	file := t.TempDir() + "/file"
	fs := vfs.Default
	f, err := fs.Create(file, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	_, err = Open(file, DefaultOptions(), nil)
	require.ErrorContains(t, err, fmt.Sprintf("cannot create pebble directory %q", file))
}

func TestOpenOtherLayout(t *testing.T) {
	fs := vfs.NewMem()
	opts := DefaultOptions()
	opts.FS = fs
	e, err := Open("db", opts, nil)
	require.NoError(t, err)
	require.NoError(t, e.db.Set(layoutKey, []byte("kairosdb-0"), pebble.Sync))
	require.NoError(t, e.Close())

	_, err = Open("db", opts, nil)
	require.EqualError(t, err, `cannot open pebble store in "db": store layout "kairosdb-0", this build reads "kairosdb-3"`)
}

// countKeys counts the raw keys of a table whose partition is rowKey (all of
// the table when rowKey is empty), expired or not.
func countKeys(t *testing.T, e *Engine, table byte, rowKey string) int {
	t.Helper()
	// The head's cells are not in Pebble's keys until it drains.
	require.NoError(t, e.drainHead())
	prefix := []byte{table}
	if rowKey != "" {
		prefix = appendEscaped(prefix, rowKey)
	}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	require.NoError(t, err)
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	require.NoError(t, it.Close())
	return n
}

// storedCells counts the cells the blocks of rowKey hold, expired or not.
func storedCells(t *testing.T, e *Engine, rowKey string) int {
	t.Helper()
	// The head's cells are not in Pebble's keys until it drains.
	require.NoError(t, e.drainHead())
	prefix := appendBlockPrefix(nil, []byte(rowKey))
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	require.NoError(t, err)
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		r, err := cellblock.NewReader(it.Value())
		require.NoError(t, err)
		n += r.Len()
	}
	require.NoError(t, it.Close())
	return n
}

func TestPurge(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	opts.PurgeInterval = time.Hour // purge runs by hand below
	opts.TombstoneGrace = 100 * time.Second
	e := open(t, "db", opts)
	e.blockPurgeStep = 1
	ctx := t.Context()
	clock := time.Unix(1_700_000_000, 0)
	e.now = func() time.Time { return clock }
	wt := clock.UnixMilli()

	key := []byte("k")
	require.NoError(t, e.Write(ctx, &engine.Batch{
		WriteTime: wt,
		Cells: []engine.Cell{
			{Key: key, Column: 1, Value: []byte("ttl 10"), TTL: 10},
			{Key: key, Column: 2, Value: []byte("ttl 10, rewritten without"), TTL: 10},
			{Key: key, Column: 3, Value: []byte("no ttl")},
		},
		RowKeys: []engine.IndexedRowKey{{Metric: "m", RowTime: 0, DataType: "kairos_long", TTL: 10}},
	}))
	require.NoError(t, e.Write(ctx, &engine.Batch{
		WriteTime: wt + 1,
		Cells:     []engine.Cell{{Key: key, Column: 2, Value: []byte("kept")}},
	}))
	require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: wt, Rows: [][]byte{[]byte("deleted")}}))
	require.Equal(t, 3, countKeys(t, e, tableExpiry, ""), "one for the block (its TTL'd cells expire in the same step), the row key's and the tombstone's")

	n, err := e.purge()
	require.NoError(t, err)
	require.Zero(t, n, "nothing is due yet")

	clock = clock.Add(10 * time.Second)
	n, err = e.purge()
	require.NoError(t, err)
	require.Equal(t, 2, n, "the TTL'd cell and row key")
	require.Equal(t, 2, storedCells(t, e, "k"), "column 2 was rewritten without TTL")
	require.Zero(t, countKeys(t, e, tableRowKeys, ""))
	require.Equal(t, 1, countKeys(t, e, tableExpiry, ""), "the tombstone's")

	// Within its grace the tombstone hides older writes; past it, it is
	// purged and they show, as in Cassandra after gc_grace_seconds.
	old := &engine.Batch{WriteTime: wt - 1, Cells: []engine.Cell{{Key: []byte("deleted"), Column: 1, Value: []byte("old")}}}
	require.NoError(t, e.Write(ctx, old))
	require.Zero(t, storedCells(t, e, "deleted"))
	clock = clock.Add(100 * time.Second)
	n, err = e.purge()
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, countKeys(t, e, tableDataTomb, ""))
	require.Zero(t, countKeys(t, e, tableExpiry, ""))
	require.NoError(t, e.Write(ctx, old))
	require.Equal(t, 1, storedCells(t, e, "deleted"))
}

func TestBackgroundPurge(t *testing.T) {
	opts := DefaultOptions()
	opts.PurgeInterval = 100 * time.Millisecond
	e := open(t, t.TempDir(), opts)
	e.blockPurgeStep = 1
	ctx := t.Context()
	require.NoError(t, e.Write(ctx, &engine.Batch{
		WriteTime: time.Now().UnixMilli(),
		Cells: []engine.Cell{
			{Key: []byte("k"), Column: 1, Value: []byte("a"), TTL: 1},
			{Key: []byte("k"), Column: 2, Value: []byte("b")},
		},
	}))
	require.Eventually(t, func() bool {
		return storedCells(t, e, "k") == 1 && countKeys(t, e, tableExpiry, "") == 0
	}, 5*time.Second, 50*time.Millisecond)
}

func TestWriteRejectsBadTTL(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e := open(t, "db", opts)
	for _, ttl := range []int32{-1, maxTTL + 1} {
		err := e.Write(t.Context(), &engine.Batch{
			WriteTime: 1,
			Cells: []engine.Cell{
				{Key: []byte("k"), Column: 1, Value: []byte("ok")},
				{Key: []byte("k"), Column: 2, Value: []byte("bad"), TTL: ttl},
			},
		})
		require.EqualError(t, err, fmt.Sprintf("ttl %d out of range [0, 630720000]", ttl))
	}
	require.Zero(t, countKeys(t, e, tableBlock, ""), "nothing of a rejected batch is written")
}

// cellsPerBatch is the size of one benchmark write: 1,000 series with 10
// samples each.
const cellsPerBatch = 10000

// BenchmarkWrite writes batches of new cells. With lookup=false each write
// is newer than everything in its partitions (the common case) and goes
// blind; with lookup=true every partition holds a newer cell, so each cell is
// looked up first.
func BenchmarkWrite(b *testing.B) {
	for _, sync := range []bool{false, true} {
		for _, lookup := range []bool{false, true} {
			b.Run(fmt.Sprintf("sync=%t/lookup=%t", sync, lookup), func(b *testing.B) {
				opts := DefaultOptions()
				opts.Sync = sync
				e := open(b, b.TempDir(), opts)
				keys := make([][]byte, cellsPerBatch/10)
				for i := range keys {
					keys[i] = fmt.Appendf(nil, "sys.cpu\x00\x00\x00\x01\x3c\x69\xda\x9c\x00\x00\x0bkairos_longhost=server%d:", i)
				}
				if lookup {
					newer := &engine.Batch{WriteTime: math.MaxInt64}
					for _, k := range keys {
						newer.Cells = append(newer.Cells, engine.Cell{Key: k, Column: 1})
					}
					require.NoError(b, e.Write(b.Context(), newer))
				}
				batch := &engine.Batch{Cells: make([]engine.Cell, cellsPerBatch)}
				value := []byte{0xf6, 0x01}
				column := uint32(0)
				b.ReportAllocs()
				for b.Loop() {
					batch.WriteTime = time.Now().UnixMilli()
					for i := range batch.Cells {
						if i%len(keys) == 0 {
							column += 2 // new cells, the common case
						}
						batch.Cells[i] = engine.Cell{Key: keys[i%len(keys)], Column: column, Value: value}
					}
					if err := e.Write(b.Context(), batch); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)*cellsPerBatch/b.Elapsed().Seconds(), "cells/s")
			})
		}
	}
}

func BenchmarkCells(b *testing.B) {
	e := open(b, b.TempDir(), DefaultOptions())
	key := []byte("sys.cpu\x00\x00\x00\x01\x3c\x69\xda\x9c\x00\x00\x0bkairos_longhost=server1:")
	batch := &engine.Batch{WriteTime: time.Now().UnixMilli()}
	for i := range cellsPerBatch {
		batch.Cells = append(batch.Cells, engine.Cell{Key: key, Column: uint32(i) << 8, Value: []byte{0xf6, 0x01}})
	}
	require.NoError(b, e.Write(b.Context(), batch))
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		err := e.Cells(b.Context(), key, 0, 0xffffffff, func(uint32, []byte) error {
			n++
			return nil
		})
		if err != nil || n != cellsPerBatch {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(b.N)*cellsPerBatch/b.Elapsed().Seconds(), "cells/s")
}

func TestMarks(t *testing.T) {
	m := newMarks(100)
	m.limit = 2
	require.False(t, m.newer([]byte("a"), 100), "not above the base")
	require.True(t, m.newer([]byte("a"), 101))

	m.record("a", 200, 200)
	require.False(t, m.newer([]byte("a"), 200))
	require.True(t, m.newer([]byte("a"), 201))
	require.True(t, m.newer([]byte("b"), 101), "other partitions keep the base")

	m.record("a", 150, 200) // bounds only grow
	require.False(t, m.newer([]byte("a"), 200))

	m.record("b", 300, 300)
	m.record("c", 400, 400) // full: dropped, the base rises to the high-water mark
	require.Empty(t, m.byRow)
	require.False(t, m.newer([]byte("a"), 400))
	require.False(t, m.newer([]byte("c"), 400))
	require.True(t, m.newer([]byte("a"), 401))
}

func cellValues(t *testing.T, e *Engine, key string) []string {
	t.Helper()
	var got []string
	require.NoError(t, e.Cells(t.Context(), []byte(key), 0, 0xffffffff, func(c uint32, v []byte) error {
		got = append(got, fmt.Sprintf("%d=%s", c, v))
		return nil
	}))
	return got
}

// TestReopenKeepsHighWater checks that the skipped lookups stay correct
// across a restart: the bounds they rely on are persisted.
func TestReopenKeepsHighWater(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e, err := Open("db", opts, nil)
	require.NoError(t, err)
	ctx := t.Context()
	cell := func(v string) []engine.Cell {
		return []engine.Cell{{Key: []byte("k"), Column: 1, Value: []byte(v)}}
	}
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: 2000, Cells: cell("newer")}))
	require.NoError(t, e.Close())

	e = open(t, "db", opts)
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: 1000, Cells: cell("older")}))
	require.Equal(t, []string{"1=newer"}, cellValues(t, e, "k"))
}

// TestEqualWriteTime checks Cassandra's tie rule (the greater value wins)
// for a key written twice at one write time, within one batch and across
// batches, on the blind path and the lookup path.
func TestEqualWriteTime(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e := open(t, "db", opts)
	ctx := t.Context()
	cells := func(key string, values ...string) []engine.Cell {
		var cs []engine.Cell
		for _, v := range values {
			cs = append(cs, engine.Cell{Key: []byte(key), Column: 1, Value: []byte(v)})
		}
		return cs
	}
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: 10, Cells: cells("a", "b", "c", "a")}))
	require.Equal(t, []string{"1=c"}, cellValues(t, e, "a"))

	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: 20, Cells: cells("b", "b")}))
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: 20, Cells: cells("b", "a")}))
	require.Equal(t, []string{"1=b"}, cellValues(t, e, "b"))
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: 20, Cells: cells("b", "c")}))
	require.Equal(t, []string{"1=c"}, cellValues(t, e, "b"))
}

// TestConcurrentWrites checks last-write-wins when writers reach the lock
// in any order, with readers running.
func TestConcurrentWrites(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e := open(t, "db", opts)
	ctx := t.Context()
	const writers, keys = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			b := &engine.Batch{WriteTime: int64(1000 + w)}
			for k := range keys {
				b.Cells = append(b.Cells, engine.Cell{Key: fmt.Appendf(nil, "k%d", k%5), Column: uint32(k), Value: []byte{byte(w)}})
			}
			assert(t, e.Write(ctx, b))
			assert(t, e.Cells(ctx, []byte("k0"), 0, 0xffffffff, func(uint32, []byte) error { return nil }))
		})
	}
	wg.Wait()
	for k := range 5 {
		require.NoError(t, e.Cells(ctx, fmt.Appendf(nil, "k%d", k), 0, 0xffffffff, func(_ uint32, v []byte) error {
			require.Equal(t, []byte{writers - 1}, v)
			return nil
		}))
	}
}

// assert fails the test from a goroutine other than the test's.
func assert(t *testing.T, err error) {
	if err != nil {
		t.Error(err)
	}
}

// BenchmarkCellsOnDisk reads rows the way a PromQL query over a day does:
// 100 rows of 5,760 cells with KairosDB row keys of ~200 bytes (ten tags),
// compacted into sstables and held in the block cache. "pebble" is the
// floor: Pebble's iterator stepping over the same keys, no cell decoded.
//
//	go test -run '^$' -bench CellsOnDisk ./kairosstore/pebblekv/
func BenchmarkCellsOnDisk(b *testing.B) {
	const rows, perRow = 100, 5760
	e := open(b, b.TempDir(), Options{CacheSize: 256 << 20})
	keys := make([][]byte, rows)
	for i := range keys {
		k := []byte("load_metric_0\x00\x00\x00\x01\x9a\xb1\x2c\x00\x00\x00\x0ckairos_double")
		for t := range 10 {
			k = fmt.Appendf(k, "label_%d=value_%d_of_series_%06d:", t, t, i)
		}
		keys[i] = k
	}
	value := []byte{0x40, 0x45, 0, 0, 0, 0, 0, 0}
	for _, k := range keys {
		batch := &engine.Batch{WriteTime: time.Now().UnixMilli()}
		for c := range perRow {
			batch.Cells = append(batch.Cells, engine.Cell{Key: k, Column: uint32(c) * 15_000 << 1, Value: value})
		}
		require.NoError(b, e.Write(b.Context(), batch))
	}
	require.NoError(b, e.db.Flush())
	require.NoError(b, e.db.Compact(b.Context(), []byte{tableBlock}, []byte{tableBlock + 1}, false))
	b.Run("Cells", func(b *testing.B) {
		for b.Loop() {
			n := 0
			for _, k := range keys {
				err := e.Cells(b.Context(), k, 0, math.MaxUint32, func(uint32, []byte) error {
					n++
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			if n != rows*perRow {
				b.Fatal(n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows*perRow), "ns/cell")
	})
	b.Run("pebble", func(b *testing.B) {
		for b.Loop() {
			it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tableBlock}, UpperBound: []byte{tableBlock + 1}})
			require.NoError(b, err)
			n := 0
			for ok := it.First(); ok; ok = it.Next() {
				r, err := cellblock.NewReader(it.Value())
				require.NoError(b, err)
				n += r.Len()
			}
			require.NoError(b, it.Close())
			if n != rows*perRow {
				b.Fatal(n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows*perRow), "ns/cell")
	})
}

// TestCacheStatus: the block cache reports its size as configured, and
// bytes and lookups once a read went through it.
func TestCacheStatus(t *testing.T) {
	ctx := t.Context()
	opts := DefaultOptions()
	opts.CacheSize = 8 << 20
	e := open(t, t.TempDir(), opts)
	require.NoError(t, e.Setup(ctx))
	require.Equal(t, CacheStatus{MaxBytes: 8 << 20}, e.CacheStatus())
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: time.Now().UnixMilli(), Cells: []engine.Cell{{Key: []byte("k"), Column: 1, Value: []byte("v")}}}))
	require.NoError(t, e.Settle(ctx)) // into an sstable, read through the cache
	it, err := e.db.NewIter(nil)
	require.NoError(t, err)
	for it.First(); it.Valid(); it.Next() {
	}
	require.NoError(t, it.Close())
	st := e.CacheStatus()
	require.Positive(t, st.Bytes)
	require.LessOrEqual(t, st.Bytes, st.MaxBytes)
	require.Positive(t, st.Hits+st.Misses)
}
