package pebblekv

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The head's log (head.go) is a sequence of segment files in the store's
// directory, named headlog-N with N rising; Pebble ignores files it did
// not name. Each record is the cells of one write transaction that went to
// the head:
//
//	u32 payload length | u32 CRC-32C of the payload | payload
//
// A record is acknowledged only after an fsync that covers it; concurrent
// writers share one fsync (syncTo). In periodic mode (commitlog.go) it is
// acknowledged once append has written it to the file, and syncTo runs on
// a timer. Segments are removed only after
// everything in them is durable in Pebble (Engine.rotate), so every
// acknowledged cell is in Pebble or in a segment. Open replays the segments
// and removes them.
const walPrefix = "headlog-"

// maxWALRecord bounds a record's length as read back, so a corrupt length
// cannot make replay allocate more than a record can be.
const maxWALRecord = 1 << 31

var crcTable = crc32.MakeTable(crc32.Castagnoli)

type wal struct {
	fs  vfs.FS
	dir string

	// Guarded by Engine.mu (appends and rotations run under it), and by
	// syncMu for f and seg, which syncTo uses.
	f   vfs.File
	seg uint64
	// broken is set when a write failed part way: the segment may end in
	// a torn record, so the next append starts a new one. older is set
	// while segments before the current one hold records.
	broken, older bool
	// size is the bytes appended to the current segment.
	size int64

	// written counts every byte appended since Open, across segments, and
	// synced how many of them are known durable. An fsync error is sticky
	// (failed): whether what it covered reached the disk is unknown, as
	// with Pebble's own log, which stops the process.
	written atomic.Int64
	synced  atomic.Int64
	syncMu  sync.Mutex
	failed  syncFailure
	// metrics, if set, counts the fsyncs of syncTo.
	metrics *syncMetrics

	hdr [8]byte
}

func walName(seg uint64) string { return walPrefix + strconv.FormatUint(seg, 10) }

// walSegments lists the log's segments in dir, oldest first.
func walSegments(fs vfs.FS, dir string) ([]uint64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, err
	}
	var segs []uint64
	for _, name := range names {
		n, ok := strings.CutPrefix(name, walPrefix)
		if !ok {
			continue
		}
		seg, err := strconv.ParseUint(n, 10, 64)
		if err != nil {
			continue
		}
		segs = append(segs, seg)
	}
	slices.Sort(segs)
	return segs, nil
}

// openWAL starts segment seg, which must not exist.
func openWAL(fs vfs.FS, dir string, seg uint64) (*wal, error) {
	w := &wal{fs: fs, dir: dir, failed: syncFailure{what: "head log"}}
	if err := w.start(seg); err != nil {
		return nil, err
	}
	return w, nil
}

