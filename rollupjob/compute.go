package rollupjob

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// rollMetric writes the units lo to hi (their ends, lo <= hi) of metric m
// at resolutions rs. It reads the metric's series over (lo-2U, hi]: the
// unit before lo is read for the counter's starting value
// (rollup.Compute), so a span of k units reads k+1 units of samples.
// With recompute, buckets written before that no longer have samples, and
// values that moved between finite and non-finite (which live in
// different rows, §5.7), have their old cells deleted after the new ones
// are written, so that a reader never misses a bucket that has data.
func (j *Job) rollMetric(ctx context.Context, m string, lo, hi int64, rs []rollup.Resolution, recompute bool) (int, error) {
	u := j.units.unit
	var old map[uint64]*oldSeries
	if recompute {
		var err error
		if old, err = j.readRollups(ctx, m, lo, hi, rs); err != nil {
			return 0, err
		}
	}
	set, done := j.st.ScanSeries(ctx, lo-2*u+1, hi, rollup.Rollable, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, m))
	defer done()
	w := j.newWriter(ctx)
	var (
		it      chunkenc.Iterator
		ts      []int64
		vs      []float64
		buckets = map[rollup.Resolution]int{}
	)
	for set.Next() {
		s := set.At()
		ls := s.Labels()
		ts, vs = ts[:0], vs[:0]
		it = s.Iterator(it)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			if vt != chunkenc.ValFloat {
				continue // native histograms are not rolled up
			}
			t, v := it.At()
			ts, vs = append(ts, t), append(vs, v)
		}
		if err := it.Err(); err != nil {
			return 0, fmt.Errorf("read %s: %w", m, err)
		}
		j.m.rawRead.Add(float64(len(ts)))
		for _, r := range rs {
			pts := rollup.Compute(r, lo-u, hi, ts, vs)
			if len(pts) == 0 {
				continue
			}
			buckets[r] += len(pts)
			for _, a := range rollup.Aggregates {
				rl := rollup.SeriesLabels(ls, r, a)
				w.series(rl, j.ttl(r))
				var os *oldSeries
				if recompute {
					h := rl.Hash()
					os = old[h]
					delete(old, h)
				}
				k := 0 // os.cells before k are matched or cleared
				for _, p := range pts {
					v := p.Value(a)
					same := false
					if os != nil {
						for ; k < len(os.cells) && os.cells[k].t < p.End; k++ {
							w.clearOld(os, k) // a bucket left without samples
						}
						if k < len(os.cells) && os.cells[k].t == p.End {
							// The same bits are not written again: recomputing
							// a unit nothing changed in (an import's marks
							// over history the backfill read) writes nothing.
							same = math.Float64bits(os.cells[k].v) == math.Float64bits(v)
							if finite(os.cells[k].v) != finite(v) {
								w.clearOld(os, k)
							}
							k++
						}
					}
					if same {
						continue
					}
					if err := w.append(p.End, v); err != nil {
						return 0, err
					}
				}
				for ; os != nil && k < len(os.cells); k++ {
					w.clearOld(os, k)
				}
			}
		}
	}
	if err := set.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", m, err)
	}
	for _, os := range old { // rollup series whose raw series has no bucket left
		for k := range os.cells {
			w.clearOld(os, k)
		}
	}
	if err := w.flush(); err != nil {
		return 0, err
	}
	n := 0
	for r, c := range buckets {
		j.m.buckets.WithLabelValues(r.String()).Add(float64(c))
		n += c
	}
	return n, nil
}

// ttl is the time to live of r's cells written now; 0 keeps them forever.
// It is counted from the bucket's end (writer.append subtracts the age).
func (j *Job) ttl(r rollup.Resolution) int64 { return int64(j.cfg.Retention[r] / 1e9) }

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// oldSeries is the cells of one rollup series as stored before a
// recomputation, ascending by time.
type oldSeries struct {
	ls    labels.Labels
	cells []oldCell
}

