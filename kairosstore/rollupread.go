package kairosstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
	"github.com/kairos-remote/kairos-adapter/readhint"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// A read hint (readhint.Hint, chosen by the query API) changes how each
// series of a selector is read, in three ways:
//
//   - Windows: only the cells inside the windows the engine evaluates are
//     read, (t-W, t] for every evaluation time t, merged where they touch.
//   - Resolution: the buckets whose end lies in the rolled-up range
//     (rollup.DoneKey) and in the read range are read from the rollup
//     series of Aggregate, under the raw series' labels, and the raw samples
//     before and after them are stitched on: raw up to the first bucket's
//     start, rollup values at bucket ends, raw after the last bucket's end.
//     So the seam has no gap and no overlap.
//   - Aggregate Count returns 1 per raw sample (the query API rewrote
//     count_over_time to sum_over_time); Counter returns a running sum of
//     increases, resets applied, so rate and increase see a counter that
//     never resets.
//
// A series with native-histogram rows, or one that is not rollable, is read
// raw: no rollup applies to it.

// doneTTL is how long a rollup progress read is trusted. A stale value
// mostly means more raw reads, as the job's range [from, to] only grows
// (forward at to, backward at from during backfill). It shrinks when
// rollups expire (their TTL moves from forward) or are deleted: for up to
// doneTTL a read may then ask for buckets that are gone and see less data
// near from. Recomputed buckets (late samples, deletes) keep their range.
const doneTTL = 5 * time.Second

// doneCache is the last rollup progress read per resolution.
type doneCache struct {
	mu sync.Mutex
	m  map[rollup.Resolution]doneEntry
}

type doneEntry struct {
	from, to int64
	ok       bool // a range is recorded
	at       time.Time
}

// rollupDone returns the bucket ends [from, to] whose rollups at r are all
// written; !ok when none are.
func (s *Store) rollupDone(ctx context.Context, r rollup.Resolution) (from, to int64, ok bool, err error) {
	now := s.opts.Now()
	s.done.mu.Lock()
	e, hit := s.done.m[r]
	s.done.mu.Unlock()
	if hit && now.Sub(e.at) < doneTTL {
		return e.from, e.to, e.ok, nil
	}
	v, found, err := s.eng.ServiceValue(ctx, rollup.Service, rollup.ServiceKey, rollup.DoneKey(r))
	if err != nil {
		return 0, 0, false, fmt.Errorf("read rollup progress %s: %w", rollup.DoneKey(r), err)
	}
	e = doneEntry{at: now}
	if found {
		if e.from, e.to, err = rollup.ParseDone(v); err != nil {
			// Another writer's value: read raw rather than trust it.
			s.log.Warn("unreadable rollup progress, reading raw samples", "key", rollup.DoneKey(r), "err", err)
		} else {
			e.ok = true
		}
	}
	s.done.mu.Lock()
	if s.done.m == nil {
		s.done.m = map[rollup.Resolution]doneEntry{}
	}
	s.done.m[r] = e
	s.done.mu.Unlock()
	return e.from, e.to, e.ok, nil
}

// plannedRead is a read hint resolved for one Select.
type plannedRead struct {
	readhint.Hint
	start, end int64  // the querier's range
	spans      []span // what is read of [start, end]: the windows, or all of it
	// rolled: the buckets ending in [rollFrom, rollTo] are read from
	// rollups, every one of them inside [start, end] and written.
	rolled           bool
	rollFrom, rollTo int64
}

// planRead resolves read hint p for a Select over [start, end] with hints;
// nil is an ordinary read.
func (s *Store) planRead(ctx context.Context, p readhint.Hint, hints *storage.SelectHints, start, end int64) (*plannedRead, error) {
	if p.Aggregate == "" && p.WindowMillis == 0 {
		return nil, nil
	}
	pr := &plannedRead{Hint: p, start: start, end: end, spans: []span{{start, end}}}
	if p.WindowMillis > 0 && hints != nil && hints.Step > 0 && p.WindowMillis < hints.Step {
		pr.spans = windows(hints.Start, hints.Step, p.WindowMillis, start, end)
	}
	if p.Resolution == 0 {
		return pr, nil
	}
	from, to, ok, err := s.rollupDone(ctx, p.Resolution)
	if err != nil || !ok {
		return pr, err
	}
	r := p.Resolution.Millis()
	// The first bucket wholly inside [start, end], and the last.
	first := max(from, p.Resolution.Bucket(start-1)+r)
	last := p.Resolution.Bucket(end)
	if last > end {
		last -= r
	}
	last = min(to, last)
	if first <= last {
		pr.rolled, pr.rollFrom, pr.rollTo = true, first, last
	}
	return pr, nil
}

