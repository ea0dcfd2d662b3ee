package kairosstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
)

// Querier returns a querier over [mint, maxt] (inclusive, ms).
func (s *Store) Querier(mint, maxt int64) (storage.Querier, error) {
	return &querier{s: s, mint: mint, maxt: maxt}, nil
}

type querier struct {
	s          *Store
	mint, maxt int64
	// reads are the data_points reads its series sets launched. Close
	// cancels those still running (a query refused or abandoned leaves
	// reads ahead of it) and waits for them, so that nothing reads the
	// engine after the querier is closed, and the engine may be.
	reads   sync.WaitGroup
	mu      sync.Mutex
	cancels []context.CancelFunc
}

func (q *querier) Close() error {
	q.mu.Lock()
	for _, cancel := range q.cancels {
		cancel()
	}
	q.cancels = nil
	q.mu.Unlock()
	q.reads.Wait()
	return nil
}

// Select runs KairosDB's three-phase read (§7): row times from
// row_key_time_index (and legacy keys from row_key_index), row keys per row
// time filtered in memory by the matchers, then data_points slices. Series
// come sorted by labels whatever sortSeries says; their samples are read
// lazily, a bounded number of series ahead of the consumer, so memory does
// not grow with the size of the result.
func (q *querier) Select(ctx context.Context, _ bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	return q.sel(ctx, hints, ms, false)
}

// sel is Select; with chunked, the series set's reads encode XOR chunks
// (chunks.go) instead of keeping samples.
func (q *querier) sel(ctx context.Context, hints *storage.SelectHints, ms []*labels.Matcher, chunked bool) storage.SeriesSet {
	if hints != nil && hints.Func == "series" {
		return q.selectIndex(ctx, ms) // labels.go: no sample needed
	}
	series, err := q.s.selectSeries(ctx, index.Query{Matchers: ms, Start: q.mint, End: q.maxt})
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	if len(series) == 0 {
		return storage.EmptySeriesSet()
	}
	ctx, cancel := context.WithCancel(ctx)
	q.mu.Lock()
	q.cancels = append(q.cancels, cancel)
	q.mu.Unlock()
	return newSeriesSet(ctx, q.s, series, q.mint, q.maxt, &q.reads, chunked)
}

// selectSeries is the series a query selects (index.Index.Select), at most
// --query.max-series of them.
func (s *Store) selectSeries(ctx context.Context, q index.Query) ([]*index.Series, error) {
	sel, err := s.idx.Select(ctx, q)
	if err != nil {
		return nil, fromIndex(err)
	}
	series := sel.Series
	if s.opts.MaxSeries > 0 && len(series) > s.opts.MaxSeries {
		return nil, badRequest("the query selects %d series, more than the limit of %d (--query.max-series)", len(series), s.opts.MaxSeries)
	}
	return series, nil
}

// seriesSet yields the series in label order without reading a sample:
// Prometheus's engine collects every series of a selector before it
// evaluates any, so samples read in Next would all be in memory at once. A
// series' samples are read when its Iterator is asked for and belong to
// that iterator, released when the caller moves it on to another series (as
// the engine and the remote-read handler do). Reads of the next series run
// ahead of the consumer, a bounded number of them, so that the store's
// latency overlaps the consumer's work. A series may turn out to have no
// sample in the range (a row overlapping it need not hold one): its
// iterator is then empty.
type seriesSet struct {
	ctx        context.Context
	s          *Store
	refs       []*index.Series
	start, end int64
	budget     *sampleBudget // nil: unlimited
	chunked    bool          // reads encode chunks (readChunks), not samples
	next       int           // the series Next yields next
	cur        *lazySeries

	reads    *sync.WaitGroup // the querier's: every read launched
	mu       sync.Mutex
	ahead    map[int]chan fetched // reads launched and not taken yet, by series
	launched int                  // reads of series [0, launched) were launched
	// lastLen is the sample count of the last series read. The series of
	// one query mostly share a scrape interval, so it sizes the next
	// series' slices once instead of growing them sample by sample, and
	// it narrows the read-ahead window for long series.
	lastLen atomic.Int64
}

// maxSizeHint caps the preallocation from lastLen, so that one long series
// cannot make every following short one allocate 1 MiB.
const maxSizeHint = 1 << 16

// fetched is one series read: its samples, or in a chunked set its chunks.
type fetched struct {
	series *listSeries
	chks   []chunks.Meta
	err    error
}

