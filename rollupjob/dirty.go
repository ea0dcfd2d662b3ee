package rollupjob

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"golang.org/x/sync/errgroup"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// Recomputation. The store tells the job (BeforeChange, AfterChange) of
// every commit of received samples and every delete, before it writes and
// once the engine has confirmed it; a write into a closed unit, or a
// delete, marks the units it covers in service_index before the write is
// answered, so the lease holder sees the marks of every adapter and neither
// a restart nor kill -9 loses one: a mark kept in memory until the job's
// next step was lost with the process, and the unit stayed wrong for good.
// The holder recomputes marked units one per step (recomputeOne) before
// any other work.
//
// Three races are closed by the one slack, Config.MarkSlack (S):
//   - A write that finds its unit open may still be in flight when the
//     unit closes and the job rolls it up without its samples. Units that
//     close within S of the write's start are marked too, and a write
//     whose commit took longer than S/4 marks again after it (AfterChange),
//     with the horizon of that moment.
//   - The holder may read a mark, recompute the unit and delete the mark
//     before the samples of the write that made it land (the mark is
//     stored before them). It leaves a write or delete mark alone until it
//     is S old, and deletes it as of its own write time, so a mark stored
//     again since survives; a write that took longer than S/4 has marked
//     again after it landed.
//   - The holder's clock decides when a unit closes, the writer's when it
//     marks: adapters sharing a keyspace need clocks within S/2.
//
// A backfill read begun within S of another process's mark may have missed
// its samples, and the mark then has the units read again: the backfill
// puts off a span such marks cover until they ripen (holdBackfill), so
// that an import's history is read once.
//
// The cost: a write of the present, into units not yet closed, does no
// I/O here. A late write stores one mark per metric and range of units,
// and a process does not store the same mark again within S/4 of its last
// store of it (the reuse is covered by the same S/4 bound), so the hours
// of WAL Prometheus resends after an outage mark each metric's units a
// few times a minute, not once per request (BENCHMARKS.md,
// BenchmarkLateWriteMarks).
//
// The bound: only this adapter's changes are seen, and those of other
// adapters running the job (with or without the lease) that share the
// keyspace. KairosDB writing or deleting behind the adapter's back, or an
// adapter started with --rollup.resolutions= (no job), leaves the rollups
// of the units it touched as they were: an operator marks them with
// POST /api/v1/admin/rollups/recompute (Recompute).

// BeforeChange is the store's Guard.BeforeChange: it stores the marks of
// the changes that touch closed units, or units that close within
// MarkSlack, before the engine writes them. An error fails the write
// (with nothing written; a 5xx, so Prometheus sends it again).
func (j *Job) BeforeChange(ctx context.Context, cs []kairosstore.Change) error {
	return j.markChanges(ctx, cs, true)
}

// AfterChange is the store's Guard.AfterChange: a commit or delete that
// took MarkSlack/4 or longer marks again, now that it has landed, so that
// a unit that closed meanwhile is marked and no mark the holder may have
// deleted while the write was in flight covers it. An error fails the
// write, whose samples are stored; Prometheus sends it again.
func (j *Job) AfterChange(ctx context.Context, cs []kairosstore.Change, began time.Time) error {
	if j.cfg.Now().Sub(began) < j.cfg.MarkSlack/4 {
		return nil
	}
	return j.markChanges(ctx, cs, false)
}

// markChanges stores the marks of cs; with reuse, not those this process
// stored within MarkSlack/4.
func (j *Job) markChanges(ctx context.Context, cs []kairosstore.Change, reuse bool) error {
	now := j.now()
	slack := j.cfg.MarkSlack.Milliseconds()
	horizon := j.units.closed(now + slack)
	var marks []mark
	for _, c := range cs {
		if c.Derived {
			continue
		}
		if !c.Deleted {
			// The common case, a write of the present, costs this.
			if c.MinT > horizon {
				continue
			}
			j.older(c.Metric, c.MinT)
			// The unit after the last one touched too: its first
			// bucket's counter starts from the last sample before it.
			marks = append(marks, mark{metric: c.Metric, from: j.units.unitOf(c.MinT), to: min(j.units.unitOf(min(c.MaxT, now+slack))+j.units.unit, horizon), cause: "write"})
			continue
		}
		// A delete is clipped to what may be rolled up: the progress
		// must be known, also before the job's first step.
		if err := j.knowProgress(ctx); err != nil {
			return err
		}
		if m, ok := j.clip(c.Metric, c.MinT, c.MaxT, horizon, "delete"); ok {
			marks = append(marks, m)
		}
	}
	if len(marks) == 0 {
		return nil
	}
	if err := j.storeMarks(ctx, marks, reuse); err != nil {
		return err
	}
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return nil
}