// maxWindows bounds the windows one read plans: the windows of a range
// query are its steps, which the query API bounds to 11,000 points (11,001
// times); a plan with more reads [start, end] whole instead, which is
// always correct (the engine takes its windows from any superset), so no
// hint can make a read allocate or walk more than this.
const maxWindows = 11_001

// windows are the ranges a selector evaluated every step from hintStart
// reads (its samples in (t-w, t] for t = hintStart+w-1+k*step, as the
// engine's getTimeRangesForSelector sets hints.Start), within [start, end],
// merged where they touch. Their number is counted before any is made, in
// uint64 arithmetic: between Prometheus's minimum and maximum times, at
// any step, no int64 difference of two ends holds, and t0 += step wrapped.
func windows(hintStart, step, w, start, end int64) []span {
	whole := []span{{start, end}}
	if step <= 0 || w <= 0 || end < start {
		return whole
	}
	// The first window that can reach start: t0 >= start-w+1.
	first := hintStart
	if lo := addSat(start, 1-w); lo > hintStart {
		k := (uint64(lo) - uint64(hintStart)) / uint64(step)
		first = int64(uint64(hintStart) + k*uint64(step)) // <= lo
	}
	if first > end {
		return nil
	}
	n := (uint64(end)-uint64(first))/uint64(step) + 1
	if w >= step || n > maxWindows {
		return whole
	}
	out := make([]span, 0, n)
	for i := range int64(n) {
		t0 := first + i*step // <= end; exact, as int64 arithmetic wraps
		lo, hi := max(t0, start), min(addSat(t0, w-1), end)
		if lo > hi {
			continue
		}
		if n := len(out); n > 0 && lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, hi)
			continue
		}
		out = append(out, span{lo, hi})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// addSat is a+b, held at the ends of int64 instead of wrapping.
func addSat(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}

// clip is the parts of spans within [lo, hi].
func clip(spans []span, lo, hi int64) []span {
	var out []span
	for _, sp := range spans {
		if l, h := max(sp.lo, lo), min(sp.hi, hi); l <= h {
			out = append(out, span{l, h})
		}
	}
	return out
}

// sliceCells is what one data_points slice costs beside its cells, counted
// in cells: a round trip on Cassandra, a seek on the embedded engine. Where
// the gap between two windows holds fewer cells than that, one slice over
// both and the cells between them dropped is the cheaper read.
const sliceCells = 64

// coalesce is spans (sorted, disjoint) merged where the gap between two is
// at most maxGap ms: the slices to read, each to be filtered by the spans
// it covers.
func coalesce(spans []span, maxGap int64) []span {
	if len(spans) < 2 || maxGap <= 0 {
		return spans
	}
	out := make([]span, 0, len(spans))
	for _, sp := range spans {
		// sp.lo > last.hi, so the gap never overflows as uint64.
		if n := len(out); n > 0 && uint64(sp.lo)-uint64(out[n-1].hi)-1 <= uint64(maxGap) {
			out[n-1].hi = sp.hi
			continue
		}
		out = append(out, sp)
	}
	return out
}

// spanFilter says whether the times of one ascending walk lie in spans.
type spanFilter struct {
	spans []span
	i     int
}

func (f *spanFilter) in(t int64) bool {
	for f.i < len(f.spans) && f.spans[f.i].hi < t {
		f.i++
	}
	return f.i < len(f.spans) && f.spans[f.i].lo <= t
}

// overlapping is the spans that overlap [lo, hi].
func overlapping(spans []span, lo, hi int64) []span {
	i, _ := slices.BinarySearchFunc(spans, lo, func(sp span, t int64) int {
		switch {
		case sp.hi < t:
			return -1
		case sp.hi > t:
			return 1
		}
		return 0
	})
	j := i
	for j < len(spans) && spans[j].lo <= hi {
		j++
	}
	return spans[i:j]
}

