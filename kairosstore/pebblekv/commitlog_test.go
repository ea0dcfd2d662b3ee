package pebblekv

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/enginetest"
)

// TestEnginePeriodic runs the conformance suite in periodic mode.
func TestEnginePeriodic(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		opts := DefaultOptions()
		opts.SyncPeriod = 10 * time.Millisecond
		return open(t, t.TempDir(), opts)
	})
}

func syncCount(e *Engine, log string) float64 {
	return testutil.ToFloat64(e.syncMetrics.syncs.WithLabelValues(log))
}

// smallAndLarge writes a batch for the head and one for Pebble.
func smallAndLarge(t *testing.T, e *Engine, row string, n int) {
	t.Helper()
	ctx := context.Background()
	wt := time.Now().UnixMilli()
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: wt, Cells: []engine.Cell{{Key: []byte(row), Column: uint32(n), Value: f64(1)}}}))
	big := &engine.Batch{WriteTime: wt + 1}
	for k := range directCells {
		big.Cells = append(big.Cells, engine.Cell{Key: []byte(row + "-big"), Column: uint32(n*directCells + k), Value: f64(2)})
	}
	require.NoError(t, e.Write(ctx, big))
}

// TestPeriodicSync: in periodic mode the writes sync neither log, the
// timer syncs both, and Pebble's WAL files are the ones walFS tracks (a
// Pebble upgrade that renamed their write category would leave them
// synced on every write, and this test failing). In batch mode every write
// syncs.
func TestPeriodicSync(t *testing.T) {
	opts := DefaultOptions()
	opts.SyncPeriod = maxSyncPeriod
	e := open(t, t.TempDir(), opts)
	mode, period := e.CommitLogSync()
	require.Equal(t, "periodic", mode)
	require.Equal(t, maxSyncPeriod, period)
	e.walFS.mu.Lock()
	tracked := len(e.walFS.files)
	e.walFS.mu.Unlock()
	require.Equal(t, 1, tracked, "Pebble's WAL, created through walFS")

	for n := range 10 {
		smallAndLarge(t, e, "periodic", n)
	}
	require.Zero(t, syncCount(e, "head"), "no write syncs the head log")
	require.Zero(t, syncCount(e, "pebble"), "no write syncs Pebble's WAL")
	require.NoError(t, e.syncLogs())
	require.Equal(t, 1.0, syncCount(e, "head"))
	require.Equal(t, 1.0, syncCount(e, "pebble"))
	require.Equal(t, e.wal.written.Load(), e.wal.synced.Load(), "the period's sync covers the head log")

	// The timer.
	opts.SyncPeriod = 5 * time.Millisecond
	e2 := open(t, t.TempDir(), opts)
	smallAndLarge(t, e2, "timer", 1)
	require.Eventually(t, func() bool { return syncCount(e2, "head") > 0 && syncCount(e2, "pebble") > 0 }, 10*time.Second, 5*time.Millisecond)

	b := open(t, t.TempDir(), DefaultOptions())
	mode, _ = b.CommitLogSync()
	require.Equal(t, "batch", mode)
	require.Nil(t, b.walFS)
	for n := range 10 {
		smallAndLarge(t, b, "batch", n)
	}
	require.GreaterOrEqual(t, syncCount(b, "head"), 10.0, "each small write synced the head log")
	require.GreaterOrEqual(t, syncCount(b, "pebble"), 10.0, "each large write synced Pebble's WAL")
}

func TestSyncPeriodRange(t *testing.T) {
	for _, p := range []time.Duration{-time.Nanosecond, maxSyncPeriod + time.Nanosecond, time.Duration(1<<63 - 1)} {
		opts := DefaultOptions()
		opts.SyncPeriod = p
		opts.FS = vfs.NewMem()
		_, err := Open("db", opts, nil)
		require.ErrorContains(t, err, "commit log sync period", "%v", p)
	}
}

// failSyncFS fails the fdatasync of head log segments once fail is set.
type failSyncFS struct {
	vfs.FS
	fail *atomic.Bool
}

func (fs failSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || !strings.Contains(name, walPrefix) {
		return f, err
	}
	return failSyncFile{File: f, fail: fs.fail}, nil
}

type failSyncFile struct {
	vfs.File
	fail *atomic.Bool
}

func (f failSyncFile) SyncData() error {
	if f.fail.Load() {
		return errors.New("injected fdatasync failure")
	}
	return f.File.SyncData()
}

// TestPeriodicSyncFailure: once the period's fsync of the head log failed,
// no write is acknowledged any more, as in batch mode.
func TestPeriodicSyncFailure(t *testing.T) {
	var fail atomic.Bool
	opts := DefaultOptions()
	opts.SyncPeriod = maxSyncPeriod
	opts.FS = failSyncFS{FS: vfs.NewMem(), fail: &fail}
	e := open(t, "db", opts)
	ctx := context.Background()
	write := func(n int) error {
		return e.Write(ctx, &engine.Batch{WriteTime: time.Now().UnixMilli(), Cells: []engine.Cell{{Key: []byte("r"), Column: uint32(n), Value: f64(1)}}})
	}
	require.NoError(t, write(1))
	fail.Store(true)
	require.ErrorContains(t, e.syncLogs(), "injected fdatasync failure")
	require.ErrorContains(t, write(2), "head log fsync failed")
}

// countSyncFS counts the fdatasyncs of Pebble's WAL files.
type countSyncFS struct {
	vfs.FS
	n *atomic.Int64
}

func (fs countSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || c != pebbleWALCategory {
		return f, err
	}
	return countSyncFile{File: f, n: fs.n}, nil
}

type countSyncFile struct {
	vfs.File
	n *atomic.Int64
}

func (f countSyncFile) SyncData() error { f.n.Add(1); return f.File.SyncData() }
func (f countSyncFile) Sync() error     { f.n.Add(1); return f.File.Sync() }

// TestPeriodicSyncsPebbleWALOnRotation: in periodic mode the writes do not
// fdatasync Pebble's WAL, but Pebble's move to a new WAL (a memtable flush)
// and Close do, so a WAL left behind is never only in the page cache.
func TestPeriodicSyncsPebbleWALOnRotation(t *testing.T) {
	var n atomic.Int64
	opts := DefaultOptions()
	opts.SyncPeriod = maxSyncPeriod
	opts.FS = countSyncFS{FS: vfs.NewMem(), n: &n}
	e, err := Open("db", opts, nil)
	require.NoError(t, err)
	base := n.Load()
	for i := range 10 {
		smallAndLarge(t, e, "rot", i)
	}
	require.Equal(t, base, n.Load(), "writes sync nothing")
	require.NoError(t, e.db.Flush())
	require.Greater(t, n.Load(), base, "the WAL Pebble left was synced")
	e.walFS.mu.Lock()
	open := len(e.walFS.files)
	e.walFS.mu.Unlock()
	require.Equal(t, 1, open, "a closed WAL is no longer tracked")
	smallAndLarge(t, e, "rot", 11)
	before := n.Load()
	require.NoError(t, e.Close())
	require.Greater(t, n.Load(), before, "Close synced the current WAL")
}
