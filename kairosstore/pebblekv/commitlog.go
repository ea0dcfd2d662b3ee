package pebblekv

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

// Commit-log durability, as Cassandra's commitlog_sync. In batch mode (no
// SyncPeriod) a write returns once its log records are fdatasync'ed. In
// periodic mode it returns once they are written to the operating system,
// which keeps them when the process dies (kill -9, a panic, the OOM killer),
// and syncLoop fdatasyncs the logs every SyncPeriod: an OS crash or power
// loss can lose the writes of the last period, as with Cassandra's
// commitlog_sync: periodic, Prometheus's WAL or VictoriaMetrics.
//
// Both logs only buffer in user space what their writer has not handed on:
// the head's log (wal.go) writes each record with write(2) in append,
// before the transaction commits; Pebble's WAL copies a NoSync batch into a
// block that its flush goroutine writes later, so a write still asks Pebble
// for a synced commit (Engine.run), which returns only after that goroutine
// wrote the file and called Sync, and in periodic mode that Sync is
// walFile's, which syncs nothing. Everything that makes the head log's
// segments removable (rotate, replay) syncs Pebble's WAL for real first
// (Engine.syncPebble).

// maxSyncPeriod bounds Options.SyncPeriod: the head log is rotated, and so
// synced, every HeadMaxAge anyway, and a longer period only widens what
// an OS crash loses.
const maxSyncPeriod = 10 * time.Minute

// pebbleWALCategory is the write category Pebble creates its WAL files
// with (wal.StandaloneManager); TestPeriodicTracksPebbleWAL fails if a
// Pebble upgrade changes it.
const pebbleWALCategory vfs.DiskWriteCategory = "pebble-wal"

// walFS is the file system Pebble gets in periodic mode: its WAL files
// sync nothing when Pebble syncs them, only when syncAll does or when they
// are closed (Pebble closes a WAL when it moves to the next one).
type walFS struct {
	vfs.FS
	// mu guards files, and is held by syncAll while it syncs them, so that
	// a file is not closed under it.
	mu     sync.Mutex
	files  map[*walFile]struct{}
	failed syncFailure
}

func newWALFS(fs vfs.FS) *walFS {
	return &walFS{FS: fs, files: map[*walFile]struct{}{}, failed: syncFailure{what: "pebble WAL"}}
}

func (fs *walFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return fs.track(f, err, category)
}

func (fs *walFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.track(f, err, category)
}

func (fs *walFS) track(f vfs.File, err error, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err != nil || category != pebbleWALCategory {
		return f, err
	}
	w := &walFile{File: f, fs: fs}
	fs.mu.Lock()
	fs.files[w] = struct{}{}
	fs.mu.Unlock()
	return w, nil
}

// syncAll fdatasyncs every open WAL file. A failure is sticky: whether
// what it covered reached the disk is unknown, so Pebble's next sync
// fails too and no write is acknowledged after it.
func (fs *walFS) syncAll() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.failed.get(); err != nil {
		return err
	}
	for f := range fs.files {
		if err := f.File.SyncData(); err != nil {
			return fs.failed.set(err)
		}
	}
	return nil
}

// syncFailure is a log's first failed fsync, sticky: whether what it
// covered reached the disk is unknown, as with Pebble's own log, which
// stops the process.
type syncFailure struct {
	what string // the log, for the message
	p    atomic.Pointer[error]
}

func (s *syncFailure) get() error {
	if p := s.p.Load(); p != nil {
		return *p
	}
	return nil
}

// set records err unless a failure is recorded already, and returns the
// recorded one.
func (s *syncFailure) set(err error) error {
	err = fmt.Errorf("%s fsync failed, restart the adapter: %w", s.what, err)
	s.p.CompareAndSwap(nil, &err)
	return s.get()
}

// walFile is one of Pebble's WAL files in periodic mode. Pebble wrote the
// data with write(2) before it calls Sync, so a Sync that returns at once
// leaves it where kill -9 cannot take it.
type walFile struct {
	vfs.File
	fs *walFS
}

func (f *walFile) Sync() error     { return f.fs.failed.get() }
func (f *walFile) SyncData() error { return f.fs.failed.get() }

// Close syncs first: Pebble closes a WAL when it moves on to the next one,
// and until its memtable is flushed nothing else holds those writes.
func (f *walFile) Close() error {
	f.fs.mu.Lock()
	delete(f.fs.files, f)
	f.fs.mu.Unlock()
	err := f.File.SyncData()
	if err != nil {
		err = f.fs.failed.set(err)
	}
	return errors.Join(err, f.File.Close())
}

// syncMetrics counts the fsyncs of the commit logs.
type syncMetrics struct {
	syncs    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newSyncMetrics() syncMetrics {
	return syncMetrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kairos_adapter", Name: "embedded_log_syncs_total",
			Help: "fdatasyncs of the embedded store's commit logs (log: head or pebble), before acknowledging writes (--storage.embedded-commitlog-sync=batch) or every --storage.embedded-commitlog-sync-period (periodic), and those of head rotations.",
		}, []string{"log"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "kairos_adapter", Name: "embedded_log_sync_duration_seconds",
			Help:    "Time the embedded store's commit-log fdatasyncs took (log: head or pebble); a batch-mode Pebble sync includes its wait in Pebble's commit queue.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"log"}),
	}
}

// observe records one sync of log that started at start.
func (m syncMetrics) observe(log string, start time.Time) {
	m.syncs.WithLabelValues(log).Inc()
	m.duration.WithLabelValues(log).Observe(time.Since(start).Seconds())
}

// Collectors returns the engine's metrics, for the caller's registry.
func (e *Engine) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.syncMetrics.syncs, e.syncMetrics.duration}
}

// CommitLogSync is "batch" or "periodic" (Options.SyncPeriod), or "none"
// without Options.Sync.
func (e *Engine) CommitLogSync() (mode string, period time.Duration) {
	switch {
	case !e.opts.Sync:
		return "none", 0
	case e.walFS != nil:
		return "periodic", e.opts.SyncPeriod
	default:
		return "batch", 0
	}
}

// syncPebble makes Pebble's commits so far durable, in either mode.
func (e *Engine) syncPebble() error {
	start := time.Now()
	if err := e.db.LogData(nil, pebble.Sync); err != nil {
		return err
	}
	if e.walFS != nil {
		if err := e.walFS.syncAll(); err != nil {
			return err
		}
	}
	e.syncMetrics.observe("pebble", start)
	return nil
}

// syncLoop fdatasyncs both logs every SyncPeriod, in periodic mode.
func (e *Engine) syncLoop() {
	defer close(e.syncDone)
	t := time.NewTicker(e.opts.SyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			if err := e.syncLogs(); err != nil {
				e.logger.Error("Cannot sync the embedded store's commit logs; writes fail until the adapter restarts", "err", err)
			}
		}
	}
}

// syncLogs fdatasyncs what both logs hold.
func (e *Engine) syncLogs() error {
	var errs []error
	if e.wal != nil {
		errs = append(errs, e.wal.syncTo(e.wal.written.Load()))
	}
	start := time.Now()
	if err := e.walFS.syncAll(); err != nil {
		errs = append(errs, err)
	} else {
		e.syncMetrics.observe("pebble", start)
	}
	return errors.Join(errs...)
}