// readPlanned reads one series as p says.
func (s *Store) readPlanned(ctx context.Context, ref *index.Series, p *plannedRead, sizeHint int, budget *sampleBudget) (*listSeries, error) {
	var rkey rollupKey
	rolled := p.rolled && rollup.Rollable(ref.Labels) && !hasHistograms(ref)
	if rolled {
		var err error
		// A series whose rollup names could not be stored has none.
		rkey, err = s.rollupKeyOf(ref.Labels, p.Resolution, p.Aggregate)
		rolled = err == nil
	}
	if !rolled {
		out, err := s.readSeriesIn(ctx, ref, p.spans, sizeHint, budget)
		if err != nil || p.Aggregate != rollup.Count {
			return out, err
		}
		return ones(out), nil
	}
	r := p.Resolution.Millis()
	before, err := s.readSeriesIn(ctx, ref, clip(p.spans, p.start, p.rollFrom-r), 0, budget)
	if err != nil {
		return nil, err
	}
	mid, err := s.readRollup(ctx, ref, rkey, p.Resolution, clip(p.spans, p.rollFrom, p.rollTo), budget)
	if err != nil {
		return nil, err
	}
	afterSpans := clip(p.spans, p.rollTo+1, p.end)
	after, err := s.readSeriesIn(ctx, ref, afterSpans, 0, budget)
	if err != nil {
		return nil, err
	}
	switch p.Aggregate {
	case rollup.Count:
		before, after = ones(before), ones(after)
	case rollup.Counter:
		// The first raw sample after the rollups increases from the last
		// one of the last bucket.
		var seam *listSeries
		if len(after.ts) > 0 {
			if seam, err = s.readSeriesIn(ctx, ref, []span{{p.rollTo - r + 1, p.rollTo}}, 0, budget); err != nil {
				return nil, err
			}
		}
		return runningSum(ref.Labels, r, before, mid, seam, after), nil
	}
	out := &listSeries{lset: ref.Labels}
	out.ts = slices.Concat(before.ts, mid.ts, after.ts)
	out.vs = slices.Concat(before.vs, mid.vs, after.vs)
	return out, nil
}

func hasHistograms(ref *index.Series) bool {
	return slices.ContainsFunc(ref.Rows, func(r index.Row) bool {
		return r.DataType == codec.TypeHistogram || r.DataType == codec.TypeFloatHistogram
	})
}

// ones replaces every sample by 1, for the count of samples; stale markers
// are no samples to a range function, so they go.
func ones(l *listSeries) *listSeries {
	out := &listSeries{lset: l.lset, ts: make([]int64, 0, len(l.ts)), vs: make([]float64, 0, len(l.ts))}
	for i, t := range l.ts {
		if (l.hs == nil || l.hs[i] == nil && l.fhs[i] == nil) && value.IsStaleNaN(l.vs[i]) {
			continue
		}
		out.ts = append(out.ts, t)
		out.vs = append(out.vs, 1)
	}
	return out
}

// runningSum turns the raw counter samples before the rollups, the rollups'
// increases and the raw samples after them into one counter without
// resets: raw increments follow Prometheus's reset rule (a drop is a
// restart from zero), as rollup.Compute's do. seam holds the last bucket's
// raw samples, where the first increment after the rollups starts. The sum
// starts from the total of the increments, so that rate's extrapolation
// never takes the first value of a window for a counter just started (as
// it would a value near zero).
//
// Each bucket (end-r, end] also gets the value before its increase, 1 ms
// after its start: a window (t-R, t] aligned to buckets then starts with
// the counter as it stood at t-R, and rate sees the whole increase of the
// window instead of extrapolating its first bucket from the average
// spacing of the points (which misleads it where hourly points and raw
// samples meet in one window).
func runningSum(ls labels.Labels, r int64, before, mid, seam, after *listSeries) *listSeries {
	n := len(before.ts) + len(mid.ts) + len(after.ts)
	ts, incs := make([]int64, 0, n), make([]float64, 0, n)
	raw := func(l *listSeries, prev float64, have bool) {
		for i, t := range l.ts {
			v := l.vs[i]
			if math.IsNaN(v) {
				continue // stale markers too
			}
			inc := 0.0
			if have {
				inc = v - prev
				if v < prev {
					inc = v
				}
			}
			ts, incs = append(ts, t), append(incs, inc)
			prev, have = v, true
		}
	}
	raw(before, 0, false)
	for i, end := range mid.ts {
		if n := len(ts); n == 0 || ts[n-1] < end-r+1 {
			ts, incs = append(ts, end-r+1), append(incs, 0)
		}
		ts, incs = append(ts, end), append(incs, mid.vs[i])
	}
	prev, have := 0.0, false
	if seam != nil {
		for i := len(seam.vs) - 1; i >= 0; i-- {
			if !math.IsNaN(seam.vs[i]) {
				prev, have = seam.vs[i], true
				break
			}
		}
	}
	raw(after, prev, have)
	total := 0.0
	for _, inc := range incs {
		total += inc
	}
	out := &listSeries{lset: ls, ts: ts, vs: incs}
	sum := total
	for i, inc := range incs {
		sum += inc
		out.vs[i] = sum
	}
	return out
}