// start creates segment seg and makes its directory entry durable, so that
// records synced into it cannot vanish with it in a crash.
func (w *wal) start(seg uint64) error {
	f, err := w.fs.Create(w.fs.PathJoin(w.dir, walName(seg)), vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("cannot create the head log: %w", err)
	}
	if err := syncDir(w.fs, w.dir); err != nil {
		return errors.Join(fmt.Errorf("cannot create the head log: %w", err), f.Close())
	}
	w.syncMu.Lock()
	old := w.f
	w.f, w.seg, w.size, w.broken = f, seg, 0, false
	w.syncMu.Unlock()
	if old != nil {
		return old.Close()
	}
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// append writes one record and returns the position syncTo must reach for
// it to be durable. Called under Engine.mu.
func (w *wal) append(payload []byte) (int64, error) {
	if err := w.failure(); err != nil {
		return 0, err
	}
	if len(payload) > maxWALRecord {
		return 0, fmt.Errorf("cannot write the head log: a record of %d bytes, at most %d", len(payload), maxWALRecord)
	}
	if w.broken {
		// The records before the torn one may not be synced yet, and
		// syncTo only syncs the current segment.
		if err := w.f.Sync(); err != nil {
			return 0, w.fail(err)
		}
		if err := w.start(w.seg + 1); err != nil {
			return 0, err
		}
		w.older = true
	}
	binary.LittleEndian.PutUint32(w.hdr[:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(w.hdr[4:], crc32.Checksum(payload, crcTable))
	// vfs.File.Write may modify its argument; the header is ours and the
	// payload is the transaction's scratch, written once.
	if _, err := w.f.Write(w.hdr[:]); err != nil {
		w.broken = true
		return 0, fmt.Errorf("cannot write the head log: %w", err)
	}
	if _, err := w.f.Write(payload); err != nil {
		w.broken = true
		return 0, fmt.Errorf("cannot write the head log: %w", err)
	}
	n := int64(len(w.hdr) + len(payload))
	w.size += n
	return w.written.Add(n), nil
}

// syncTo returns once the log is durable up to pos. Concurrent callers
// share one fsync: whoever holds syncMu syncs everything written so far.
func (w *wal) syncTo(pos int64) error {
	if w.synced.Load() >= pos {
		return nil
	}
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	if err := w.failure(); err != nil {
		return err
	}
	if w.synced.Load() >= pos {
		return nil
	}
	// Everything counted in written was handed to the file before it was
	// counted, and records of earlier segments were made durable in Pebble
	// before their segment was left (markSynced).
	target := w.written.Load()
	// fdatasync, as Pebble syncs its own log: the file's size is synced
	// with the data, its times are not.
	start := time.Now()
	if err := w.f.SyncData(); err != nil {
		return w.fail(err)
	}
	if w.metrics != nil {
		w.metrics.observe("head", start)
	}
	w.synced.Store(max(w.synced.Load(), target))
	return nil
}

func (w *wal) failure() error { return w.failed.get() }

func (w *wal) fail(err error) error { return w.failed.set(err) }

// markSynced notes that everything appended so far is durable, in Pebble.
func (w *wal) markSynced() {
	w.syncMu.Lock()
	w.synced.Store(max(w.synced.Load(), w.written.Load()))
	w.syncMu.Unlock()
}

// close syncs what is not synced yet (periodic mode: records a rotation
// could not move to Pebble) and closes the current segment.
func (w *wal) close() error {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	if w.f == nil {
		return nil
	}
	var err error
	if w.failure() == nil && w.synced.Load() < w.written.Load() {
		err = w.f.SyncData()
	}
	err = errors.Join(err, w.f.Close())
	w.f = nil
	return err
}

// removeBefore removes the segments before the current one, durably: a
// segment that came back after a crash would replay cells that a purge
// since may have made visible again.
func (w *wal) removeBefore() error {
	segs, err := walSegments(w.fs, w.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range segs {
		if s < w.seg {
			errs = append(errs, w.fs.Remove(w.fs.PathJoin(w.dir, walName(s))))
		}
	}
	if err := errors.Join(append(errs, syncDir(w.fs, w.dir))...); err != nil {
		return err
	}
	w.older = false
	return nil
}

// errTorn marks the end of a segment's readable records.
var errTorn = errors.New("torn or corrupt record")

// readWAL calls fn with the payload of each record of segment seg, in
// order, and stops at the first record that is torn or fails its checksum,
// returning the offset where it starts. payload is valid during the call.
func readWAL(fs vfs.FS, dir string, seg uint64, fn func(payload []byte) error) (records int, badAt int64, err error) {
	f, err := fs.Open(fs.PathJoin(dir, walName(seg)))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	size := st.Size()
	r := bufio.NewReaderSize(f, 1<<20)
	var hdr [8]byte
	var buf []byte
	off := int64(0)
	for off < size {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return records, off, errTorn
		}
		n := int64(binary.LittleEndian.Uint32(hdr[:4]))
		if n > maxWALRecord || off+8+n > size {
			return records, off, errTorn
		}
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return records, off, errTorn
		}
		if crc32.Checksum(buf, crcTable) != binary.LittleEndian.Uint32(hdr[4:]) {
			return records, off, errTorn
		}
		if err := fn(buf); err != nil {
			return records, off, err
		}
		records++
		off += 8 + n
	}
	return records, off, nil
}
