package kairosstore

import (
	"slices"
	"sort"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// listSeries is a series read into memory. hs and fhs are nil for a series of
// floats only; otherwise they run parallel to ts, set where the sample is an
// integer or a float histogram.
type listSeries struct {
	lset labels.Labels
	ts   []int64
	vs   []float64
	hs   []*histogram.Histogram
	fhs  []*histogram.FloatHistogram
	// pooled: ts and vs came from Store.samples and nothing else refers
	// to them, so they go back there when the series' iterator moves on.
	pooled bool
}

// maxPooledSamples bounds the slices kept for reuse (16 bytes a sample),
// so that one long series does not stay in memory for short ones.
const maxPooledSamples = 1 << 18

// minPooledFit is the capacity any read may be handed, whatever it expects:
// the first series of a query has no length to go by.
const minPooledFit = 1 << 12

// newListSeries is an empty series with room for n samples, in the slices
// of a series iterated before when they hold n and are not far larger (a
// read ahead keeps its slices until it is consumed, so the memory of the
// reads ahead still follows their samples). Slices that do not fit are
// dropped, not kept for another read: kept, they added to the heap the
// collector paces itself by, and a query's peak RSS grew. A query of many
// short series (a year split into days) allocated, cleared and collected
// slices for each (BENCHMARKS.md, "The raw read path").
func (s *Store) newListSeries(lset labels.Labels, n int) *listSeries {
	if l, ok := s.samples.Get().(*listSeries); ok {
		if c := cap(l.ts); c >= n && c <= max(4*n, minPooledFit) {
			return &listSeries{lset: lset, ts: l.ts[:0], vs: l.vs[:0], pooled: true}
		}
	}
	if n <= 0 {
		return &listSeries{lset: lset, pooled: true}
	}
	return &listSeries{lset: lset, ts: make([]int64, 0, n), vs: make([]float64, 0, n), pooled: true}
}

// recycle hands the slices of l to later reads; l must not be used after.
func (s *Store) recycle(l *listSeries) {
	if l == nil || !l.pooled || cap(l.ts) == 0 || cap(l.ts) > maxPooledSamples || cap(l.vs) != cap(l.ts) {
		return
	}
	s.samples.Put(&listSeries{ts: l.ts[:0], vs: l.vs[:0]})
	*l = listSeries{}
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
	li, ok := it.(*listIterator)
	if !ok {
		li = &listIterator{}
	}
	li.reset(l, nil)
	return li
}

// listIterator iterates a listSeries. The histograms it returns are copies,
// so a caller may change them and iterate the series again
// (chunkenc.Iterator's AtHistogram contract). It holds the series' slices
// itself, and whether they are floats only: PromQL calls Next, At, AtST and
// AtT once for every sample of a range, and each went through the series
// (BENCHMARKS.md, "Issue #31: the day query").
type listIterator struct {
	s      *listSeries
	ts     []int64
	vs     []float64
	i      int
	floats bool  // no histogram in the series
	err    error // the series' read failed; s is empty
}

// reset makes it iterate l from before its first sample, with the read's
// error err.
func (it *listIterator) reset(l *listSeries, err error) {
	*it = listIterator{s: l, ts: l.ts, vs: l.vs, i: -1, floats: l.hs == nil, err: err}
}

func (it *listIterator) Next() chunkenc.ValueType {
	if it.i+1 >= len(it.ts) {
		it.i = len(it.ts)
		return chunkenc.ValNone
	}
	it.i++
	if it.floats {
		return chunkenc.ValFloat
	}
	return it.s.valueType(it.i)
}

// Seek moves forward only, from where it is (chunkenc.Iterator's
// contract), by a binary search: a query split in parts seeks each part's
// start once per series, past the samples of the parts before it.
func (it *listIterator) Seek(t int64) chunkenc.ValueType {
	i := max(it.i, 0)
	if i >= len(it.ts) {
		it.i = len(it.ts)
		return chunkenc.ValNone
	}
	if it.ts[i] < t {
		j, _ := slices.BinarySearch(it.ts[i:], t)
		i += j
	}
	it.i = i
	if i >= len(it.ts) {
		return chunkenc.ValNone
	}
	if it.floats {
		return chunkenc.ValFloat
	}
	return it.s.valueType(i)
}

func (it *listIterator) At() (int64, float64) { return it.ts[it.i], it.vs[it.i] }

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

func (it *listIterator) AtT() int64  { return it.ts[it.i] }
func (it *listIterator) AtST() int64 { return 0 }
func (it *listIterator) Err() error  { return it.err }