// knowProgress reads the progress unless a step or a call before did.
func (j *Job) knowProgress(ctx context.Context) error {
	j.mu.Lock()
	known := j.viewRead
	j.mu.Unlock()
	if known {
		return nil
	}
	_, err := j.readProgress(ctx)
	return err
}

// older notes a sample of metric at t, which may be older than what the
// job knew as its oldest, so that backfill goes down to it at its next
// step. A metric the last listing did not hold (refreshOldest, every
// oldestEvery) is added with t as its oldest sample: its history, written
// to a fresh adapter or imported, is backfilled from the next step on, not
// up to oldestEvery later. Samples of it older than t that another process
// wrote since the listing wait for the next one, as before.
func (j *Job) older(metric string, t int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.oldestOf == nil {
		return // not listed yet: the first step lists every metric
	}
	a := j.oldestOf[metric]
	if a == nil {
		j.oldestOf[metric] = &metricAge{row: t, exact: t, known: true}
		j.oldest = min(j.oldest, t)
		return
	}
	if t < a.row || (a.known && t < a.exact) {
		a.row, a.exact = min(a.row, t), min(a.exact, t)
		j.oldest = min(j.oldest, t)
	}
}

// clip is the mark of metric's units that [lo, hi] touches and a rollup
// may hold: none after the latest closed unit, none before the oldest sample.
func (j *Job) clip(metric string, lo, hi, closed int64, cause string) (mark, bool) {
	j.mu.Lock()
	floor := j.oldest
	for _, p := range j.view {
		if p.ok {
			floor = min(floor, p.from)
		}
	}
	j.mu.Unlock()
	if floor == math.MaxInt64 {
		floor = closed // nothing is known to be rolled up
	}
	hi = min(hi, j.now())
	lo = max(lo, floor-j.units.unit)
	if lo > hi {
		return mark{}, false
	}
	from, to := j.units.unitOf(lo), min(j.units.unitOf(hi)+j.units.unit, closed) // the unit after, as for a write
	return mark{metric: metric, from: from, to: to, cause: cause}, from <= to
}

// Recompute marks the units of the metrics the selectors name that
// [start, end] touches, and stores the marks before it returns. A
// selector picks metrics by its matchers on __name__ (a unit is recomputed
// for every series of a metric); one without picks every metric. It
// returns the metrics marked.
func (j *Job) Recompute(ctx context.Context, selectors [][]*labels.Matcher, start, end int64) ([]string, error) {
	names, err := j.st.MetricNames(ctx)
	if err != nil {
		return nil, fmt.Errorf("list metrics: %w", err)
	}
	closed := j.units.closed(j.now())
	marked := []string{}
	var marks []mark
	for _, name := range names {
		if !slices.ContainsFunc(selectors, func(ms []*labels.Matcher) bool { return namesMatch(ms, name) }) {
			continue
		}
		if m, ok := j.clip(name, start, end, closed, "admin"); ok {
			marks = append(marks, m)
			marked = append(marked, name)
		}
	}
	if err := j.storeMarks(ctx, marks, false); err != nil {
		return nil, err
	}
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return marked, nil
}

func namesMatch(ms []*labels.Matcher, name string) bool {
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && !m.Matches(name) {
			return false
		}
	}
	return true
}

// markWriters bounds the marks one write stores at once: a request that
// spans many metrics stores their marks concurrently, not one round trip
// after another.
const markWriters = 16

// maxRemembered bounds the marks remembered for reuse.
const maxRemembered = 1 << 14

