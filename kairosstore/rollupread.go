package kairosstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/kahansum"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
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
//     never resets; Avg returns each bucket's mean, from the sum and count
//     rollups or from raw samples, for avg_over_time over windows of one
//     bucket.
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
	// doneFrom, doneTo: the bucket ends written, of which a counter read
	// also reads those just outside [rollFrom, rollTo]. rng is the
	// selector's range (0: unknown).
	doneFrom, doneTo int64
	rng              int64
	// nonFinite: which rollup metrics have null-typed rows near the
	// rolled range, asked once per Select (not kept across queries, which
	// another writer's rows would make stale).
	nonFinite *nonFiniteRollups
	// seen and seenSize are counterSpans' answer, made once
	// for every series of the Select, not per series (BENCHMARKS.md,
	// "Issue #30: the rate panel's garbage").
	seenOnce sync.Once
	seen     []span
	seenSize int
}

// counterSpans is what a counter read takes from rollups: the windows'
// buckets and one either side of each, where written, and the points its
// slices are asked for: two a bucket for runningSum, and room (blockRoom).
// Bounded by maxRollupCap. Every series of the Select shares them, so the
// spans are never written after they are made.
func (p *plannedRead) counterSpans(room int) ([]span, int) {
	p.seenOnce.Do(func() {
		r := p.Resolution.Millis()
		lo, hi := max(p.rollFrom-r, p.doneFrom), min(addSat(p.rollTo, r), p.doneTo)
		p.seen = trim(widen(p.spans, r), lo, hi)
		p.seenSize = 2*rollupCap(p.seen, r) + room
	})
	return p.seen, p.seenSize
}

// nonFiniteRollups is plannedRead.nonFinite: rollup metric (as stored) to
// whether its side index (NonFiniteSuffix) has a row time near the read.
type nonFiniteRollups struct {
	mu sync.Mutex
	m  map[string]bool
}

