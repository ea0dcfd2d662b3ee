package frontend

import (
	"container/list"
	"context"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/queryapi"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// The results cache holds, per query and part, one extent: the answer at
// the evaluation times [from, to] of that part. A later query over the same
// part takes what the extent covers and evaluates only the rest (the last
// minutes, on a dashboard's refresh), and the extent grows to cover it.
//
// Invalidation is exact for what passes through this process: every commit
// and delete of the store reports its metric and time range (OnChange),
// and an extent goes as soon as a change touches a metric its query reads
// within the times its answers depend on (its evaluation times widened by
// the query's ranges, lookback and offsets). An extent being evaluated
// while a change arrives is not stored: a ring of recent changes is checked
// before it is. Other writers' changes (KairosDB itself, a second adapter)
// are bounded by the TTL.

// dependence is what a query's answer at time t reads: the samples of some
// metrics in [t-before, t+after].
type dependence struct {
	names []string // metrics named by equality
	// others are the __name__ matchers of each selector that names no
	// metric by equality; an empty set matches every metric.
	others        [][]*labels.Matcher
	before, after int64
}

// dependsOn finds what expr reads.
func dependsOn(expr parser.Expr, lookback time.Duration) dependence {
	var d dependence
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		var nameMs []*labels.Matcher
		named := false
		for _, m := range vs.LabelMatchers {
			if m.Name != labels.MetricName {
				continue
			}
			if m.Type == labels.MatchEqual {
				d.names = append(d.names, m.Value)
				named = true
				break
			}
			nameMs = append(nameMs, m)
		}
		if !named {
			d.others = append(d.others, nameMs)
		}
		return nil
	})
	mint, maxt := promql.FindMinMaxTime(&parser.EvalStmt{Expr: expr, Start: time.UnixMilli(0), End: time.UnixMilli(0), LookbackDelta: lookback})
	d.before, d.after = max(-mint, 0), max(maxt, 0)
	return d
}

