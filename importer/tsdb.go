package importer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
)

// TSDB names a Prometheus TSDB to import: a data directory or a snapshot.
type TSDB struct {
	Dir string
	// SandboxDir is where Prometheus's read-only opening replays the WAL
	// into (it hard-links the head's chunk files there, so it must be on
	// the data directory's file system); empty means the data directory,
	// as promtool does, when there is a wal/, and the temporary directory
	// otherwise.
	SandboxDir string
}

// ImportTSDB imports every block of src and then its head (what the WAL
// holds beyond the last block). A block is a unit: once all its samples are
// stored, its ULID is recorded, and a rerun skips it. The head changes as
// long as Prometheus runs, so it is not recorded and is imported again on a
// rerun, which writes the same values into the same cells.
func ImportTSDB(ctx context.Context, st *kairosstore.Store, src TSDB, o Options, log *slog.Logger) (Summary, error) {
	var sum Summary
	log = orDiscard(log)
	hasWAL, err := checkTSDB(src.Dir)
	if err != nil {
		return sum, err
	}
	// Prometheus's read-only opening makes its sandbox at once, needed or
	// not: without a WAL it goes to the temporary directory, so that a
	// snapshot on a read-only file system can be imported.
	sandbox := src.SandboxDir
	if sandbox == "" {
		sandbox = os.TempDir()
		if hasWAL {
			sandbox = src.Dir
		}
	}
	db, err := tsdb.OpenDBReadOnly(src.Dir, sandbox, log)
	if err != nil {
		return sum, fmt.Errorf("open the TSDB at %s read-only: %w", src.Dir, err)
	}
	defer db.Close()
	blocks, err := db.Blocks()
	if err != nil {
		return sum, fmt.Errorf("read the blocks of the TSDB at %s: %w", src.Dir, err)
	}

	type unit struct {
		b    tsdb.BlockReader
		span Span
	}
	var units []unit
	var planned int64
	maxBlockTime := int64(math.MinInt64)
	for _, b := range blocks {
		m := b.Meta()
		maxBlockTime = max(maxBlockTime, m.MaxTime)
		// A block holds [MinTime, MaxTime).
		span := Span{Start: max(o.Start, m.MinTime), End: min(o.End, m.MaxTime-1)}
		if span.End < span.Start {
			continue
		}
		units = append(units, unit{b: b, span: span})
		planned += int64(m.Stats.NumSamples)
	}
	headUnits := 0
	if hasWAL && o.End >= maxBlockTime {
		headUnits = 1
	}
	o.Progress.Plan(len(units)+headUnits, planned)

	mk := marks{st: st, key: o.sourceKey("tsdb", "")}
	w := newWriter(st, &o, log)
	defer w.abort()
	sels := o.selectors()
	for _, u := range units {
		m := u.b.Meta()
		// The range is part of the key: a block imported in part is
		// not done for a run over more of it.
		key := fmt.Sprintf("block/%s/%d/%d", m.ULID, u.span.Start, u.span.End)
		done, err := mk.done(ctx, key)
		if err != nil {
			return sum, err
		}
		if done {
			sum.Skipped++
			o.Progress.UnitDone(true)
			log.Debug("Block imported before; skipped", "block", m.ULID)
			continue
		}
		v, err := withRetries(ctx, &o, log, key, func() (markValue, error) {
			q, err := tsdb.NewBlockQuerier(u.b, u.span.Start, u.span.End)
			if err != nil {
				return markValue{}, err
			}
			defer q.Close()
			return importSet(ctx, w, q, sels, u.span)
		})
		if err != nil {
			return sum, fmt.Errorf("block %s of %s: %w", m.ULID, src.Dir, err)
		}
		if err := mk.set(ctx, key, v); err != nil {
			return sum, err
		}
		sum.add(v)
		o.Progress.UnitDone(false)
		log.Debug("Block imported", "block", m.ULID, "series", v.Series, "samples", v.Samples)
	}
	if headUnits == 0 {
		return sum, nil
	}
	// The head starts where the last block ends: Prometheus's read-only
	// opening replays only the WAL's samples from there on.
	span := Span{Start: max(o.Start, maxBlockTime), End: o.End}
	q, err := db.Querier(span.Start, span.End)
	if err != nil {
		return sum, fmt.Errorf("replay the WAL of %s: %w", src.Dir, err)
	}
	defer q.Close()
	v, err := withRetries(ctx, &o, log, "head", func() (markValue, error) {
		return importSet(ctx, w, q, sels, span)
	})
	if err != nil {
		return sum, fmt.Errorf("the head (WAL) of %s: %w", src.Dir, err)
	}
	sum.add(v)
	o.Progress.UnitDone(false)
	return sum, nil
}

// importSet writes the series of q matching sels within span and waits
// until all are stored.
func importSet(ctx context.Context, w *writer, q storage.Querier, sels [][]*labels.Matcher, span Span) (markValue, error) {
	w.reset()
	ss := selectAll(ctx, q, sels, &storage.SelectHints{Start: span.Start, End: span.End})
	for ss.Next() {
		if err := w.writeSeries(ctx, ss.At(), span.Start, span.End); err != nil {
			w.abort()
			return markValue{}, err
		}
	}
	if err := ss.Err(); err != nil {
		w.abort()
		return markValue{}, err
	}
	return w.finish(ctx)
}

func (s *Summary) add(v markValue) {
	if v.Samples > 0 {
		if s.Samples == 0 {
			s.MinT, s.MaxT = v.MinT, v.MaxT
		}
		s.MinT, s.MaxT = min(s.MinT, v.MinT), max(s.MaxT, v.MaxT)
	}
	s.Units++
	s.Series += v.Series
	s.Samples += v.Samples
	s.Refused += v.Refused
}

// CheckTSDB says what is wrong with dir as a TSDB to import, if anything.
func CheckTSDB(dir string) error {
	_, err := checkTSDB(dir)
	return err
}

// checkTSDB refuses a directory that is not a TSDB before Prometheus's
// opening creates anything in it, and says whether it has a WAL.
func checkTSDB(dir string) (hasWAL bool, err error) {
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("no Prometheus TSDB at %s: the directory does not exist", dir)
		}
		return false, fmt.Errorf("no Prometheus TSDB at %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("no Prometheus TSDB at %s: not a directory (give Prometheus's --storage.tsdb.path or a snapshot directory)", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("read the TSDB directory %s: %w", dir, err)
	}
	blocks := 0
	for _, e := range entries {
		if e.IsDir() && e.Name() == "wal" {
			hasWAL = true
		}
		if _, err := ulid.ParseStrict(e.Name()); err == nil && e.IsDir() {
			blocks++
		}
	}
	if blocks == 0 && !hasWAL {
		return false, fmt.Errorf("no Prometheus TSDB at %s: it has neither blocks (directories named by a ULID) nor a wal/ directory; give Prometheus's --storage.tsdb.path or a snapshot directory (data/snapshots/<name>)", dir)
	}
	return hasWAL, nil
}

func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}
