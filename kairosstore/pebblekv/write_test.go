package pebblekv

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// BenchmarkWriteKnown is the engine's part of issue #31's known-series
// load: 100,000 rows, each already in the head and the marks, written one
// cell a row in batches of 2,000, in both commit-log modes. The head then
// holds more rows than the CPU caches, and what a cell costs is mostly the
// cache misses of finding its row. With below, a write above every
// batch's write time came first: no transaction is newest, as when
// concurrent writers share a millisecond, and each looks up its rows' marks.
func BenchmarkWriteKnown(b *testing.B) {
	const (
		nRows    = 100_000
		perBatch = 2_000
	)
	keys := knownRowKeys(nRows)
	for _, mode := range []struct {
		name   string
		period time.Duration
		below  bool
	}{{"batch", 0, false}, {"periodic", 10 * time.Second, false}, {"periodic", 10 * time.Second, true}} {
		b.Run(fmt.Sprintf("sync=%s/below=%t", mode.name, mode.below), func(b *testing.B) {
			opts := DefaultOptions()
			opts.SyncPeriod = mode.period
			e := open(b, b.TempDir(), opts)
			value := []byte{0xf6, 0x01}
			batch := &engine.Batch{Cells: make([]engine.Cell, perBatch)}
			column, next := uint32(0), 0
			write := func() {
				if next == 0 {
					column += 2
				}
				batch.WriteTime = time.Now().UnixMicro()
				for i := range batch.Cells {
					batch.Cells[i] = engine.Cell{Key: keys[next+i], Column: column, Value: value}
				}
				next = (next + perBatch) % nRows
				if err := e.Write(b.Context(), batch); err != nil {
					b.Fatal(err)
				}
			}
			for range nRows / perBatch {
				write()
			}
			if mode.below {
				above := &engine.Batch{WriteTime: time.Now().Add(time.Hour).UnixMicro(), Cells: []engine.Cell{{Key: []byte("above"), Column: 1, Value: value}}}
				require.NoError(b, e.Write(b.Context(), above))
			}
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				write()
			}
			cells := float64(b.N * perBatch)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/cells, "ns/cell")
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/cells, "cpu-ns/cell")
		})
	}
}

// BenchmarkWriteKnownParallel is BenchmarkWriteKnown with 8 writers at
// once, as the remote-write handler runs them: each writes its own share of
// the rows, 2,000 cells a batch, its write time the clock's at the call, so
// most transactions are not newest.
func BenchmarkWriteKnownParallel(b *testing.B) {
	const (
		nRows    = 100_000
		perBatch = 2_000
		writers  = 8
	)
	keys := knownRowKeys(nRows)
	for _, mode := range []struct {
		name   string
		period time.Duration
	}{{"batch", 0}, {"periodic", 10 * time.Second}} {
		b.Run("sync="+mode.name, func(b *testing.B) {
			opts := DefaultOptions()
			opts.SyncPeriod = mode.period
			e := open(b, b.TempDir(), opts)
			value := []byte{0xf6, 0x01}
			// Batch i writes rows (i*perBatch) mod nRows onwards at column
			// 2*(1 + i*perBatch/nRows): every row once per column.
			var next atomic.Int64
			run := func(n int64) {
				var wg sync.WaitGroup
				for range writers {
					wg.Go(func() {
						batch := &engine.Batch{Cells: make([]engine.Cell, perBatch)}
						for {
							i := next.Add(1) - 1
							if i >= n {
								return
							}
							first := int(i*perBatch) % nRows
							column := uint32(2 * (1 + i*perBatch/nRows))
							batch.WriteTime = time.Now().UnixMicro()
							for j := range batch.Cells {
								batch.Cells[j] = engine.Cell{Key: keys[first+j], Column: column, Value: value}
							}
							if err := e.Write(b.Context(), batch); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			}
			run(nRows / perBatch)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			run(nRows/perBatch + int64(b.N))
			cells := float64(b.N * perBatch)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/cells, "ns/cell")
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/cells, "cpu-ns/cell")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestScratchRowsBounded: the map of partitions a transaction leaves for
// the next one is empty, and dropped after a transaction of more than
// maxScratchRows partitions, so one large request does not make every
// later transaction clear its capacity.
func TestScratchRowsBounded(t *testing.T) {
	e := open(t, t.TempDir(), DefaultOptions())
	above := time.Now().UnixMilli()
	write := func(rows int) {
		t.Helper()
		// Below a write already made: not newest, so every row is noted in txn.rows.
		b := &engine.Batch{WriteTime: above - 1}
		for i := range rows {
			b.Cells = append(b.Cells, engine.Cell{Key: fmt.Appendf(nil, "row%d", i), Column: 1, Value: []byte{1}})
		}
		require.NoError(t, e.Write(t.Context(), b))
	}
	require.NoError(t, e.Write(t.Context(), &engine.Batch{WriteTime: above, Cells: []engine.Cell{{Key: []byte("above"), Column: 1, Value: []byte{1}}}}))
	write(10)
	require.NotNil(t, e.headScratch.rows)
	require.Empty(t, e.headScratch.rows)
	write(maxScratchRows + 1)
	require.Nil(t, e.headScratch.rows)
	write(10)
	require.NotNil(t, e.headScratch.rows)
	require.Empty(t, e.headScratch.rows)
}

// knownRowKeys are n row keys of the shape of a series of 10 labels: about
// 200 bytes each.
func knownRowKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "load_metric_0\x00\x00\x00\x01\x9c\x69\xda\x9c\x00\x00\x0bkairos_double"+
			"env=prod:instance=host-%06d.example.org:9100:job=node:region=eu-west-1:zone=eu-west-1a:"+
			"cluster=c%03d:team=storage:service=kairos:shard=%d:", i, i%100, i%16)
	}
	return keys
}
