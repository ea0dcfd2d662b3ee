package pebblekv

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
// most transactions are not newest. With pebble, another goroutine commits
// a small Pebble write every 2 ms meanwhile, as the rollups and new series'
// index rows do during the load; heads/op and pebbles/op are the fsyncs of
// each log per batch.
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
		pebble bool
	}{{"batch", 0, false}, {"batch", 0, true}, {"periodic", 10 * time.Second, false}, {"periodic", 10 * time.Second, true}} {
		b.Run(fmt.Sprintf("sync=%s/pebble=%t", mode.name, mode.pebble), func(b *testing.B) {
			opts := DefaultOptions()
			opts.SyncPeriod = mode.period
			e := open(b, b.TempDir(), opts)
			value := []byte{0xf6, 0x01}
			// Batch i writes rows (i*perBatch) mod nRows onwards at column
			// 2*(1 + i*perBatch/nRows): every row once per column.
			var next atomic.Int64
			run := func(n int64) {
				var wg sync.WaitGroup
				done := make(chan struct{})
				if mode.pebble {
					wg.Go(func() {
						t := time.NewTicker(2 * time.Millisecond)
						defer t.Stop()
						for i := 0; ; i++ {
							select {
							case <-done:
								return
							case <-t.C:
							}
							if err := e.SetServiceValue(b.Context(), "bench", "k", strconv.Itoa(i%64), "v", time.Now().UnixMicro()); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				var writersWG sync.WaitGroup
				for range writers {
					writersWG.Go(func() {
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
				writersWG.Wait()
				close(done)
				wg.Wait()
			}
			run(nRows / perBatch)
			syncs := func(log string) float64 { return testutil.ToFloat64(e.syncMetrics.syncs.WithLabelValues(log)) }
			heads0, pebbles0 := syncs("head"), syncs("pebble")
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			run(nRows/perBatch + int64(b.N))
			cells := float64(b.N * perBatch)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/cells, "ns/cell")
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/cells, "cpu-ns/cell")
			b.ReportMetric((syncs("head")-heads0)/float64(b.N), "heads/op")
			b.ReportMetric((syncs("pebble")-pebbles0)/float64(b.N), "pebbles/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestMarksOnlyTombstones: cells written below the high-water mark (as
// concurrent writers sharing a millisecond write them) leave no marks, and
// a delete's tombstone still drops a later cell it shadows, before and
// after a reopen, while the cells above it and beside it are kept.
func TestMarksOnlyTombstones(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e, err := Open("db", opts, nil)
	require.NoError(t, err)
	ctx := t.Context()
	base := time.Now().UnixMilli()
	write := func(e *Engine, writeTime int64, key string, column uint32, value string) {
		t.Helper()
		require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: writeTime, Cells: []engine.Cell{{Key: []byte(key), Column: column, Value: []byte(value)}}}))
	}
	write(e, base+10, "above", 1, "x")
	for i := range 100 {
		write(e, base, fmt.Sprintf("row%d", i), 1, "a") // not newest
	}
	require.Empty(t, e.marks.byRow, "cells leave no marks")

	require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: base + 20, CellRanges: []engine.CellRange{{Key: []byte("r"), Lo: 10, Hi: 20}}}))
	require.Len(t, e.marks.byRow, 1, "the tombstone's partition")
	check := func(e *Engine) {
		t.Helper()
		write(e, base+15, "r", 15, "shadowed") // below the tombstone, in its range
		write(e, base+15, "r", 30, "beside")   // below it, outside its range
		write(e, base+15, "other", 15, "other")
		require.Equal(t, []string{"30=beside"}, cellValues(t, e, "r"))
		require.Equal(t, []string{"15=other"}, cellValues(t, e, "other"))
	}
	check(e)
	require.NoError(t, e.Close())
	e, err = Open("db", opts, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close()) }()
	check(e)
	write(e, base+25, "r", 15, "above")
	require.Equal(t, []string{"15=above", "30=beside"}, cellValues(t, e, "r"))
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

// BenchmarkDrain is a rotation's whole-head drain of the known-series
// load: 100,000 rows of 40 cells each (the head at about its default
// bound), merged and committed into Pebble, synced, while every writer
// waits under Engine.mu; parts is the most batches committed at once.
func BenchmarkDrain(b *testing.B) {
	const (
		nRows    = 100_000
		perRow   = 40
		perBatch = 2_000
	)
	keys := knownRowKeys(nRows)
	for _, parts := range []int{1, 2} {
		b.Run(fmt.Sprintf("parts=%d", parts), func(b *testing.B) {
			opts := DefaultOptions()
			opts.SyncPeriod = 10 * time.Second
			opts.HeadBytes = 1 << 30
			opts.drainParts = parts
			e := open(b, b.TempDir(), opts)
			value := []byte{0xf6, 0x01}
			batch := &engine.Batch{Cells: make([]engine.Cell, perBatch)}
			column := uint32(0)
			var wall, cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				for range perRow {
					column += 2
					for first := 0; first < nRows; first += perBatch {
						batch.WriteTime = time.Now().UnixMicro()
						for i := range batch.Cells {
							batch.Cells[i] = engine.Cell{Key: keys[first+i], Column: column, Value: value}
						}
						require.NoError(b, e.Write(b.Context(), batch))
					}
				}
				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime(b)
				e.mu.Lock()
				err := e.drain(true)
				e.mu.Unlock()
				require.NoError(b, err)
				wall += time.Since(start)
				cpu += cpuTime(b) - cpu0
			}
			cells := float64(b.N * nRows * perRow)
			b.ReportMetric(float64(wall.Nanoseconds())/cells, "ns/cell")
			b.ReportMetric(float64(cpu.Nanoseconds())/cells, "cpu-ns/cell")
		})
	}
}
