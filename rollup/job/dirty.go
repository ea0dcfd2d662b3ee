package job

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// Recomputation. The store tells OnChange of every commit and delete of
// this process; a write into a closed unit, or a delete, marks the units
// it covers. Marks go to service_index (flushMarks), so the lease holder
// sees those of every adapter and a restart keeps them; the holder
// recomputes them one unit per step (recomputeOne) before any other work.
//
// The bound: only this adapter's changes are seen, and those of other
// adapters running the job (with or without the lease) that share the
// keyspace. KairosDB writing or deleting behind the adapter's back, or an
// adapter started with --rollup.resolutions= (no job), leaves the rollups
// of the units it touched as they were: an operator marks them with
// POST /api/v1/admin/rollups/recompute (Recompute).

// OnChange hears the store's changes (kairosstore.Options.OnChange). It
// does not block: marks are kept in memory until the job's next step
// stores them, and the job is woken.
func (j *Job) OnChange(cs []kairosstore.Change) {
	now := j.now()
	closed := j.plan.closed(now)
	var marks []mark
	for _, c := range cs {
		if c.Derived {
			continue
		}
		if !c.Deleted {
			// The common case, a write of the present, costs this.
			if c.MinT > closed {
				continue
			}
			j.older(c.Metric, c.MinT)
			// The unit after the last one touched too: its first
			// bucket's counter starts from the last sample before it.
			marks = append(marks, mark{metric: c.Metric, from: j.plan.unitOf(c.MinT), to: min(j.plan.unitOf(min(c.MaxT, now))+j.plan.unit, closed), cause: "write"})
			continue
		}
		if m, ok := j.clip(c.Metric, c.MinT, c.MaxT, closed, "delete"); ok {
			marks = append(marks, m)
		}
	}
	if len(marks) == 0 {
		return
	}
	j.mu.Lock()
	for _, m := range marks {
		j.pending[markKey(m.metric, m.from, m.to)] = m
	}
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// older notes a sample of metric at t, which may be older than what the
// job knew as its oldest, so that backfill goes down to it.
func (j *Job) older(metric string, t int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if a := j.oldestOf[metric]; a != nil && (t < a.row || (a.known && t < a.exact)) {
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
	lo = max(lo, floor-j.plan.unit)
	if lo > hi {
		return mark{}, false
	}
	from, to := j.plan.unitOf(lo), min(j.plan.unitOf(hi)+j.plan.unit, closed) // the unit after, as in OnChange
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
	closed := j.plan.closed(j.now())
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
	if err := j.storeMarks(ctx, marks); err != nil {
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

// flushMarks stores the marks OnChange collected; those that fail to store
// are kept for the next step.
func (j *Job) flushMarks(ctx context.Context) error {
	j.mu.Lock()
	if len(j.pending) == 0 {
		j.mu.Unlock()
		return nil
	}
	marks := make([]mark, 0, len(j.pending))
	for _, m := range j.pending {
		marks = append(marks, m)
	}
	clear(j.pending)
	j.mu.Unlock()
	err := j.storeMarks(ctx, marks)
	if err != nil {
		j.mu.Lock()
		for _, m := range marks {
			if _, ok := j.pending[markKey(m.metric, m.from, m.to)]; !ok {
				j.pending[markKey(m.metric, m.from, m.to)] = m
			}
		}
		j.mu.Unlock()
	}
	return err
}

func (j *Job) storeMarks(ctx context.Context, marks []mark) error {
	var errs []error
	for _, m := range marks {
		wt := j.stamp()
		v := strconv.FormatInt(wt, 10) + " " + m.cause
		if err := j.st.SetServiceValue(ctx, rollup.Service, rollup.ServiceKey, markKey(m.metric, m.from, m.to), v, wt); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("store rollup recomputation marks: %w", err)
	}
	return nil
}

// recomputeOne recomputes the next unit of the first mark that has one
// inside the done range. A unit not yet rolled up at any resolution is
// left to forward or backfill, which read the samples after the change: a
// unit past the done range waits for it, one before it is skipped. A mark
// whose units are all done is deleted as of its write time, so that a mark
// stored again since survives. How far a mark got is kept in memory only: a
// restart recomputes its range from the start.
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
	for i := range marks {
		key := marks[i].serviceID
		v, ok, err := j.st.ServiceValue(ctx, rollup.Service, rollup.ServiceKey, key)
		if err != nil {
			return false, fmt.Errorf("read rollup recomputation mark: %w", err)
		}
		if !ok {
			continue
		}
		m, err := parseMark(key, v)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		e, ok := j.cursor[key]
		if !ok {
			e = m.from
		}
		for ; e <= m.to; e += j.plan.unit {
			var rs []rollup.Resolution
			ahead := false
			for _, r := range j.plan.res {
				if j.plan.covers(r, prog[r], e) {
					rs = append(rs, r)
				}
				ahead = ahead || !prog[r].ok || e > prog[r].to
			}
			if len(rs) > 0 {
				if _, err := j.rollMetric(ctx, m.metric, e, e, rs, true); err != nil {
					return false, err
				}
				j.m.recomputed.WithLabelValues(m.cause).Inc()
				j.cursor[key] = e + j.plan.unit
				return true, nil
			}
			if ahead {
				break
			}
		}
		if e <= m.to {
			j.cursor[key] = e
			continue // waits for the forward job
		}
		delete(j.cursor, key)
		if err := j.st.DeleteServiceValue(ctx, rollup.Service, rollup.ServiceKey, key, m.written); err != nil {
			return false, fmt.Errorf("delete rollup recomputation mark: %w", err)
		}
	}
	return false, errors.Join(bad...)
}
