// Package pebblekv implements engine.Engine on an embedded Pebble store
// with KairosDB's table layout, so the adapter runs without a database.
//
// # Keys
//
// Every key is a table prefix byte, the partition key, then the clustering
// key, encoded so that byte order equals Cassandra's order within each table
// (keys.go): blob and text components are escaped (0x00 -> 0x00 0xFF) and
// terminated (0x00 0x01), which keeps unsigned byte order and makes every
// partition a contiguous, prefix-free key range; timestamps and ints are
// big-endian with the sign bit flipped; the frozen tags map is its entries
// sorted by name, then an end marker. Each Cassandra query is therefore one
// bounded iterator.
//
// data_points is the exception to one key per row: its cells are kept in
// blocks, one key per row key and window of columns (blocks.go, package
// cellblock), written blind through a merge operator. A store of the layout
// before (kairosdb-1, a key per cell) is converted by Open (convert.go), and
// so is one of kairosdb-2, whose rollup rows had blocks of 2^24 columns
// like raw rows instead of larger ones (windowOf).
// The cells of small writes (a scrape's: a cell or a few per row) go
// through a head first (head.go): kept in memory and in a log of their own
// (wal.go) until one operand can carry many of a row's cells; every read
// of data_points drains the head into Pebble first, so reads never see it.
//
// # Values, last write wins, TTL and tombstones
//
// Every value carries the write time (ms) and an expiry (unix seconds)
// beside the cell value (entry.go; in a block, per cell). Writes to the
// other tables run as read-modify-write transactions under one mutex: an
// entry replaces the stored one only if it wins Cassandra's reconciliation
// (higher write time; ties as Cassandra breaks them), so the stored entry
// is always the winner and reads need no merging. An entry past its expiry
// counts as absent for reads and writes alike, whether or not the purge has
// removed it yet. A data_points cell's merge applies the same rule without
// the read (blocks.go), so an expired cell still beats an older write until
// the purge removes it, as in Cassandra, where it turns into a tombstone.
//
// The lookup is skipped when nothing stored can win: the engine keeps the
// highest write time committed (persisted with each batch) and, for
// data_points, a bound of the tombstones of each partition deleted from
// since it opened (marks.go), which spares a cell the read of its
// partition's tombstones. Write times are the wall clock, so a write is
// almost always newer than what it could lose to and goes blind; only a
// write that is older (a request that reached the lock behind a newer one,
// a clock step back, a test) pays one lookup per entry, and for cells only
// below a tombstone's bound, once per partition.
//
// Deletes follow Cassandra's tombstones, kept as simple as that allows:
//   - Row-level deletes (row_keys, tag_indexed_row_keys, row_key_time_index,
//     row_key_index and string_index entries) store a tombstone entry in place
//     of the row. It shadows later writes with an older-or-equal write time
//     through the ordinary reconciliation and is invisible to reads.
//   - Partition and cell-range deletes of data_points store one range
//     tombstone (lo, hi inclusive; a whole row is 0..0xFFFFFFFF) in a table of
//     its own, and a delete of a row_key_index partition one partition
//     tombstone. The delete removes the covered entries (cells from their
//     blocks) with an older-or-equal write time at once; later writes check
//     the tombstones and are dropped if a tombstone with an equal or newer
//     write time covers them.
//
// Tombstones live for the grace period (Options.TombstoneGrace, 10 days like
// Cassandra's gc_grace_seconds) and are then purged; a write older than a
// purged tombstone can show again, as in Cassandra.
//
// Every entry with an expiry (TTL'd entries and tombstones) also gets a key
// in an expiry index ordered by expiry, so the background purge reads only
// what is due instead of scanning the store.
package pebblekv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// ErrClosed is returned by methods called after Close.
var ErrClosed = errors.New("pebblekv: engine is closed")

// formatVersion is pinned because Pebble's default may change between
// releases, and a newer format cannot be opened by an older build.
const formatVersion = pebble.FormatValueSeparation

// layoutVersion names the key and value encoding of this package. Setup
// stores it and Open refuses a store written with another one.
var (
	layoutKey     = []byte{tableMeta, 'l', 'a', 'y', 'o', 'u', 't'}
	layoutVersion = []byte("kairosdb-3")
)

const (
	defaultCacheSize      = 64 << 20
	defaultPurgeInterval  = time.Minute
	defaultTombstoneGrace = 10 * 24 * time.Hour
	defaultBlockPurgeStep = 3600
)