// storeMarks stores marks, each with a write time of its own; with reuse,
// those this process stored within MarkSlack/4 are not stored again.
func (j *Job) storeMarks(ctx context.Context, marks []mark, reuse bool) error {
	now := j.now()
	fresh := j.cfg.MarkSlack.Milliseconds() / 4
	if reuse {
		j.mu.Lock()
		marks = slices.DeleteFunc(marks, func(m mark) bool {
			w, ok := j.stored[markKey(m.metric, m.from, m.to)]
			return ok && now-w < fresh
		})
		j.mu.Unlock()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(markWriters)
	for _, m := range marks {
		g.Go(func() (err error) {
			defer recovered.Into(&err, j.log, "store rollup recomputation mark")
			key := markKey(m.metric, m.from, m.to)
			wt := j.stamp()
			if err := j.st.SetServiceValue(gctx, rollup.Service, rollup.ServiceKey, key, strconv.FormatInt(wt, 10)+" "+m.cause, wt); err != nil {
				return err
			}
			j.mu.Lock()
			defer j.mu.Unlock()
			if len(j.stored) >= maxRemembered {
				maps.DeleteFunc(j.stored, func(_ string, w int64) bool { return now-w >= fresh })
				if len(j.stored) >= maxRemembered {
					clear(j.stored)
				}
			}
			j.stored[key] = wt
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("store rollup recomputation marks: %w", err)
	}
	return nil
}

// recomputeOne recomputes the ripe marks' units inside the done range,
// a span of units of one metric per read (Config.Span, as backfill reads),
// pausing for the duty cycle between reads, and says whether it
// recomputed any. A unit not yet rolled up at any resolution is left to
// forward or backfill, which read the samples after the change: a unit
// past the done range waits for it, one before it is skipped. A mark
// whose units are all done is deleted as of its write time, so that a mark
// stored again since survives. A write or delete mark younger than
// MarkSlack waits: the samples of the write that stored it may not have
// landed yet (see the top of this file). A unit recomputed in this call
// is not recomputed again for another ripe mark of its metric: its read
// began after that mark ripened too. How far a mark got is kept in memory
// only, with the mark's write time: a restart, or the mark stored again
// meanwhile (a later write into units already recomputed), recomputes its
// range from the start.
//
// All of the marks listed are done in one call, not a unit per step: an
// import stores a mark per metric and commit, and a step that read every
// mark to recompute one unit made a year's import cost the square of its
// marks.
func (j *Job) recomputeOne(ctx context.Context, prog map[rollup.Resolution]progress) (bool, error) {
	var marks []mark
	var bad []error
	err := j.st.ServiceKeys(ctx, rollup.Service, rollup.ServiceKey, markPrefix, func(key string) error {
		marks = append(marks, mark{serviceID: key})
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("list rollup recomputation marks: %w", err)
	}
	j.m.marks.Set(float64(len(marks)))
	j.ripe = 0
	first := int64(math.MaxInt64) // the first unit any resolution has done
	for _, r := range j.units.res {
		if prog[r].ok {
			first = min(first, j.units.unitOf(prog[r].from))
		}
	}
	// rs is the resolutions that have unit e done; ahead says whether
	// some resolution has not reached it yet.
	covering := func(e int64) (rs []rollup.Resolution, ahead bool) {
		for _, r := range j.units.res {
			if j.units.covers(r, prog[r], e) {
				rs = append(rs, r)
			}
			ahead = ahead || !prog[r].ok || e > prog[r].to
		}
		return rs, ahead
	}
	// redone is the ranges of units recomputed in this call, by metric.
	redone := map[string][][2]int64{}
	skip := func(metric string, e int64) int64 {
		for _, d := range redone[metric] {
			if e >= d[0] && e <= d[1] {
				e = d[1] + j.units.unit
			}
		}
		return e
	}
	worked := false
	young := make(map[string]youngMark, len(j.young))
	defer func() { j.young = young }()
	for i := range marks {
		key := marks[i].serviceID
		// A mark read young is not read again before it ripens: stored
		// again meanwhile, it is younger still.
		if y, ok := j.young[key]; ok && j.now() < y.ripe {
			young[key] = y
			if j.ripe == 0 || y.ripe < j.ripe {
				j.ripe = y.ripe
			}
			continue
		}
		v, ok, err := j.st.ServiceValue(ctx, rollup.Service, rollup.ServiceKey, key)
		if err != nil {
			return worked, fmt.Errorf("read rollup recomputation mark: %w", err)
		}
		if !ok {
			continue
		}
		m, err := parseMark(key, v)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		if m.cause == "write" {
			// Another process's write (an import) of a metric this job
			// has not listed, or of history older than it knew: backfill
			// goes down to the mark's first unit from this step on.
			j.older(m.metric, m.from-j.units.unit+1)
		}
		if ripe := m.written + j.cfg.MarkSlack.Milliseconds(); m.cause != "admin" && j.now() < ripe {
			if j.ripe == 0 || ripe < j.ripe {
				j.ripe = ripe
			}
			j.mu.Lock()
			w, own := j.stored[key]
			j.mu.Unlock()
			young[key] = youngMark{from: m.from, to: m.to, ripe: ripe, own: own && w == m.written}
			continue
		}
		e := m.from
		if c, ok := j.cursor[key]; ok && c.written == m.written {
			e = c.next
		}
		// A mark may reach back to the layout's first time (a write at
		// Prometheus's minimum time): no unit before the done range
		// is looked at one by one.
		if first != math.MaxInt64 {
			e = max(e, first)
		}
		for e <= m.to {
			if e = skip(m.metric, e); e > m.to {
				break
			}
			rs, ahead := covering(e)
			if len(rs) == 0 {
				if ahead {
					break
				}
				e += j.units.unit
				continue
			}
			// As far as the span, the mark and the same resolutions go.
			hi := e
			for n := j.span() - 1; n > 0 && hi+j.units.unit <= m.to && skip(m.metric, hi+j.units.unit) == hi+j.units.unit; n-- {
				next, _ := covering(hi + j.units.unit)
				if !slices.Equal(next, rs) {
					break
				}
				hi += j.units.unit
			}
			start := time.Now()
			if _, err := j.rollMetric(ctx, m.metric, e, hi, rs, true); err != nil {
				return worked, err
			}
			worked = true
			j.m.recomputed.WithLabelValues(m.cause).Add(float64((hi-e)/j.units.unit + 1))
			redone[m.metric] = append(redone[m.metric], [2]int64{e, hi})
			e = hi + j.units.unit
			j.cursor[key] = cursor{next: e, written: m.written}
			if err := j.pause(ctx, j.rest(time.Since(start))); err != nil {
				return worked, err
			}
			if leader, err := j.holdLease(ctx); err != nil || !leader {
				return worked, err
			}
		}
		if e <= m.to {
			j.cursor[key] = cursor{next: e, written: m.written}
			continue // waits for the forward job
		}
		delete(j.cursor, key)
		if err := j.st.DeleteServiceValue(ctx, rollup.Service, rollup.ServiceKey, key, m.written); err != nil {
			return worked, fmt.Errorf("delete rollup recomputation mark: %w", err)
		}
	}
	return worked, errors.Join(bad...)
}

// holdBackfill is the backfill span [lo, e] cut to what it may read now:
// a young mark that another process stored over the span's top unit holds
// the span until the marks over it ripen, for MarkSlack at most since the
// span was first held; one over lower units only cuts the span to the
// units above them. ok is false while the span waits.
//
// Why: a read that began less than MarkSlack after a mark was stored may
// have missed that write's samples (the mark is stored before them, and
// the writer's clock may be MarkSlack/2 off), so once the mark ripened its
// units, done by then, were read again: the backfill of an import read
// every raw sample twice. Read after the marks ripened, the units are
// still below the done range when the marks are done, which leaves them
// to the backfill (recomputeOne), and each sample is read once.
//
// Weighed and left: the writer confirming on the mark, after the engine
// confirmed the write, that its samples landed. A read must still begin
// MarkSlack/2 after another process's confirmation (the clocks), so the
// backfill right after an import would wait about as long; a mark that
// later writes reuse (the late-write path stores one per metric and
// MarkSlack/4, BenchmarkLateWriteMarks) would have to be stored again per
// write to be confirmed; and each mark would cost a second write.
//
// This process's own marks hold nothing: the history of an unknown metric
// written through this adapter is rolled up at the next step, and its
// units are read again when the mark ripens, as before. The hold is in
// memory: a restart reads at once (and recomputes when the marks ripen).
// MarkSlack bounds it for a span whose marks keep being stored again, so
// another process's import starts its rollups at most MarkSlack (two
// intervals at the defaults) after its marks were listed.
func (j *Job) holdBackfill(lo, e int64) (int64, bool) {
	now := j.now()
	top := int64(math.MinInt64) // the highest unit of the span such a mark covers
	for _, y := range j.young {
		if !y.own && now < y.ripe && y.from <= e && y.to >= lo {
			top = max(top, min(y.to, e))
		}
	}
	switch {
	case top < lo:
		return lo, true
	case top < e:
		return top + j.units.unit, true
	}
	if j.held != e || j.heldSince == 0 {
		j.held, j.heldSince = e, now
	}
	limit := j.heldSince + j.cfg.MarkSlack.Milliseconds()
	if now >= limit {
		return lo, true
	}
	if j.ripe == 0 || limit < j.ripe {
		j.ripe = limit
	}
	return 0, false
}
