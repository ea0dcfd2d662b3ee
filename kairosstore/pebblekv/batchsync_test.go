package pebblekv

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// slowSyncFS makes every fdatasync of the head log and of Pebble's files
// take a while before and after the data reaches the (crashable) disk, so
// that writers append and commit during it, as on a real disk.
type slowSyncFS struct {
	vfs.FS
	delay time.Duration
	// gate, if set, holds every sync until it is closed.
	gate *atomic.Pointer[chan struct{}]
}

func (fs slowSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil {
		return f, err
	}
	return slowSyncFile{f, fs.delay, fs.gate}, nil
}

func (fs slowSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	if err != nil {
		return f, err
	}
	return slowSyncFile{f, fs.delay, fs.gate}, nil
}

type slowSyncFile struct {
	vfs.File
	delay time.Duration
	gate  *atomic.Pointer[chan struct{}]
}

func (f slowSyncFile) wait() {
	if f.gate == nil {
		return
	}
	if g := f.gate.Load(); g != nil {
		<-*g
	}
}

func (f slowSyncFile) SyncData() error {
	f.wait()
	time.Sleep(f.delay / 2)
	err := f.File.SyncData()
	time.Sleep(f.delay / 2)
	return err
}

func (f slowSyncFile) Sync() error {
	f.wait()
	time.Sleep(f.delay / 2)
	err := f.File.Sync()
	time.Sleep(f.delay / 2)
	return err
}

// TestBatchAckAfterFsync: in batch mode a write returns only once what it
// wrote is fsynced, in the head log (cells) or in Pebble (a spec), while
// other writers append and sync concurrently. Right after a write
// returns, a crash keeps only what was synced: the clone must hold it.
// Every writer sets the same specs at the same write time, each its own
// value: one that finds a larger value committed writes nothing, and must
// still wait for that value to be synced.
func TestBatchAckAfterFsync(t *testing.T) {
	mem := vfs.NewCrashableMem()
	opts := DefaultOptions()
	opts.FS = slowSyncFS{mem, 2 * time.Millisecond, nil}
	e, err := Open("db", opts, nil)
	require.NoError(t, err)
	defer e.Close()
	ctx := t.Context()
	type check struct {
		crashed vfs.FS
		row     string
		spec    string
	}
	var (
		mu     sync.Mutex
		checks []check
		wg     sync.WaitGroup
	)
	const writers, writes = 8, 40
	base := time.Now().UnixMilli()
	for w := range writers {
		wg.Go(func() {
			for i := range writes {
				row := fmt.Sprintf("w%d-%d", w, i)
				wt := base + int64(i*writers+w)
				spec := ""
				var err error
				if i%4 == 3 {
					// A Pebble write among the head's, so that head-only
					// writes follow unsynced Pebble commits.
					spec = fmt.Sprintf("s%d", i)
					err = e.SetSpec(ctx, spec, fmt.Sprint(w), base+int64(i))
				} else {
					err = e.Write(ctx, &engine.Batch{WriteTime: wt, Cells: []engine.Cell{{Key: []byte(row), Column: 1, Value: f64(float64(i))}}})
				}
				if err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 || spec != "" {
					c := check{crashed: mem.CrashClone(vfs.CrashCloneCfg{}), spec: spec}
					if spec == "" {
						c.row = row
					}
					mu.Lock()
					checks = append(checks, c)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	require.Positive(t, testutil.ToFloat64(e.syncMetrics.syncs.WithLabelValues("head")), "the head log was fsynced")
	for _, c := range checks {
		o := opts
		o.FS = c.crashed
		got, err := Open("db", o, nil)
		require.NoError(t, err)
		if c.spec != "" {
			_, ok, err := got.Spec(ctx, c.spec)
			require.NoError(t, err)
			require.True(t, ok, "spec %s was acknowledged before Pebble's fsync", c.spec)
		} else {
			require.Len(t, cellsOf(t, got, c.row), 1, "row %s was acknowledged before the head log's fsync", c.row)
		}
		require.NoError(t, got.Close())
	}
}

// TestBatchAckWaitsForWhatItRead: a write that finds another's commit
// winning writes nothing itself, and is acknowledged only once that commit
// is synced: otherwise a crash could lose both.
func TestBatchAckWaitsForWhatItRead(t *testing.T) {
	var gate atomic.Pointer[chan struct{}]
	opts := DefaultOptions()
	opts.FS = slowSyncFS{vfs.NewMem(), 0, &gate}
	e := open(t, "db", opts)
	ctx := t.Context()
	wt := time.Now().UnixMilli()
	require.NoError(t, e.SetSpec(ctx, "other", "x", wt+10))
	held := make(chan struct{})
	gate.Store(&held)
	var release sync.Once
	open := func() { release.Do(func() { gate.Store(nil); close(held) }) }
	t.Cleanup(open)
	first := make(chan error, 1)
	go func() { first <- e.SetSpec(ctx, "s", "9", wt) }()
	require.Eventually(t, func() bool {
		v, ok, err := e.Spec(ctx, "s")
		return err == nil && ok && v == "9"
	}, 10*time.Second, time.Millisecond, "the first write commits")
	second := make(chan error, 1)
	go func() { second <- e.SetSpec(ctx, "s", "1", wt) }()
	select {
	case err := <-second:
		t.Fatalf("the losing write returned (%v) before the winner's commit was synced", err)
	case <-first:
		t.Fatal("the first write returned before its sync")
	case <-time.After(200 * time.Millisecond):
	}
	open()
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	v, _, err := e.Spec(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, "9", v)
}