// Options configure the engine. Start from DefaultOptions: the zero value
// has Sync off.
type Options struct {
	// Sync makes every write (Write, Delete, SetSpec, SetServiceValue) wait
	// for the logs' fsync before it returns, so an HTTP 204 means durable
	// (Cassandra's commitlog_sync: batch). Without it a write may still be
	// in a buffer of the process when it returns.
	Sync bool
	// SyncPeriod, with Sync, makes a write wait only until its log records
	// are written to the operating system, which keeps them if the process
	// is killed, and fdatasyncs the logs every SyncPeriod (Cassandra's
	// commitlog_sync: periodic): an OS crash or power loss can lose the
	// writes of the last period. 0 is batch mode; at most 10 minutes.
	SyncPeriod time.Duration
	// CacheSize is the block cache size in bytes; 0 means 64 MiB.
	CacheSize int64
	// FS is the file system; nil means the disk. Tests may use vfs.NewMem().
	FS vfs.FS
	// PurgeInterval is how often expired entries are removed; 0 means one
	// minute.
	PurgeInterval time.Duration
	// TombstoneGrace is how long deletes shadow older writes; 0 means 10 days.
	TombstoneGrace time.Duration
	// HeadBytes bounds the memory of the head (head.go), which gathers the
	// data_points cells of small writes into blocks; 0 means 128 MiB (the
	// known-series load's CPU against 64 MiB: BENCHMARKS.md, "Issue #31:
	// the head"), and a negative value turns the head off (every block goes
	// to Pebble as it is written).
	HeadBytes int64
	// HeadMaxAge bounds how long a cell stays in the head and its log
	// before a rotation makes it durable in Pebble; 0 means 2 minutes: at
	// a scrape every 15 s, 8 cells of a series in one operand.
	HeadMaxAge time.Duration

	// clock replaces time.Now and blockPurgeStep the default step, for
	// tests whose replay on Open must see their own; drainParts, when
	// positive, replaces GOMAXPROCS as the most batches a drain commits at
	// once.
	clock          func() time.Time
	blockPurgeStep int64
	drainParts     int
}

// DefaultOptions returns the options Open should normally get.
func DefaultOptions() Options { return Options{Sync: true} }