type oldCell struct {
	t int64
	v float64
}

// readRollups reads the cells of m's rollups at rs in units lo to hi, as
// stored before a recomputation, by the rollup series' label hash.
func (j *Job) readRollups(ctx context.Context, m string, lo, hi int64, rs []rollup.Resolution) (map[uint64]*oldSeries, error) {
	keep := func(ls labels.Labels) bool {
		raw, ok := rollup.RawLabels(ls)
		if !ok || raw.Get(model.MetricNameLabel) != m {
			return false
		}
		r, err := rollup.ParseResolution(ls.Get(rollup.ResolutionTag))
		return err == nil && slices.Contains(rs, r)
	}
	set, done := j.st.ScanSeries(ctx, lo-j.units.unit+1, hi, keep,
		labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, m+rollup.NameSuffix),
		labels.MustNewMatcher(labels.MatchEqual, rollup.SavedFrom, m))
	defer done()
	out := map[uint64]*oldSeries{}
	var it chunkenc.Iterator
	for set.Next() {
		s := set.At()
		os := &oldSeries{ls: s.Labels()}
		it = s.Iterator(it)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			if vt == chunkenc.ValFloat {
				t, v := it.At()
				os.cells = append(os.cells, oldCell{t, v})
			}
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("read rollups of %s: %w", m, err)
		}
		if len(os.cells) > 0 {
			out[os.ls.Hash()] = os
		}
	}
	return out, set.Err()
}

// writer appends rollup cells and commits every CommitCells of them.
type writer struct {
	j      *Job
	ctx    context.Context
	app    *kairosstore.Appender
	ref    storage.SeriesRef
	ls     labels.Labels
	ttl    int64
	now    int64 // s
	n      int
	clears []kairosstore.Clear
}

func (j *Job) newWriter(ctx context.Context) *writer {
	return &writer{j: j, ctx: ctx, now: j.now() / 1000}
}

// series makes the next cells those of ls, living ttl seconds after their
// bucket's end.
func (w *writer) series(ls labels.Labels, ttl int64) {
	w.ls, w.ref, w.ttl = ls, 0, ttl
}

func (w *writer) append(t int64, v float64) error {
	ttl := int64(0)
	if w.ttl > 0 {
		// Cells expire ttl after their bucket's end, not after the
		// write: a backfilled bucket is as old as its data.
		ttl = w.ttl - (w.now - t/1000)
		if ttl <= 0 {
			return nil
		}
	}
	if w.app == nil {
		w.app = w.j.st.NewAppender()
	}
	w.app.SetDerived(int32(min(ttl, math.MaxInt32)))
	ref, err := w.app.Append(w.ref, w.ls, t, v)
	if err != nil {
		return fmt.Errorf("append rollup %s: %w", w.ls, err)
	}
	w.ref = ref
	w.n++
	if w.n >= w.j.cfg.CommitCells {
		return w.commit()
	}
	return nil
}

func (w *writer) commit() error {
	if w.app == nil {
		return nil
	}
	app := w.app
	w.app, w.n = nil, 0
	if err := app.Commit(w.ctx); err != nil {
		return fmt.Errorf("write rollups: %w", err)
	}
	return nil
}

// clearOld deletes os's k-th old cell, from the row its value was in.
func (w *writer) clearOld(os *oldSeries, k int) {
	c := os.cells[k]
	f := finite(c.v)
	w.clears = append(w.clears, kairosstore.Clear{Labels: os.ls, T: c.t, Double: f, NonFinite: !f})
}

// flush commits what is appended, then deletes the cells to clear: never
// before their replacements are stored.
func (w *writer) flush() error {
	if err := w.commit(); err != nil {
		return err
	}
	if err := w.j.st.ClearSamples(w.ctx, w.clears); err != nil {
		return fmt.Errorf("clear rollup cells: %w", err)
	}
	w.clears = nil
	return nil
}