func newSeriesSet(ctx context.Context, s *Store, refs []*index.Series, start, end int64, reads *sync.WaitGroup, chunked bool) *seriesSet {
	// The rows of a metric whose own name ends in ExemplarSuffix hold no
	// sample: such a series is known empty without a read.
	refs = slices.DeleteFunc(refs, func(ref *index.Series) bool {
		return !slices.ContainsFunc(ref.Rows, func(r index.Row) bool { return r.DataType != codec.TypeExemplar })
	})
	for _, ref := range refs {
		// In row order the samples of a one-type series come sorted.
		// Sorted here, once, because a series may be read twice at once
		// (asked for again while a read ahead of it still runs).
		slices.SortFunc(ref.Rows, func(a, b index.Row) int {
			return cmp.Or(cmp.Compare(a.RowTime, b.RowTime), strings.Compare(a.DataType, b.DataType))
		})
	}
	ss := &seriesSet{ctx: ctx, s: s, refs: refs, start: start, end: end, budget: budgetOf(ctx), chunked: chunked, ahead: map[int]chan fetched{}, reads: reads}
	ss.mu.Lock()
	ss.fill(0)
	ss.mu.Unlock()
	return ss
}

// fill launches reads from series from on until the read-ahead window is
// full. Called with mu held.
func (ss *seriesSet) fill(from int) {
	window := int64(ss.s.opts.ReadConcurrency)
	n := ss.lastLen.Load()
	if n > 0 {
		window = max(1, min(window, ss.s.opts.ReadAheadSamples/n))
	}
	// Reads ahead never go past what the query may still load: beyond its
	// limit they would be work and memory thrown away, inside a request
	// that is being refused.
	switch left := ss.budget.left(); {
	case left <= 0:
		window = 0
	case n > 0:
		window = min(window, max(1, left/n))
	}
	ss.launched = max(ss.launched, from)
	for ss.launched < len(ss.refs) && int64(len(ss.ahead)) < window {
		ss.ahead[ss.launched] = ss.launch(ss.launched)
		ss.launched++
	}
}

func (ss *seriesSet) launch(i int) chan fetched {
	ch := make(chan fetched, 1)
	ref := ss.refs[i]
	hint := int(min(ss.lastLen.Load(), maxSizeHint))
	ss.reads.Add(1)
	go func() {
		defer ss.reads.Done()
		if ss.chunked {
			chks, n, err := ss.s.readChunks(ss.ctx, ref, ss.start, ss.end, hint, ss.budget)
			if err == nil {
				ss.lastLen.Store(int64(n))
			}
			ch <- fetched{chks: chks, err: err}
			return
		}
		series, err := ss.s.readSeries(ss.ctx, ref, ss.start, ss.end, hint, ss.budget)
		if err == nil {
			ss.lastLen.Store(int64(len(series.ts)))
		}
		ch <- fetched{series: series, err: err}
	}()
	return ch
}

// take returns the samples of series i: the read launched ahead of it, or
// a new one when there is none (a series asked for again, or out of order).
// Reads ahead of series before i are dropped: the consumer moved past them.
func (ss *seriesSet) take(i int) fetched {
	ss.mu.Lock()
	ch, ok := ss.ahead[i]
	if !ok {
		ch = ss.launch(i)
	}
	for j := range ss.ahead {
		if j <= i {
			delete(ss.ahead, j)
		}
	}
	ss.fill(i + 1)
	ss.mu.Unlock()
	select {
	case r := <-ch:
		return r
	case <-ss.ctx.Done():
		return fetched{err: ss.ctx.Err()}
	}
}

func (ss *seriesSet) Next() bool {
	if ss.next >= len(ss.refs) {
		return false
	}
	ss.cur = &lazySeries{set: ss, i: ss.next, lset: ss.refs[ss.next].Labels}
	ss.next++
	return true
}

func (ss *seriesSet) At() storage.Series                { return ss.cur }
func (ss *seriesSet) Err() error                        { return nil }
func (ss *seriesSet) Warnings() annotations.Annotations { return nil }

// lazySeries is one series of a seriesSet; it holds no sample.
type lazySeries struct {
	set  *seriesSet
	i    int
	lset labels.Labels
}

func (l *lazySeries) Labels() labels.Labels { return l.lset }

// Iterator reads the series' samples (or takes them from the read ahead)
// into an iterator; reusing it drops the samples of the series it iterated
// before. A read error is the iterator's Err.
func (l *lazySeries) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	r := l.set.take(l.i)
	if r.err != nil {
		r.series = &listSeries{lset: l.lset}
	}
	li, ok := it.(*listIterator)
	if !ok {
		li = &listIterator{}
	}
	*li = listIterator{s: r.series, i: -1, err: r.err}
	return li
}