// Engine is a engine.Engine on Pebble.
type Engine struct {
	db     *pebble.DB
	lock   *pebble.Lock
	opts   Options
	logger *slog.Logger
	now    func() time.Time
	// blockPurgeStep (seconds) is the granularity of the expiry index
	// for data_points blocks (flushBlock); tests shorten it.
	blockPurgeStep int64
	// drainParts is the most batches a whole-head drain builds and
	// commits at once (mergeParts).
	drainParts int

	// mu serialises read-modify-write transactions (writes, deletes, purge
	// steps); reads do not take it.
	mu sync.Mutex
	// highWater is the highest write time of any transaction committed, so
	// an upper bound of every write time stored (see txn.newest). Guarded by
	// mu.
	highWater int64
	// storedHighWater is the high-water mark last written to Pebble, which
	// highWater passes when cells go to the head only. Guarded by mu.
	storedHighWater int64
	// marks bounds the write times of data_points tombstones (marks.go).
	// Guarded by mu.
	marks marks
	// ckMu serialises checkpoints (Checkpoint).
	ckMu sync.Mutex

	// head and wal are nil when Options.HeadBytes < 0. Guarded by mu;
	// headRows is the head's row count, for reads that find it empty
	// without the lock.
	head     *head
	wal      *wal
	headRows atomic.Int64
	// headScratch keeps a transaction's head buffers for the next one.
	// Guarded by mu.
	headScratch headScratch
	// pebbleSeq counts the transactions committed to Pebble (guarded by
	// mu), pebbleSynced how many of them are known durable.
	pebbleSeq    int64
	pebbleSynced atomic.Int64

	// walFS is Pebble's file system in periodic mode, nil otherwise
	// (commitlog.go); syncDone is closed when its syncLoop returns.
	walFS       *walFS
	syncDone    chan struct{}
	syncMetrics syncMetrics

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

var _ engine.Engine = (*Engine)(nil)

// Open opens or creates the store in dir and starts the background purge.
func Open(dir string, opts Options, logger *slog.Logger) (*Engine, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = defaultCacheSize
	}
	if opts.PurgeInterval <= 0 {
		opts.PurgeInterval = defaultPurgeInterval
	}
	if opts.TombstoneGrace <= 0 {
		opts.TombstoneGrace = defaultTombstoneGrace
	}
	if opts.HeadBytes == 0 {
		opts.HeadBytes = defaultHeadBytes
	}
	if opts.HeadMaxAge <= 0 {
		opts.HeadMaxAge = defaultHeadMaxAge
	}
	if opts.SyncPeriod < 0 || opts.SyncPeriod > maxSyncPeriod {
		return nil, fmt.Errorf("commit log sync period %v out of range [0, %v]", opts.SyncPeriod, maxSyncPeriod)
	}

	if err := finishRenames(opts.FS, dir); err != nil {
		return nil, fmt.Errorf("cannot finish converting the pebble store in %q: %w", dir, err)
	}
	if err := opts.FS.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create pebble directory %q: %w", dir, err)
	}
	if old, err := isOldLayout(opts.FS, dir); err != nil {
		return nil, fmt.Errorf("cannot open pebble store in %q: %w", dir, err)
	} else if old {
		if err := convert(dir, opts, logger); err != nil {
			return nil, fmt.Errorf("cannot convert the pebble store in %q to layout %s: %w", dir, layoutVersion, err)
		}
	}
	// Taking Pebble's LOCK file ourselves lets the error name the likely
	// cause instead of a bare EAGAIN.
	lock, err := pebble.LockDirectory(dir, opts.FS)
	if err != nil {
		if _, ok := errors.AsType[*fs.PathError](err); ok { // the LOCK file cannot be created
			return nil, fmt.Errorf("cannot use pebble directory %q: %w", dir, err)
		}
		return nil, fmt.Errorf("pebble directory %q is locked; is another adapter using it? %w", dir, err)
	}
	e := &Engine{
		lock:           lock,
		opts:           opts,
		logger:         logger,
		now:            time.Now,
		blockPurgeStep: defaultBlockPurgeStep,
		stop:           make(chan struct{}),
		done:           make(chan struct{}),
		syncDone:       make(chan struct{}),
		syncMetrics:    newSyncMetrics(),
	}
	pebbleFS := opts.FS
	if opts.Sync && opts.SyncPeriod > 0 {
		e.walFS = newWALFS(opts.FS)
		pebbleFS = e.walFS
	}
	if opts.clock != nil {
		e.now = opts.clock
	}
	if opts.blockPurgeStep > 0 {
		e.blockPurgeStep = opts.blockPurgeStep
	}
	e.drainParts = runtime.GOMAXPROCS(0)
	if opts.drainParts > 0 {
		e.drainParts = opts.drainParts
	}
	cache := pebble.NewCache(opts.CacheSize)
	defer cache.Unref() // the DB holds its own reference
	po := &pebble.Options{
		FS:                 pebbleFS,
		Cache:              cache,
		Lock:               lock,
		FormatMajorVersion: formatVersion,
		// A larger memtable than the 4 MiB default keeps one remote-write
		// request well below the large-batch threshold (half of it). Each
		// flush merges the operands of every block written since the last
		// one, and each L0 file of many series spans the key space, so its
		// compaction rewrites the blocks below: 128 MiB rather than 64 costs
		// a known-series write less CPU for more peak RSS (BENCHMARKS.md,
		// "Issue #31, third pass").
		MemTableSize:  128 << 20,
		Logger:        pebbleLogger{logger},
		EventListener: eventListener(logger),
		Merger:        merger,
	}
	// Bloom filters make the point lookups of the write path cheap for new
	// cells, which are the common case.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	applyCompression(po)
	db, err := pebble.Open(dir, po)
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("cannot open pebble store in %q: %w", dir, err)
	}
	e.db = db
	if err := e.densify(); err != nil {
		_ = db.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("cannot convert the rollup rows of the pebble store in %q to layout %s: %w", dir, layoutVersion, err)
	}
	if err := e.load(); err != nil {
		_ = db.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("cannot open pebble store in %q: %w", dir, err)
	}
	seg, err := e.replay(dir)
	if err == nil && opts.HeadBytes > 0 {
		e.head = newHead()
		e.wal, err = openWAL(opts.FS, dir, seg)
		if err == nil {
			e.wal.metrics = &e.syncMetrics
		}
	}
	if err != nil {
		_ = db.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("cannot open pebble store in %q: %w", dir, err)
	}
	go e.purgeLoop()
	if e.walFS != nil {
		go e.syncLoop()
	} else {
		close(e.syncDone)
	}
	return e, nil
}