// rollupKey is what the row keys of one rollup series are made of.
type rollupKey struct {
	metric string
	tags   []codec.Tag
}

// rollupKeyOf is the rollup series of raw series ls at r of a, named as
// the job's appender names it, so its rows are found without an index read.
func (s *Store) rollupKeyOf(ls labels.Labels, r rollup.Resolution, a rollup.Aggregate) (rollupKey, error) {
	metric, tags, err := s.mapper.Split(rollup.SeriesLabels(ls, r, a), nil)
	if err != nil {
		return rollupKey{}, err
	}
	codec.SortTags(tags)
	return rollupKey{metric, tags}, nil
}

// readRollup reads the rollup values at bucket ends within spans, from the
// kairos_double rows of k at res. Rows that do not exist hold no cell.
func (s *Store) readRollup(ctx context.Context, ref *index.Series, k rollupKey, res rollup.Resolution, spans []span, budget *sampleBudget) (*listSeries, error) {
	out := &listSeries{lset: ref.Labels}
	if len(spans) == 0 {
		return out, nil
	}
	if budget.left() < 0 {
		return nil, fmt.Errorf("read rollups of %s: %w", ref.Labels, ErrTooManySamples)
	}
	t0 := time.Now()
	defer s.observe("data_points_rollup", t0)
	read := 0
	defer func() { s.m.cellsRead.WithLabelValues("rollup").Add(float64(read)) }()
	w := s.spec.WidthMillis()
	var key []byte
	rollupRow := index.Row{DataType: codec.TypeDouble} // rollups are kairos_double rows
	// A rollup row holds a cell per bucket end at most, so a gap of
	// sliceCells buckets between windows is read through, not around: at a
	// step of 6h, the 1h buckets of a year are a slice per row, not one per
	// window (1,460).
	for _, sl := range coalesce(spans, sliceCells*res.Millis()) {
		keep := spanFilter{spans: overlapping(spans, sl.lo, sl.hi)}
		for t := sl.lo; t <= sl.hi; {
			rt := s.spec.RowTime(t)
			key = codec.AppendRowKey(key[:0], codec.RowKey{Metric: k.metric, RowTime: rt, DataType: codec.TypeDouble, Tags: k.tags})
			lo, hi := s.spec.SliceBounds(rt, sl.lo, sl.hi)
			err := s.eng.Cells(ctx, key, lo, hi, func(col uint32, b []byte) error {
				read++
				ts := s.spec.Timestamp(rt, col)
				if ts < sl.lo || ts > sl.hi || !keep.in(ts) {
					return nil
				}
				if v, ok := s.floatCell(&rollupRow, col, b); ok {
					out.ts, out.vs = append(out.ts, ts), append(out.vs, v)
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("read rollups of %s: %w", ref.Labels, err)
			}
			if rt > math.MaxInt64-w {
				break // the last row window: rt + w would wrap
			}
			t = rt + w
		}
	}
	if err := budget.take(int64(len(out.ts))); err != nil {
		return nil, fmt.Errorf("read rollups of %s: %w", ref.Labels, err)
	}
	return out, nil
}