// readSeries runs phase 3 (§7.5) for one series: a slice of every row, merged
// in time order. A series can hold floats and native histograms, even switch
// between them (histogram.go), so rows of every sample type are merged.
// Samples at the same timestamp in rows of different types (possible only
// for data KairosDB wrote, or a series that was re-typed) are kept once: the
// one of the row first in (row time, type name) order.
func (s *Store) readSeries(ctx context.Context, ref *index.Series, start, end int64, sizeHint int, budget *sampleBudget) (*listSeries, error) {
	out := &listSeries{lset: ref.Labels}
	sizeHint = int(min(int64(sizeHint), budget.left()))
	if sizeHint > 0 {
		out.ts, out.vs = make([]int64, 0, sizeHint), make([]float64, 0, sizeHint)
	}
	sorted := true
	var customValues []float64 // the last custom bucket bounds, shared while they repeat
	err := s.eachCell(ctx, ref, start, end, budget, func(r index.Row, t int64, col uint32, value []byte) (bool, error) {
		var (
			v   float64
			h   *histogram.Histogram
			fh  *histogram.FloatHistogram
			ok  bool
			err error
		)
		switch r.DataType {
		case codec.TypeHistogram:
			h, err = codec.DecodeHistogramValue(value)
			if err == nil {
				h.CustomValues, customValues = internBounds(h.CustomValues, customValues)
			}
		case codec.TypeFloatHistogram:
			fh, err = codec.DecodeFloatHistogramValue(value)
			if err == nil {
				fh.CustomValues, customValues = internBounds(fh.CustomValues, customValues)
			}
		default:
			if v, ok = s.floatCell(r, col, value); !ok {
				return false, nil
			}
		}
		if err != nil {
			s.m.skipped.WithLabelValues("undecodable").Inc()
			return false, nil
		}
		if n := len(out.ts); n > 0 && t <= out.ts[n-1] {
			sorted = false
		}
		out.add(t, v, h, fh)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if !sorted {
		out.sortDedupe()
	}
	return out, nil
}

// eachCell reads the data_points slice of every sample row of a series in
// [start, end] (§7.5), in row order, handing each cell in the range to
// cell, which reports whether it kept a sample. Kept samples count against
// budget as they come, so that a query over its limit stops reading within
// budgetStep samples a read; one already over it reads nothing. An error of
// cell stops the read and is returned wrapped.
func (s *Store) eachCell(ctx context.Context, ref *index.Series, start, end int64, budget *sampleBudget, cell func(r index.Row, t int64, col uint32, value []byte) (bool, error)) error {
	if budget.left() < 0 {
		return fmt.Errorf("read data_points of %s: %w", ref.Labels, ErrTooManySamples)
	}
	t0 := time.Now()
	defer s.observe("data_points", t0)
	uncounted := int64(0)
	for _, r := range ref.Rows {
		if r.DataType == codec.TypeExemplar {
			continue // a metric whose own name ends in ExemplarSuffix: not samples
		}
		lo, hi := s.spec.SliceBounds(r.RowTime, start, end)
		err := s.eng.Cells(ctx, r.Key, lo, hi, func(col uint32, value []byte) error {
			t := s.spec.Timestamp(r.RowTime, col)
			if t < start || t > end {
				return nil
			}
			if kept, err := cell(r, t, col, value); !kept || err != nil {
				return err
			}
			if uncounted++; uncounted == budgetStep {
				uncounted = 0
				return budget.take(budgetStep)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read data_points of %s: %w", ref.Labels, err)
		}
	}
	if err := budget.take(uncounted); err != nil {
		return fmt.Errorf("read data_points of %s: %w", ref.Labels, err)
	}
	return nil
}

// floatCell decodes the value of a cell of a row of a float type; !ok is
// a value that is no number (counted as skipped).
func (s *Store) floatCell(r index.Row, col uint32, value []byte) (float64, bool) {
	v, ok, err := codec.DecodeValue(r.DataType, r.Legacy, col, value)
	switch {
	case err != nil:
		s.m.skipped.WithLabelValues("undecodable").Inc()
	case !ok:
		s.m.skipped.WithLabelValues(r.DataType).Inc()
	}
	return v, ok && err == nil
}

// internBounds returns last instead of bounds when they are equal, so that
// the histograms of a series share one slice of custom bucket bounds, as
// Prometheus shares them (histogram.Histogram.CustomValues is immutable and
// copied by reference). It also returns the bounds to compare the next with.
func internBounds(bounds, last []float64) (use, next []float64) {
	if bounds == nil {
		return nil, last
	}
	if histogram.CustomBucketBoundsMatch(bounds, last) {
		return last, last
	}
	return bounds, bounds
}

// listSeries is a series read into memory. hs and fhs are nil for a series of
// floats only; otherwise they run parallel to ts, set where the sample is an
// integer or a float histogram.
type listSeries struct {
	lset labels.Labels
	ts   []int64
	vs   []float64
	hs   []*histogram.Histogram
	fhs  []*histogram.FloatHistogram
}

// add appends one sample: a float v, or the histogram h or fh.
func (l *listSeries) add(t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram) {
	if l.hs == nil && (h != nil || fh != nil) {
		l.hs = make([]*histogram.Histogram, len(l.ts), cap(l.ts))
		l.fhs = make([]*histogram.FloatHistogram, len(l.ts), cap(l.ts))
	}
	l.ts = append(l.ts, t)
	l.vs = append(l.vs, v)
	if l.hs != nil {
		l.hs = append(l.hs, h)
		l.fhs = append(l.fhs, fh)
	}
}

func (l *listSeries) sortDedupe() {
	idx := make([]int, len(l.ts))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return l.ts[idx[a]] < l.ts[idx[b]] })
	sorted := &listSeries{lset: l.lset, ts: make([]int64, 0, len(idx)), vs: make([]float64, 0, len(idx))}
	for _, i := range idx {
		if n := len(sorted.ts); n > 0 && sorted.ts[n-1] == l.ts[i] {
			continue
		}
		var h *histogram.Histogram
		var fh *histogram.FloatHistogram
		if l.hs != nil {
			h, fh = l.hs[i], l.fhs[i]
		}
		sorted.add(l.ts[i], l.vs[i], h, fh)
	}
	*l = *sorted
}

// valueType is the type of sample i.
func (l *listSeries) valueType(i int) chunkenc.ValueType {
	switch {
	case l.hs == nil:
		return chunkenc.ValFloat
	case l.hs[i] != nil:
		return chunkenc.ValHistogram
	case l.fhs[i] != nil:
		return chunkenc.ValFloatHistogram
	}
	return chunkenc.ValFloat
}

func (l *listSeries) Labels() labels.Labels { return l.lset }

func (l *listSeries) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	if li, ok := it.(*listIterator); ok {
		*li = listIterator{s: l, i: -1}
		return li
	}
	return &listIterator{s: l, i: -1}
}

// listIterator iterates a listSeries. The histograms it returns are copies,
// so a caller may change them and iterate the series again
// (chunkenc.Iterator's AtHistogram contract).
type listIterator struct {
	s   *listSeries
	i   int
	err error // the series' read failed; s is empty
}

func (it *listIterator) Next() chunkenc.ValueType {
	if it.i+1 >= len(it.s.ts) {
		it.i = len(it.s.ts)
		return chunkenc.ValNone
	}
	it.i++
	return it.s.valueType(it.i)
}

func (it *listIterator) Seek(t int64) chunkenc.ValueType {
	if it.i < 0 {
		it.i = 0
	}
	for ; it.i < len(it.s.ts); it.i++ {
		if it.s.ts[it.i] >= t {
			return it.s.valueType(it.i)
		}
	}
	return chunkenc.ValNone
}

func (it *listIterator) At() (int64, float64) { return it.s.ts[it.i], it.s.vs[it.i] }

// AtHistogram returns a copy of the current integer histogram, into dst when
// dst is not nil.
func (it *listIterator) AtHistogram(dst *histogram.Histogram) (int64, *histogram.Histogram) {
	if it.s.valueType(it.i) != chunkenc.ValHistogram {
		panic("BUG: AtHistogram on a sample that is not an integer histogram")
	}
	h := it.s.hs[it.i]
	if dst == nil {
		return it.s.ts[it.i], h.Copy()
	}
	h.CopyTo(dst)
	return it.s.ts[it.i], dst
}

// AtFloatHistogram returns a copy of the current histogram as a float
// histogram, into dst when dst is not nil. As chunkenc.Iterator asks, it
// also converts an integer histogram.
func (it *listIterator) AtFloatHistogram(dst *histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	t := it.s.ts[it.i]
	switch it.s.valueType(it.i) {
	case chunkenc.ValHistogram:
		return t, it.s.hs[it.i].ToFloat(dst)
	case chunkenc.ValFloatHistogram:
		fh := it.s.fhs[it.i]
		if dst == nil {
			return t, fh.Copy()
		}
		fh.CopyTo(dst)
		return t, dst
	}
	panic("BUG: AtFloatHistogram on a float sample")
}

func (it *listIterator) AtT() int64  { return it.s.ts[it.i] }
func (it *listIterator) AtST() int64 { return 0 }
func (it *listIterator) Err() error  { return it.err }