// applyCompression sets Pebble's "balanced" compression: zstd in the two
// bottom levels, where old samples settle and their blocks still compress
// well (BENCHMARKS.md, issue #31), Snappy above them. The block cache holds
// blocks decompressed, so only a cache miss pays for zstd.
func applyCompression(po *pebble.Options) {
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionBalanced })
}

// load checks the layout version and reads the high-water mark.
func (e *Engine) load() error {
	if err := e.checkLayout(); err != nil {
		return err
	}
	e.highWater = math.MinInt64
	e.storedHighWater = e.highWater
	e.marks = newMarks(e.highWater)
	v, closer, err := e.db.Get(highWaterKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	if len(v) != 8 {
		return fmt.Errorf("%w: high-water mark %x", errCorrupt, v)
	}
	e.highWater = int64(binary.BigEndian.Uint64(v))
	e.storedHighWater = e.highWater
	e.marks = newMarks(e.highWater)
	return nil
}

func (e *Engine) checkLayout() error {
	v, closer, err := e.db.Get(layoutKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	if !bytes.Equal(v, layoutVersion) {
		return fmt.Errorf("store layout %q, this build reads %q", v, layoutVersion)
	}
	return nil
}

// Setup records the layout version; Pebble has no tables to create.
func (e *Engine) Setup(ctx context.Context) error {
	if err := e.usable(ctx); err != nil {
		return err
	}
	if err := e.checkLayout(); err != nil {
		return err
	}
	return e.db.Set(layoutKey, layoutVersion, pebble.Sync)
}

// Ready returns nil while the engine is open.
func (e *Engine) Ready(ctx context.Context) error { return e.usable(ctx) }

// Settle flushes what was written and waits until no flush or compaction
// has run for a moment: for tests and benchmarks that measure a read, so
// that the store's background work after a load is not counted in it.
func (e *Engine) Settle(ctx context.Context) error {
	if err := e.usable(ctx); err != nil {
		return err
	}
	if err := e.drainHead(); err != nil {
		return err
	}
	if err := e.db.Flush(); err != nil {
		return err
	}
	for quiet := 0; quiet < 3; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		m := e.db.Metrics()
		if m.Flush.NumInProgress == 0 && m.Compact.NumInProgress == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return nil
}

// Close stops the purge and closes the store. Only the first call does
// anything; later ones return ErrClosed.
func (e *Engine) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	close(e.stop)
	<-e.done
	<-e.syncDone
	// Taking mu waits for a write that passed its closed check.
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	if e.wal != nil {
		// What the rotation cannot make durable in Pebble stays in the
		// log, for the next Open.
		errs = append(errs, e.rotate(), e.wal.close())
	}
	return errors.Join(append(errs, e.db.Close(), e.lock.Close())...)
}

func (e *Engine) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if e.closed.Load() {
		return ErrClosed
	}
	return nil
}

// pebbleLogger sends Pebble's log lines to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info("Pebble", "msg", fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("Pebble", "msg", fmt.Sprintf(format, args...))
}

// Fatalf must not return (pebble.Logger); Pebble calls it on unrecoverable
// errors such as a failed WAL write.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("Pebble fatal error", "msg", msg)
	panic(msg)
}

// eventListener logs the events an operator must know about.
func eventListener(l *slog.Logger) *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) { l.Error("Pebble background error", "err", err) },
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			l.Warn("Pebble write stall", "reason", info.Reason)
		},
		WriteStallEnd: func() { l.Info("Pebble write stall ended") },
		DiskSlow: func(info pebble.DiskSlowInfo) {
			l.Warn("Pebble disk slow", "path", info.Path, "duration", info.Duration)
		},
	}
}

// CacheStatus is the block cache's bytes in use against its size, and its
// hits and misses since the store opened: what the status page shows of
// the embedded engine's memory. It reads Pebble's metrics, which walks its
// levels: for status pages, not for a hot path.
func (e *Engine) CacheStatus() CacheStatus {
	m := e.db.Metrics().BlockCache
	return CacheStatus{Bytes: m.Size, MaxBytes: e.opts.CacheSize, Hits: m.Hits, Misses: m.Misses}
}

// CacheStatus is the block cache's part of the status page.
type CacheStatus struct {
	Bytes    int64 `json:"bytes"`
	MaxBytes int64 `json:"max_bytes"`
	Hits     int64 `json:"hits"`
	Misses   int64 `json:"misses"`
}