func (d *dependence) reads(metric string) bool {
	for _, n := range d.names {
		if n == metric {
			return true
		}
	}
	for _, ms := range d.others {
		all := true
		for _, m := range ms {
			if !m.Matches(metric) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

type entryKey struct {
	query    string // cacheKey
	interval int64  // the part's length: it grows with the query's (partInterval)
	part     int64
}

type entry struct {
	key      entryKey
	from, to int64
	m        *matrix
	size     int64
	added    time.Time
	deps     *dependence
	elem     *list.Element
}

func (e *entry) touches(c kairosstore.Change) bool {
	return c.MinT <= e.to+e.deps.after && c.MaxT >= e.from-e.deps.before && e.deps.reads(c.Metric)
}

// ringSize is how many recent changes an evaluation can be checked
// against; an evaluation that saw more changes go by is not stored.
const ringSize = 4096

type cache struct {
	mu      sync.Mutex
	maxSize int64
	size    int64
	ttl     time.Duration
	now     func() time.Time
	m       *metrics
	entries map[entryKey]*entry
	lru     *list.List // most recently used first
	byName  map[string]map[*entry]struct{}
	others  map[*entry]struct{} // entries whose queries name metrics otherwise
	seq     uint64              // changes seen
	ring    [ringSize]kairosstore.Change
}

func newCache(maxSize int64, ttl time.Duration, now func() time.Time, m *metrics) *cache {
	return &cache{
		maxSize: maxSize, ttl: ttl, now: now, m: m,
		entries: map[entryKey]*entry{}, lru: list.New(),
		byName: map[string]map[*entry]struct{}{}, others: map[*entry]struct{}{},
	}
}

// cacheKey is what, besides the part, decides a part's answer: the query,
// the step, the phase of the evaluation times within a step (the times of
// two queries coincide only if it is the same), and every other parameter
// except the timeout.
func cacheKey(q *rangeQuery) string {
	v := url.Values{}
	for k, vs := range q.params {
		if k != "timeout" {
			v[k] = vs
		}
	}
	return q.query + "\x00" + strconv.FormatInt(q.step, 10) + "\x00" + strconv.FormatInt(q.start-floorDiv(q.start, q.step)*q.step, 10) + "\x00" + v.Encode()
}

// invalidate drops the extents the changes touch. It is the store's
// OnChange: it runs on the writer's goroutine, so it holds the lock only to
// look up the extents of each changed metric.
func (c *cache) invalidate(changes []kairosstore.Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range changes {
		c.note(ch)
		// A rollup written is a change of the answers of its raw
		// metric too: a query with max_source_resolution=auto reads
		// them in the raw series' place, and the rollup job rewrites
		// them after a late write or a restart. Without this, an
		// answer cached before the recomputation stayed for the
		// cache's TTL. A bucket ends at its time and holds up to a
		// resolution before it; resolutions divide a day.
		if raw, ok := strings.CutSuffix(ch.Metric, rollup.NameSuffix); ok && ch.Derived {
			ch.Metric, ch.MinT = raw, max(ch.MinT, math.MinInt64+day)-day
			c.note(ch)
		}
	}
}

const day = 24 * int64(time.Hour/time.Millisecond)

// note drops the extents ch touches, and keeps it for the evaluations in
// flight. Called with mu held.
func (c *cache) note(ch kairosstore.Change) {
	c.seq++
	c.ring[c.seq%ringSize] = ch
	cause := "write"
	if ch.Deleted {
		cause = "delete"
	}
	for e := range c.byName[ch.Metric] {
		if e.touches(ch) {
			c.remove(e, cause)
		}
	}
	for e := range c.others {
		if e.touches(ch) {
			c.remove(e, cause)
		}
	}
}

// snapshot is a cached extent, read without the lock.
type snapshot struct {
	from, to int64
	m        *matrix
}

// get returns the extent of k, and the count of changes seen so far, which
// store needs.
func (c *cache) get(k entryKey) (*snapshot, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[k]
	if e == nil {
		return nil, c.seq
	}
	if c.now().Sub(e.added) > c.ttl {
		c.remove(e, "ttl")
		return nil, c.seq
	}
	c.lru.MoveToFront(e.elem)
	return &snapshot{from: e.from, to: e.to, m: e.m}, c.seq
}

// put stores an extent evaluated after seen changes, unless a change since
// touched it.
func (c *cache) put(k entryKey, from, to int64, m *matrix, deps *dependence, seen uint64) {
	e := &entry{key: k, from: from, to: to, m: m, deps: deps, size: sizeOf(m)}
	if e.size > c.maxSize {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seq-seen >= ringSize {
		return
	}
	for s := seen + 1; s <= c.seq; s++ {
		if e.touches(c.ring[s%ringSize]) {
			return
		}
	}
	if old := c.entries[k]; old != nil {
		c.remove(old, "")
	}
	e.added = c.now()
	e.elem = c.lru.PushFront(e)
	c.entries[k] = e
	if len(deps.others) > 0 {
		c.others[e] = struct{}{}
	}
	for _, n := range deps.names {
		set := c.byName[n]
		if set == nil {
			set = map[*entry]struct{}{}
			c.byName[n] = set
		}
		set[e] = struct{}{}
	}
	c.size += e.size
	for c.size > c.maxSize {
		c.remove(c.lru.Back().Value.(*entry), "evicted")
	}
	c.m.cacheBytes.Set(float64(c.size))
	c.m.cacheExtents.Set(float64(len(c.entries)))
}

// remove drops e; cause "" is a replacement, not counted.
func (c *cache) remove(e *entry, cause string) {
	if c.entries[e.key] != e {
		return
	}
	delete(c.entries, e.key)
	c.lru.Remove(e.elem)
	delete(c.others, e)
	for _, n := range e.deps.names {
		if set := c.byName[n]; set != nil {
			delete(set, e)
			if len(set) == 0 {
				delete(c.byName, n)
			}
		}
	}
	c.size -= e.size
	if cause != "" {
		c.m.invalidations.WithLabelValues(cause).Inc()
	}
	c.m.cacheBytes.Set(float64(c.size))
	c.m.cacheExtents.Set(float64(len(c.entries)))
}

// Per-object overheads of sizeOf, from the structs' sizes on 64-bit: a
// series (its struct, the pointer to it, its labels' strings) and a point
// (time and slice header).
const (
	seriesOverhead = 160
	pointOverhead  = 32
	entryOverhead  = 256
)

// sizeOf estimates the memory an extent holds.
func sizeOf(m *matrix) int64 {
	n := int64(entryOverhead)
	for _, s := range m.series {
		n += seriesOverhead + int64(len(s.metric)) + int64(s.labels.ByteSize())
		for _, ps := range [][]point{s.floats, s.hists} {
			for _, p := range ps {
				n += pointOverhead + int64(len(p.v))
			}
		}
	}
	for _, w := range m.warnings {
		n += int64(len(w)) + 16
	}
	for _, w := range m.infos {
		n += int64(len(w)) + 16
	}
	return n
}

// cachedPart answers part p of q from the cache and evaluates what it
// lacks.
func (f *Frontend) cachedPart(ctx context.Context, q *rangeQuery, p part, keyText string, deps *dependence, sem chan struct{}) (*matrix, *queryapi.Error) {
	k := entryKey{query: keyText, interval: q.interval, part: p.index}
	have, seen := f.cache.get(k)
	type piece struct{ from, to int64 }
	var before, after *piece
	switch {
	case have == nil:
		before = &piece{p.start, p.end}
	case p.end < have.from || p.start > have.to:
		// Disjoint from the extent: evaluated alone, and kept instead.
		before = &piece{p.start, p.end}
		have = nil
	default:
		if p.start < have.from {
			before = &piece{p.start, have.from - q.step}
		}
		if p.end > have.to {
			after = &piece{have.to + q.step, p.end}
		}
	}
	switch {
	case before == nil && after == nil:
		f.metrics.cacheRequests.WithLabelValues("hit").Inc()
		return have.m.slice(p.start, p.end), nil
	case have == nil:
		f.metrics.cacheRequests.WithLabelValues("miss").Inc()
	default:
		f.metrics.cacheRequests.WithLabelValues("partial").Inc()
	}
	var got [2]*matrix
	pieces := [2]*piece{before, after}
	err := f.fanOut(ctx, 2, "a part of the query", func(ctx context.Context, i int) (err *queryapi.Error) {
		if pc := pieces[i]; pc != nil {
			got[i], err = f.evalRange(ctx, q, pc.from, pc.to, sem)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	// The extent grows by what was evaluated; only times old enough (and
	// whose samples, negative offsets included, are older than the
	// freshness window) are kept.
	var ext []*matrix
	from, to := p.start, p.end
	if have != nil {
		from, to = min(from, have.from), max(to, have.to)
		ext = []*matrix{got[0], have.m, got[1]}
	} else {
		ext = []*matrix{got[0]}
	}
	ext = nonNil(ext)
	whole := concat(ext)
	cutoff := f.opts.Now().Add(-f.opts.CacheFreshness).UnixMilli() - deps.after
	if cutoff >= from {
		keepTo := min(to, from+floorDiv(cutoff-from, q.step)*q.step)
		f.cache.put(k, from, keepTo, whole.slice(from, keepTo), deps, seen)
	}
	if have == nil {
		return whole, nil
	}
	return whole.slice(p.start, p.end), nil
}

func nonNil(ms []*matrix) []*matrix {
	out := ms[:0]
	for _, m := range ms {
		if m != nil {
			out = append(out, m)
		}
	}
	return out
}

// OnChange is the store's change notice (kairosstore.Options.OnChange):
// it invalidates the cached extents the changes touch.
func (f *Frontend) OnChange(changes []kairosstore.Change) {
	if f.cache != nil {
		f.cache.invalidate(changes)
	}
}