// planRead resolves read hint p for a Select over [start, end] with hints;
// nil is an ordinary read.
func (s *Store) planRead(ctx context.Context, p readhint.Hint, hints *storage.SelectHints, start, end int64) (*plannedRead, error) {
	if p.Aggregate == "" && p.WindowMillis == 0 {
		return nil, nil
	}
	pr := &plannedRead{Hint: p, start: start, end: end, spans: []span{{start, end}}}
	if hints != nil {
		pr.rng = hints.Range
	}
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
		pr.doneFrom, pr.doneTo = from, to
		pr.nonFinite = &nonFiniteRollups{m: map[string]bool{}}
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

// clip is the parts of spans (sorted, disjoint) within [lo, hi], in a
// slice of their number, which may share spans' array: neither is
// written after it is made.
func clip(spans []span, lo, hi int64) []span {
	if lo > hi {
		return nil
	}
	in := overlapping(spans, lo, hi)
	if len(in) == 0 {
		return nil
	}
	if in[0].lo >= lo && in[len(in)-1].hi <= hi {
		// Nothing to cut, as mostly (the rollup part of a read is most
		// of its windows): a copy per clip was most of what a counter
		// read allocated. Full, so no append can write into spans.
		return in[:len(in):len(in)]
	}
	out := slices.Clone(in)
	out[0].lo = max(out[0].lo, lo)
	out[len(out)-1].hi = min(out[len(out)-1].hi, hi)
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
	// Grown as it goes: the windows of a year at a 6h step (1,461) are
	// one slice per row of rollups.
	var out []span
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

// trim is clip for spans of the caller's own, cut in their array.
func trim(spans []span, lo, hi int64) []span {
	if lo > hi {
		return nil
	}
	in := overlapping(spans, lo, hi)
	if len(in) > 0 {
		in[0].lo = max(in[0].lo, lo)
		in[len(in)-1].hi = min(in[len(in)-1].hi, hi)
	}
	return in
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
	if p.Aggregate == rollup.Avg {
		return s.readAvg(ctx, ref, p, sizeHint, budget)
	}
	var rkey rollupKey
	rolled := p.rolled && rollup.Rollable(ref.Labels) && !hasHistograms(ref)
	if rolled {
		var err error
		// A series whose rollup names could not be stored has none.
		rkey, err = s.rollupKeyOf(ref.Labels, p.Resolution, p.Aggregate)
		rolled = err == nil
		if rolled {
			if rkey, err = s.withNulls(ctx, ref, p, rkey); err != nil {
				return nil, err
			}
		}
	}
	if !rolled {
		out, err := s.readSeriesIn(ctx, ref, p.spans, sizeHint, budget)
		if err != nil || p.Aggregate != rollup.Count {
			return out, err
		}
		return ones(out), nil
	}
	if p.Aggregate == rollup.Counter {
		return s.readCounter(ctx, ref, rkey, p, budget)
	}
	r := p.Resolution.Millis()
	before, err := s.readSeamIn(ctx, ref, clip(p.spans, p.start, p.rollFrom-r), budget)
	if err != nil {
		return nil, err
	}
	mid, err := s.readRollup(ctx, ref, rkey, p.Resolution, clip(p.spans, p.rollFrom, p.rollTo), budget)
	if err != nil {
		return nil, err
	}
	after, err := s.readSeamIn(ctx, ref, clip(p.spans, p.rollTo+1, p.end), budget)
	if err != nil {
		return nil, err
	}
	if p.Aggregate == rollup.Count {
		before, after = ones(before), ones(after)
	}
	if len(before.ts) == 0 && len(after.ts) == 0 {
		return mid, nil // mostly so, in the parts of a split query: no copy
	}
	out := &listSeries{lset: ref.Labels}
	out.ts = slices.Concat(before.ts, mid.ts, after.ts)
	out.vs = slices.Concat(before.vs, mid.vs, after.vs)
	s.recycle(mid)
	return out, nil
}

// readAvg reads the mean of each bucket: from the sum and count rollups
// where written, a point only where both have one (as the query API's
// division of the two matched them, so a bucket another writer deleted
// from either has none), and from the raw samples before and after them
// and of a series without rollups.
func (s *Store) readAvg(ctx context.Context, ref *index.Series, p *plannedRead, sizeHint int, budget *sampleBudget) (*listSeries, error) {
	var sumKey, countKey rollupKey
	rolled := p.rolled && rollup.Rollable(ref.Labels) && !hasHistograms(ref)
	if rolled {
		var errSum, errCount error
		sumKey, errSum = s.rollupKeyOf(ref.Labels, p.Resolution, rollup.Sum)
		countKey, errCount = s.rollupKeyOf(ref.Labels, p.Resolution, rollup.Count)
		rolled = errSum == nil && errCount == nil
		if rolled {
			var err error
			if sumKey, err = s.withNulls(ctx, ref, p, sumKey); err != nil {
				return nil, err
			}
			if countKey, err = s.withNulls(ctx, ref, p, countKey); err != nil {
				return nil, err
			}
		}
	}
	if !rolled {
		out, err := s.readSeriesIn(ctx, ref, p.spans, sizeHint, budget)
		if err != nil {
			return nil, err
		}
		return means(out, p.Resolution), nil
	}
	r := p.Resolution.Millis()
	before, err := s.readSeamIn(ctx, ref, clip(p.spans, p.start, p.rollFrom-r), budget)
	if err != nil {
		return nil, err
	}
	mid := clip(p.spans, p.rollFrom, p.rollTo)
	sums, err := s.readRollup(ctx, ref, sumKey, p.Resolution, mid, budget)
	if err != nil {
		return nil, err
	}
	counts, err := s.readRollup(ctx, ref, countKey, p.Resolution, mid, budget)
	if err != nil {
		return nil, err
	}
	after, err := s.readSeamIn(ctx, ref, clip(p.spans, p.rollTo+1, p.end), budget)
	if err != nil {
		return nil, err
	}
	// The means go in sums' own slices, at or before the point they are
	// made from.
	k, j := 0, 0
	for i, t := range sums.ts {
		for j < len(counts.ts) && counts.ts[j] < t {
			j++
		}
		if j < len(counts.ts) && counts.ts[j] == t {
			sums.ts[k], sums.vs[k] = t, rollup.Mean(sums.vs[i], counts.vs[j])
			k++
		}
	}
	sums.ts, sums.vs = sums.ts[:k], sums.vs[:k]
	s.recycle(counts)
	before, after = means(before, p.Resolution), means(after, p.Resolution)
	if len(before.ts) == 0 && len(after.ts) == 0 {
		return sums, nil
	}
	out := &listSeries{lset: ref.Labels}
	out.ts = slices.Concat(before.ts, sums.ts, after.ts)
	out.vs = slices.Concat(before.vs, sums.vs, after.vs)
	s.recycle(sums)
	return out, nil
}

// means turns raw float samples (ascending) into one point per bucket of
// res at its end, the bucket's mean as sum_over_time over
// count_over_time computes it: the compensated sum PromQL's sum_over_time
// takes (kahansum), over the number of samples. Stale markers are no
// samples to a range function, so they go. It works in l's own slices,
// each point written at or before the first sample of its bucket. A
// series with histogram samples, or a read without a resolution, is l
// as it is: avg_over_time over it is then raw's answer.
func means(l *listSeries, res rollup.Resolution) *listSeries {
	if l.hs != nil || l.fhs != nil || res <= 0 {
		return l
	}
	k := 0
	var (
		end       int64
		sum, c, n float64
	)
	flush := func() {
		if n == 0 {
			return
		}
		if !math.IsInf(sum, 0) {
			sum += c
		}
		l.ts[k], l.vs[k] = end, rollup.Mean(sum, n)
		k++
	}
	for i, t := range l.ts {
		v := l.vs[i]
		if value.IsStaleNaN(v) {
			continue
		}
		if e := res.Bucket(t); n == 0 || e != end {
			flush()
			end, sum, c, n = e, 0, 0, 0
		}
		sum, c = kahansum.Inc(v, sum, c)
		n++
	}
	flush()
	l.ts, l.vs = l.ts[:k], l.vs[:k]
	return l
}

// readCounter reads a counter from its rollups, except around the buckets
// where the series starts or stops (the bucket before, or after, has no
// point: also either side of a gap), which it reads raw as far as a window
// reaches. A window that sees a series start or stop extrapolates its rate
// by half the spacing of its points, and the spacing of rollup points is
// hours: so every such window holds raw samples only, and is answered as
// over raw samples. Windows the series covers are read from rollups as
// before. A bucket whose neighbour was not read (outside the written
// rollups and the raw samples read) counts as a start or a stop: more raw
// reads, never a wrong extrapolation.
func (s *Store) readCounter(ctx context.Context, ref *index.Series, rkey rollupKey, p *plannedRead, budget *sampleBudget) (*listSeries, error) {
	r := p.Resolution.Millis()
	before, err := s.readSeamIn(ctx, ref, clip(p.spans, p.start, p.rollFrom-r), budget)
	if err != nil {
		return nil, err
	}
	after, err := s.readSeamIn(ctx, ref, clip(p.spans, p.rollTo+1, p.end), budget)
	if err != nil {
		return nil, err
	}
	// all and runningSum's answer ask the store's pool for the same size,
	// which the next series' reads then take again: a pooled slice too
	// small for a read is dropped.
	seen, size := p.counterSpans(s.blockRoom())
	all, err := s.readRollupSized(ctx, ref, rkey, p.Resolution, seen, budget, size)
	if err != nil {
		return nil, err
	}
	present := func(e int64) bool {
		if len(overlapping(seen, e, e)) > 0 {
			_, ok := slices.BinarySearch(all.ts, e)
			return ok
		}
		return hasFloatIn(before, addSat(e, 1-r), e) || hasFloatIn(after, addSat(e, 1-r), e)
	}
	// How far back or on a window reaches from a bucket, in whole buckets.
	reach := int64(math.MaxInt64)
	if p.rng > 0 && p.rng <= math.MaxInt64-r {
		reach = (p.rng + r - 1) / r * r
	}
	var rawEnds []span // bucket ends read raw
	// The loop checks [rollFrom, rollTo] itself: no clip, which copies.
	kept := overlapping(p.spans, p.rollFrom, p.rollTo)
	keep := spanFilter{spans: kept}
	for i, e := range all.ts {
		if e < p.rollFrom || e > p.rollTo || !keep.in(e) {
			continue
		}
		// A neighbour read is present: all.ts holds only times in seen, so
		// most buckets are answered without searching seen and all.ts.
		if !(i > 0 && all.ts[i-1] == e-r) && !present(e-r) {
			rawEnds = append(rawEnds, span{e, min(addSat(e, reach), p.rollTo)})
		}
		if !(i+1 < len(all.ts) && all.ts[i+1] == addSat(e, r)) && !present(addSat(e, r)) {
			rawEnds = append(rawEnds, span{max(addSat(e, -reach), p.rollFrom), e})
		}
	}
	// The points the windows keep, moved down in all's own slices once
	// present has no more use for them: a copy was a quarter of what a
	// counter read allocated.
	mid := &listSeries{lset: ref.Labels}
	keep = spanFilter{spans: kept}
	k := 0
	for i, e := range all.ts {
		if e < p.rollFrom || e > p.rollTo || !keep.in(e) {
			continue
		}
		all.ts[k], all.vs[k] = e, all.vs[i]
		k++
	}
	mid.ts, mid.vs = all.ts[:k], all.vs[:k]
	// The same in the raw samples either side of the rollups, by their gaps
	// of more than a bucket: a series that starts before the rollups or
	// stops after them, within a window's reach. Before the first sample
	// read, the rollup of the bucket before its own tells, where written.
	res := p.Resolution
	prevT, havePrevT := int64(0), false
	for i, t := range before.ts {
		if math.IsNaN(before.vs[i]) {
			continue
		}
		if hi := addSat(res.Bucket(t), reach); hi >= p.rollFrom && (!havePrevT || uint64(t)-uint64(prevT) > uint64(r)) {
			start := true
			if pb := res.Bucket(t) - r; !havePrevT && pb >= p.doneFrom && pb <= p.doneTo {
				one, err := s.readRollup(ctx, ref, rkey, res, []span{{pb, pb}}, budget)
				if err != nil {
					return nil, err
				}
				start = len(one.ts) == 0
			}
			if start {
				rawEnds = append(rawEnds, span{p.rollFrom, min(hi, p.rollTo)})
			}
		}
		prevT, havePrevT = t, true
	}
	havePrevT = false
	for i := len(after.ts) - 1; i >= 0; i-- {
		t := after.ts[i]
		if math.IsNaN(after.vs[i]) {
			continue
		}
		next := p.end
		if havePrevT {
			next = prevT
		}
		if uint64(next)-uint64(t) > uint64(r) {
			if lo := addSat(res.Bucket(t), -reach); lo <= p.rollTo {
				rawEnds = append(rawEnds, span{max(lo, p.rollFrom), p.rollTo})
			}
		}
		prevT, havePrevT = t, true
	}
	// Merged where no rollup point lies between two: a window across the
	// gap then holds raw samples only, as raw.
	slices.SortFunc(rawEnds, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	var merged []span
	for _, sp := range rawEnds {
		if n := len(merged); n > 0 {
			i, _ := slices.BinarySearch(mid.ts, merged[n-1].hi+1)
			if i == len(mid.ts) || mid.ts[i] >= sp.lo {
				merged[n-1].hi = max(merged[n-1].hi, sp.hi)
				continue
			}
		}
		merged = append(merged, sp)
	}
	pieces := []counterPiece{{raw: true, s: before}}
	j := 0
	for _, sp := range merged {
		k := j
		for k < len(mid.ts) && mid.ts[k] < sp.lo {
			k++
		}
		pieces = append(pieces, counterPiece{s: sub(mid, j, k)})
		for k < len(mid.ts) && mid.ts[k] <= sp.hi {
			k++
		}
		j = k
		raw, err := s.readSeamIn(ctx, ref, clip(p.spans, sp.lo-r+1, sp.hi), budget)
		if err != nil {
			return nil, err
		}
		pieces = append(pieces, counterPiece{raw: true, s: raw, from: sp.lo - r + 1})
	}
	pieces = append(pieces, counterPiece{s: sub(mid, j, len(mid.ts))}, counterPiece{raw: true, s: after, from: p.rollTo + 1})
	pieces = joinRaw(pieces)
	// A raw piece after rollups increases from the last raw sample of the
	// bucket before it.
	for i := 1; i < len(pieces); i++ {
		pc := &pieces[i]
		if !pc.raw || len(pc.s.ts) == 0 {
			continue
		}
		seam, err := s.readSeamIn(ctx, ref, []span{{pc.from - r, pc.from - 1}}, budget)
		if err != nil {
			return nil, err
		}
		for k := len(seam.vs) - 1; k >= 0; k-- {
			if !math.IsNaN(seam.vs[k]) {
				pc.prev, pc.havePrev = seam.vs[k], true
				break
			}
		}
	}
	out := s.runningSum(ref.Labels, r, p.rng, pieces, size)
	// all's slices, which mid and the pieces share, have no more use:
	// the next series' read takes them, instead of the collector.
	s.recycle(all)
	return out, nil
}

// blockRoom is the room a rollup read's slices keep beyond the buckets its
// spans can hold: a reader of doubles (the embedded engine) appends a
// block's cells before it drops those outside the spans. Other engines
// append only the cells kept.
func (s *Store) blockRoom() int {
	if _, ok := s.eng.(rowDoublesReader); ok {
		return doublesAtOnce
	}
	return 0
}

// doublesAtOnce is the most cells a rowDoublesReader appends before it
// flushes (pebblekv flushes every block and every 1,024 cells).
const doublesAtOnce = 1024

// counterPiece is a run of a counter read raw (from its time from) or from
// rollups.
type counterPiece struct {
	raw      bool
	s        *listSeries
	from     int64
	prev     float64 // raw: the last value before it, where its first increment starts
	havePrev bool
}

// joinRaw drops empty rollup pieces and joins adjacent raw ones.
func joinRaw(pieces []counterPiece) []counterPiece {
	var out []counterPiece
	for _, pc := range pieces {
		if !pc.raw && len(pc.s.ts) == 0 {
			continue
		}
		if n := len(out); n > 0 && pc.raw && out[n-1].raw {
			last := &out[n-1]
			last.s = &listSeries{lset: last.s.lset, ts: slices.Concat(last.s.ts, pc.s.ts), vs: slices.Concat(last.s.vs, pc.s.vs)}
			continue
		}
		out = append(out, pc)
	}
	return out
}

// sub is points [i, j) of l.
func sub(l *listSeries, i, j int) *listSeries {
	return &listSeries{lset: l.lset, ts: l.ts[i:j], vs: l.vs[i:j]}
}

// hasFloatIn says whether l has a sample other than NaN in [lo, hi].
func hasFloatIn(l *listSeries, lo, hi int64) bool {
	i, _ := slices.BinarySearch(l.ts, lo)
	for ; i < len(l.ts) && l.ts[i] <= hi; i++ {
		if !math.IsNaN(l.vs[i]) {
			return true
		}
	}
	return false
}

// widen is spans each grown by d either side, merged where they meet.
func widen(spans []span, d int64) []span {
	out := make([]span, 0, len(spans))
	for _, sp := range spans {
		sp = span{addSat(sp.lo, -d), addSat(sp.hi, d)}
		if n := len(out); n > 0 && sp.lo <= out[n-1].hi {
			out[n-1].hi = max(out[n-1].hi, sp.hi)
			continue
		}
		out = append(out, sp)
	}
	return out
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

// runningSum turns pieces (raw and rollup, in time order) into one
// counter without resets where they meet: raw increments follow
// Prometheus's reset rule (a drop is a restart from zero), as
// rollup.Compute's do.
//
// A first raw piece keeps its own values, and so does a raw sample rng or
// more after the point before it (no window holds both): a window over
// them is one over raw samples, resets, NaN and the counter's zero point
// (where rate stops extrapolating) alike. Where the points begin with
// rollups, the sum starts from the total of the increments, so that rate
// never takes the first value of a window for a counter just started.
//
// Each bucket (end-r, end] also gets the value before its increase, 1 ms
// after its start: a window (t-R, t] aligned to buckets then starts with
// the counter as it stood at t-R, and rate sees the whole increase of the
// window instead of extrapolating its first bucket from the average
// spacing of the points. readCounter reads raw where that value did not
// exist (the series starts in the bucket).
func (s *Store) runningSum(ls labels.Labels, r, rng int64, pieces []counterPiece, size int) *listSeries {
	n := 0
	for _, pc := range pieces {
		n += 2 * len(pc.s.ts)
	}
	// In slices of the store's pool, which the series' iterator gives
	// back; of size where that holds n, as the counter's rollups were.
	if n <= size {
		n = size
	}
	out := s.newListSeries(ls, n)
	// ts, vs and own are locals, set on out at the end: appended to
	// through out or a closure, each point cost a write barrier while the
	// collector marks.
	ts, vs := out.ts, out.vs
	cur, have := 0.0, false
	if len(pieces) > 0 && pieces[0].raw {
		l := pieces[0].s
		for i, t := range l.ts {
			if v := l.vs[i]; !value.IsStaleNaN(v) {
				ts, vs = append(ts, t), append(vs, v)
				if !math.IsNaN(v) {
					cur, have = v, true
				}
			}
		}
		pieces = pieces[1:]
	}
	k0 := len(ts)
	// own is the indices, from k0, whose value is the sample's own, not an
	// increment: the raw samples rng or more after the point before, rare
	// enough that a flag per point was mostly garbage.
	var own []int
	for _, pc := range pieces {
		if !pc.raw {
			for i, end := range pc.s.ts {
				if n := len(ts); n == 0 || ts[n-1] < end-r+1 {
					ts, vs = append(ts, end-r+1), append(vs, 0)
				}
				ts, vs = append(ts, end), append(vs, pc.s.vs[i])
			}
			continue
		}
		prev, hp := pc.prev, pc.havePrev
		for i, t := range pc.s.ts {
			v := pc.s.vs[i]
			if math.IsNaN(v) {
				continue // stale markers too
			}
			inc := 0.0
			n := len(ts)
			switch {
			case rng > 0 && (n == 0 || uint64(t)-uint64(ts[n-1]) >= uint64(rng)):
				inc, own = v, append(own, n)
			case hp && v < prev:
				inc = v
			case hp:
				inc = v - prev
			}
			ts, vs = append(ts, t), append(vs, inc)
			prev, hp = v, true
		}
	}
	if !have {
		o := own
		for i := k0; i < len(vs); i++ {
			if len(o) > 0 && o[0] == i {
				o = o[1:]
				continue
			}
			cur += vs[i]
		}
	}
	o := own
	for i := k0; i < len(vs); i++ {
		if len(o) > 0 && o[0] == i {
			o = o[1:]
			cur = vs[i]
		} else {
			cur += vs[i]
		}
		vs[i] = cur
	}
	out.ts, out.vs = ts, vs
	return out
}

// rollupKey is what the row keys of one rollup series are made of.
type rollupKey struct {
	metric string
	tags   []codec.Tag
	// nulls: read the null-typed rows too, where the job writes a
	// bucket's NaN or ±Inf (§5.7); set by withNulls.
	nulls bool
}

// withNulls sets k.nulls for the read of ref planned by p: where the raw
// series has non-finite samples (its own null rows), or where the rollup
// metric has null rows near the read at all, which also covers a bucket of
// finite samples whose sum overflows to ±Inf, and rollups whose raw rows
// have expired. A series of a metric without either reads no more rows.
func (s *Store) withNulls(ctx context.Context, ref *index.Series, p *plannedRead, k rollupKey) (rollupKey, error) {
	if slices.ContainsFunc(ref.Rows, func(r index.Row) bool { return r.DataType == codec.TypeNull }) {
		k.nulls = true
		return k, nil
	}
	has, err := s.nonFiniteOf(ctx, p, k.metric)
	k.nulls = has
	return k, err
}

// nonFiniteOf says whether rollup metric (as stored) has null rows near
// the read p plans, from its side index, read once per Select.
func (s *Store) nonFiniteOf(ctx context.Context, p *plannedRead, metric string) (bool, error) {
	n := p.nonFinite
	if n == nil {
		return false, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if has, ok := n.m[metric]; ok {
		return has, nil
	}
	// The buckets a read takes: from a bucket or two before the query's
	// start (a counter's starting value) to one after its end.
	r := p.Resolution.Millis()
	lo := s.spec.RowTime(max(p.doneFrom, addSat(p.start, -2*r)))
	hi := min(p.doneTo, addSat(p.end, r))
	has := false
	err := s.eng.RowTimes(ctx, metric+NonFiniteSuffix, lo, hi, func(int64) error {
		has = true
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return false, fmt.Errorf("read the non-finite rollups' row times of %s: %w", metric, err)
	}
	n.m[metric] = has
	return has, nil
}

// prefetchNonFinite is nonFiniteOf of the rollup metric of the series of
// metric name name, read while the index finds them: a rollup series'
// stored metric depends on its name alone (rollup.SeriesLabels,
// translate.Mapper.Split), so the first rollup read of the Select does not
// wait one more round trip for it (BENCHMARKS.md, "Issue #30 on
// Cassandra: where a refresh's time goes"). A failed read is not kept:
// the series' reads ask again and report it.
func (s *Store) prefetchNonFinite(ctx context.Context, p *plannedRead, name string) {
	if p == nil || p.nonFinite == nil {
		return
	}
	k, err := s.rollupKeyOf(labels.FromStrings(model.MetricNameLabel, name), p.Resolution, p.Aggregate)
	if err != nil {
		return
	}
	_, _ = s.nonFiniteOf(ctx, p, k.metric)
}

// rollupKeyOf is the rollup series of raw series ls at r of a, named as
// the job's appender names it, so its rows are found without an index read.
func (s *Store) rollupKeyOf(ls labels.Labels, r rollup.Resolution, a rollup.Aggregate) (rollupKey, error) {
	metric, tags, err := s.mapper.Split(rollup.SeriesLabels(ls, r, a), nil)
	if err != nil {
		return rollupKey{}, err
	}
	codec.SortTags(tags)
	return rollupKey{metric: metric, tags: tags}, nil
}

// cellsFunc reads the cells of one row as engine.Engine.Cells does.
type cellsFunc = func(rowKey []byte, lo, hi uint32, fn func(column uint32, value []byte) error) error

// rowsReader is an engine that reads several rows through one reader
// (pebblekv: one iterator), cheaper than a Cells call per row where the
// rows hold few cells each, as rollup rows do.
type rowsReader interface {
	CellsOfRows(ctx context.Context, read func(cells cellsFunc) error) error
}

// cellsOfRows calls read with the engine's reader of several rows, or with
// its Cells where it has none (Cassandra: a query per row either way).
func (s *Store) cellsOfRows(ctx context.Context, read func(cells cellsFunc) error) error {
	if r, ok := s.eng.(rowsReader); ok {
		return r.CellsOfRows(ctx, read)
	}
	return read(func(rowKey []byte, lo, hi uint32, fn func(column uint32, value []byte) error) error {
		return s.eng.Cells(ctx, rowKey, lo, hi, fn)
	})
}

// doublesFunc reads the cells of one row as doubleCells.CellDoubles does.
type doublesFunc = func(rowKey []byte, lo, hi uint32, cols *[]int64, vals *[]float64, flush func() error, other func(column uint32, value []byte) error) error

// rowDoublesReader is an engine that reads several rows through one reader
// as doubleCells reads one (pebblekv: one iterator, the 8-byte cells of a
// block appended in bulk): a call per cell through readRollupRows' closures
// cost a counter read more than the blocks' decoding (BENCHMARKS.md,
// "Issue #30: rate's rollup rows in bulk").
type rowDoublesReader interface {
	CellDoublesOfRows(ctx context.Context, read func(doubles doublesFunc) error) error
}

// rollupRows is how readRollupOf reads rows: doubles, where set, in bulk,
// and cells otherwise.
type rollupRows struct {
	cells   cellsFunc
	doubles doublesFunc
}

// rollupRowsOf calls read with the engine's reader of rollup rows of
// dataType: in bulk for the kairos_double rows where the engine can.
func (s *Store) rollupRowsOf(ctx context.Context, dataType string, read func(rows *rollupRows) error) error {
	if d, ok := s.eng.(rowDoublesReader); ok && dataType == codec.TypeDouble {
		return d.CellDoublesOfRows(ctx, func(doubles doublesFunc) error {
			return read(&rollupRows{doubles: doubles})
		})
	}
	return s.cellsOfRows(ctx, func(cells cellsFunc) error {
		return read(&rollupRows{cells: cells})
	})
}

// readRollup reads the rollup values at bucket ends within spans, from the
// kairos_double rows of k at res, and, where k.nulls (withNulls), from the
// null-typed rows of k too, where the job writes a bucket's NaN or ±Inf
// (§5.7). Rows that do not exist hold no cell. Reading every rollup's null
// rows would double the rows a read seeks.
func (s *Store) readRollup(ctx context.Context, ref *index.Series, k rollupKey, res rollup.Resolution, spans []span, budget *sampleBudget) (*listSeries, error) {
	return s.readRollupSized(ctx, ref, k, res, spans, budget, 0)
}

// readRollupSized is readRollup into slices of size points (0: as many as
// spans can hold, rollupCap, and a block's room), size at least that.
func (s *Store) readRollupSized(ctx context.Context, ref *index.Series, k rollupKey, res rollup.Resolution, spans []span, budget *sampleBudget, size int) (*listSeries, error) {
	out, err := s.readRollupOf(ctx, ref, k, res, spans, budget, codec.TypeDouble, size)
	if err != nil || len(spans) == 0 || !k.nulls {
		return out, err
	}
	odd, err := s.readRollupOf(ctx, ref, k, res, spans, budget, codec.TypeNull, 0)
	if err != nil || len(odd.ts) == 0 {
		return out, err
	}
	// A bucket in both (a reader between the job's write of one and its
	// delete of the other) keeps its finite value: sortDedupe keeps the
	// first of a timestamp, as the raw read's rows of both types do.
	out.ts, out.vs = append(out.ts, odd.ts...), append(out.vs, odd.vs...)
	out.sortDedupe()
	return out, nil
}

// readRollupOf is readRollup of the rows of one data type.
func (s *Store) readRollupOf(ctx context.Context, ref *index.Series, k rollupKey, res rollup.Resolution, spans []span, budget *sampleBudget, dataType string, size int) (*listSeries, error) {
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
	if dataType == codec.TypeDouble {
		// Non-finite buckets are few: those read grow as they come. From
		// the store's pool: the series of a panel read one after another
		// take the same slices again. A reader of doubles appends a
		// block's cells before it drops those outside the spans, so the
		// answer's last block needs room for more. A size given holds
		// that already (counterSpans), and is counted once per Select.
		n := size
		if n == 0 {
			if n = rollupCap(spans, res.Millis()); n > 0 {
				n += s.blockRoom()
			}
		}
		if n > 0 {
			out = s.newListSeries(ref.Labels, n)
		}
	}
	w := s.spec.WidthMillis()
	// An engine without a rows reader (Cassandra) answers each row in a
	// round trip of its own: its rows are read a batch at once, so a year
	// of 3-week rows waits for 3 round trips in a row, not 18.
	_, serial := s.eng.(rowsReader)
	var batch []rollupRowRead
	flush := func(rows *rollupRows) error {
		err := s.readRollupRows(ctx, ref, rows, batch, out, dataType)
		for i := range batch {
			read += batch[i].read
		}
		batch = batch[:0]
		return err
	}
	// A rollup row holds a cell per bucket end at most, so a gap of
	// sliceCells buckets between windows is read through, not around: at a
	// step of 6h, the 1h buckets of a year are a slice per row, not one per
	// window (1,460).
	err := s.rollupRowsOf(ctx, dataType, func(rows *rollupRows) error {
		for _, sl := range coalesce(spans, sliceCells*res.Millis()) {
			keep := overlapping(spans, sl.lo, sl.hi)
			for t := sl.lo; t <= sl.hi; {
				rt := s.spec.RowTime(t)
				if len(batch) == cap(batch) {
					batch = slices.Grow(batch, 1)
				}
				batch = batch[:len(batch)+1]
				r := &batch[len(batch)-1]
				r.key = codec.AppendRowKey(r.key[:0], codec.RowKey{Metric: k.metric, RowTime: rt, DataType: dataType, Tags: k.tags})
				r.rt, r.sl, r.keep, r.read = rt, sl, overlapping(keep, max(sl.lo, rt), min(sl.hi, addSat(rt, w-1))), 0
				r.lo, r.hi = s.spec.SliceBounds(rt, sl.lo, sl.hi)
				r.cols = s.rollupColumns(r, res.Millis(), max(sl.lo, rt), min(sl.hi, addSat(rt, w-1)))
				// A row read whole joins the statement of the whole rows
				// beside it, where the buckets it reads beyond sl cost less
				// than a statement.
				if _, ok := s.eng.(keysReader); ok && r.cols == nil {
					over := uint64(max(sl.lo, rt)-rt) + uint64(addSat(rt, w-1)-min(sl.hi, addSat(rt, w-1)))
					if over/uint64(res.Millis()) <= sliceCells {
						r.lo, r.hi = s.spec.SliceBounds(rt, rt, addSat(rt, w))
					}
				}
				if serial || len(batch) == rollupRowsAtOnce {
					if err := flush(rows); err != nil {
						return err
					}
				}
				if rt > math.MaxInt64-w {
					break // the last row window: rt + w would wrap
				}
				t = rt + w
			}
		}
		return flush(rows)
	})
	if err != nil {
		return nil, fmt.Errorf("read rollups of %s: %w", ref.Labels, err)
	}
	if err := budget.take(int64(len(out.ts))); err != nil {
		return nil, fmt.Errorf("read rollups of %s: %w", ref.Labels, err)
	}
	return out, nil
}

// maxRollupCap bounds the points readRollup sizes its answer for before
// reading: a year of hourly buckets. Beyond it the answer grows as it is
// read, so spans over centuries of missing rows allocate nothing.
const maxRollupCap = 8784

// rollupCap is the number of bucket ends of width r within spans, at most
// maxRollupCap: the points a read of spans answers where every bucket has
// one.
func rollupCap(spans []span, r int64) int {
	if r <= 0 {
		return 0
	}
	n := uint64(0)
	for _, sp := range spans {
		// sp.lo <= sp.hi, so the width never overflows as uint64; each
		// term is checked before it is added, so n never wraps.
		k := (uint64(sp.hi) - uint64(sp.lo)) / uint64(r)
		if k >= maxRollupCap {
			return maxRollupCap
		}
		if n += k + 1; n >= maxRollupCap {
			return maxRollupCap
		}
	}
	return int(n)
}

// keysReader is an engine that reads rows of the same bounds in one
// statement (cql.Engine.CellsOfKeys).
type keysReader interface {
	CellsOfKeys(ctx context.Context, keys [][]byte, lo, hi uint32, fn func(row int, column uint32, value []byte) error) error
}

// columnsReader is an engine that reads given columns of rows in one
// statement (cql.Engine.CellsOfColumns).
type columnsReader interface {
	CellsOfColumns(ctx context.Context, keys [][]byte, cols []uint32, fn func(row int, column uint32, value []byte) error) error
}

// maxColumnsIn bounds the columns of a row read by name rather than as a
// slice: a row of 1h rollups holds 504 buckets, one of 5m 6,048.
const maxColumnsIn = 512

// rollupColumns is the columns of the bucket ends (multiples of m) that
// r.keep holds within [lo, hi] (inside r's row), to read by name where the
// engine can and they are at most three quarters of the slice's buckets: a
// rate's windows every 6 h need 3 of each 6 hourly buckets, which a slice
// reads through (at half, a part's last row, 251 of 499, was still a
// slice). nil means read the slice. The columns are counted before they
// are kept, so no plan holds more than maxColumnsIn.
func (s *Store) rollupColumns(r *rollupRowRead, m, lo, hi int64) []uint32 {
	if _, ok := s.eng.(columnsReader); !ok || s.spec.Unit != codec.Milliseconds || r.rt < 0 || m <= 0 || lo > hi || r.lo >= r.hi {
		// A row before 1970 does not start at a multiple of the row width
		// (codec.RowSpec.RowTime), so its columns are not offsets from a
		// floor: slices only, as rare as they are.
		return nil
	}
	slice := uint64(r.hi-r.lo) / uint64(m) // the buckets a slice would read, about
	rtm := r.rt % m
	cols := r.cols[:0]
	for _, sp := range r.keep {
		// Offsets in the row: lo >= rt, and hi < rt + width <= rt + 2^31.
		a, b := max(sp.lo, lo)-r.rt, min(sp.hi, hi)-r.rt
		if a > b {
			continue
		}
		first := a + (m-(a+rtm)%m)%m // the first offset whose time is a multiple of m
		if first > b {
			continue
		}
		n := (b-first)/m + 1
		if uint64(len(cols))+uint64(n) > maxColumnsIn || 4*(uint64(len(cols))+uint64(n)) > 3*slice {
			return nil
		}
		for off := first; off <= b; off += m {
			cols = append(cols, uint32(off))
		}
	}
	if cols == nil {
		cols = []uint32{} // no bucket of r is needed: nothing to read
	}
	return cols
}

// rollupRowsAtOnce bounds the rows of one rollup series read at once where
// each is a round trip (Cassandra); the store's read-ahead runs up to
// ReadConcurrency series at once, each with this many rows.
const rollupRowsAtOnce = 8

// rollupRowRead is one row slice of a rollup read.
type rollupRowRead struct {
	key    []byte
	rt     int64
	lo, hi uint32
	cols   []uint32 // non-nil: the columns to read, by name, instead of [lo, hi)
	sl     span     // the slice's range
	keep   []span   // the spans within sl
	read   int      // cells read
	ts     []int64
	vs     []float64
	err    error
}

// readRollupRows reads the rows of batch and appends their points to out
// in batch order: one row in place, several at once, each into its own
// slices. Every goroutine has ended when it returns.
func (s *Store) readRollupRows(ctx context.Context, ref *index.Series, rows *rollupRows, batch []rollupRowRead, out *listSeries, dataType string) error {
	rollupRow := index.Row{DataType: dataType}
	// add takes one cell of r: counted, and kept when keep (r's spans) holds it.
	add := func(r *rollupRowRead, keep *spanFilter, ts *[]int64, vs *[]float64, col uint32, b []byte) {
		r.read++
		t := s.spec.Timestamp(r.rt, col)
		if t < r.sl.lo || t > r.sl.hi || !keep.in(t) {
			return
		}
		if v, ok := s.floatCell(&rollupRow, col, b); ok {
			*ts, *vs = append(*ts, t), append(*vs, v)
		}
	}
	cr, _ := s.eng.(columnsReader)
	readRow := func(r *rollupRowRead, ts *[]int64, vs *[]float64) error {
		keep := spanFilter{spans: r.keep}
		if rows.doubles != nil && r.cols == nil {
			return s.rollupDoubles(rows, r, &keep, ts, vs, func(col uint32, b []byte) error {
				add(r, &keep, ts, vs, col, b)
				return nil
			})
		}
		if r.cols != nil {
			return cr.CellsOfColumns(ctx, [][]byte{r.key}, r.cols, func(_ int, col uint32, b []byte) error {
				add(r, &keep, ts, vs, col, b)
				return nil
			})
		}
		return rows.cells(r.key, r.lo, r.hi, func(col uint32, b []byte) error {
			add(r, &keep, ts, vs, col, b)
			return nil
		})
	}
	if len(batch) == 1 || rows.doubles != nil {
		// One row in place; a reader of doubles is one iterator, its rows
		// read in turn.
		for i := range batch {
			if err := readRow(&batch[i], &out.ts, &out.vs); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range batch {
		r := &batch[i]
		r.ts, r.vs, r.err = r.ts[:0], r.vs[:0], nil
	}
	// Rows of the same bounds (whole rows, between a slice's first and
	// last) go in one statement where the engine has one for several.
	kr, _ := s.eng.(keysReader)
	var wg sync.WaitGroup
	read := func(rows []rollupRowRead) {
		wg.Go(func() {
			// A panic here would end the process, not the query.
			defer func() {
				if p := recover(); p != nil {
					rows[0].err = recovered.Err(s.log, "read of rollups of "+ref.Labels.String(), p)
				}
			}()
			if len(rows) == 1 {
				rows[0].err = readRow(&rows[0], &rows[0].ts, &rows[0].vs)
				return
			}
			keys := make([][]byte, len(rows))
			keeps := make([]spanFilter, len(rows))
			for i := range rows {
				keys[i], keeps[i] = rows[i].key, spanFilter{spans: rows[i].keep}
			}
			fn := func(i int, col uint32, b []byte) error {
				r := &rows[i]
				add(r, &keeps[i], &r.ts, &r.vs, col, b)
				return nil
			}
			if rows[0].cols != nil {
				rows[0].err = cr.CellsOfColumns(ctx, keys, rows[0].cols, fn)
				return
			}
			rows[0].err = kr.CellsOfKeys(ctx, keys, rows[0].lo, rows[0].hi, fn)
		})
	}
	// Rows read by name go together where their columns are the same (a
	// row width that is a multiple of the step gives every whole row the
	// same), and rows with no column needed are not read.
	same := func(a, b *rollupRowRead) bool {
		if a.cols != nil || b.cols != nil {
			return a.cols != nil && b.cols != nil && slices.Equal(a.cols, b.cols)
		}
		return kr != nil && a.lo == b.lo && a.hi == b.hi
	}
	for i := 0; i < len(batch); {
		j := i + 1
		for j < len(batch) && same(&batch[i], &batch[j]) {
			j++
		}
		if batch[i].cols == nil || len(batch[i].cols) > 0 {
			read(batch[i:j])
		}
		i = j
	}
	wg.Wait()
	for i := range batch {
		if err := batch[i].err; err != nil {
			return err
		}
		out.ts, out.vs = append(out.ts, batch[i].ts...), append(out.vs, batch[i].vs...)
	}
	return nil
}

// rollupDoubles reads row r through rows.doubles into ts and vs, as
// readRollupRows' add does cell by cell: every cell counted in r.read, the
// values of those in r.sl and keep appended. The engine appends a block's
// columns and values to ts and vs themselves, and flush turns the columns
// into times in place, dropping those outside the spans, where a scratch
// pair per series was grown block by block and copied from (BENCHMARKS.md,
// "Issue #30: the rate panel's garbage"). Cells of another length go to
// other, which is add.
func (s *Store) rollupDoubles(rows *rollupRows, r *rollupRowRead, keep *spanFilter, ts *[]int64, vs *[]float64, other func(col uint32, b []byte) error) error {
	done := len(*ts) // before done: points; from it: columns not flushed yet
	flush := func() error {
		// keep.in's walk, in locals: through keep and r it cost a load
		// and a store per cell.
		out, outV := *ts, *vs
		spec, rt, lo, hi := s.spec, r.rt, r.sl.lo, r.sl.hi
		spans, j := keep.spans, keep.i
		k := done
		for i := done; i < len(out); i++ {
			t := spec.Timestamp(rt, uint32(out[i]))
			if t < lo || t > hi {
				continue
			}
			for j < len(spans) && spans[j].hi < t {
				j++
			}
			if j == len(spans) || spans[j].lo > t {
				continue
			}
			out[k], outV[k] = t, outV[i]
			k++
		}
		keep.i = j
		r.read += len(out) - done
		*ts, *vs, done = out[:k], outV[:k], k
		return nil
	}
	return rows.doubles(r.key, r.lo, r.hi, ts, vs, flush, func(col uint32, b []byte) error {
		err := other(col, b)
		done = len(*ts)
		return err
	})
}
