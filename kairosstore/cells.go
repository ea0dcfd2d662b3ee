package kairosstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/prometheus/model/histogram"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
)

// readSeries runs phase 3 (§7.5) for one series: a slice of every row, merged
// in time order. A series can hold floats and native histograms, even switch
// between them (histogram.go), so rows of every sample type are merged.
// Samples at the same timestamp in rows of different types (possible only
// for data KairosDB wrote, or a series that was re-typed) are kept once: the
// one of the row first in (row time, type name) order.
func (s *Store) readSeries(ctx context.Context, ref *index.Series, start, end int64, sizeHint int, budget *sampleBudget) (*listSeries, error) {
	return s.readSeriesIn(ctx, ref, []span{{start, end}}, sizeHint, budget)
}

// readSeriesIn is readSeries over the samples in spans (sorted, disjoint)
// only.
func (s *Store) readSeriesIn(ctx context.Context, ref *index.Series, spans []span, sizeHint int, budget *sampleBudget) (*listSeries, error) {
	return s.readSeriesInto(ctx, ref, spans, s.newListSeries(ref.Labels, int(min(int64(sizeHint), budget.left()))), budget)
}

// readSeamIn is readSeriesIn of the few raw samples a rollup read takes
// beside its rollups, in slices of their own: the store's pool hands a read
// of unknown length any slices of up to minPooledFit samples and drops
// larger ones, which were the rollup reads' own slices, so that every
// series of a rate panel allocated them anew (BENCHMARKS.md, "Issue #30:
// the rate panel's garbage").
func (s *Store) readSeamIn(ctx context.Context, ref *index.Series, spans []span, budget *sampleBudget) (*listSeries, error) {
	return s.readSeriesInto(ctx, ref, spans, &listSeries{lset: ref.Labels}, budget)
}

// readSeriesInto is readSeriesIn into out, empty.
func (s *Store) readSeriesInto(ctx context.Context, ref *index.Series, spans []span, out *listSeries, budget *sampleBudget) (*listSeries, error) {
	sorted := true
	var customValues []float64 // the last custom bucket bounds, shared while they repeat
	// The row's type, compared once per row, not per cell.
	var (
		row      *index.Row
		dataType string
	)
	var bulk *bulkRead
	if dc, ok := s.eng.(doubleCells); ok {
		bulk = &bulkRead{eng: dc, out: out, sorted: &sorted}
	}
	err := s.eachCellIn(ctx, ref, spans, budget, bulk, func(r *index.Row, t int64, col uint32, value []byte) (bool, error) {
		var (
			v   float64
			h   *histogram.Histogram
			fh  *histogram.FloatHistogram
			ok  bool
			err error
		)
		if r != row {
			row, dataType = r, r.DataType
			if dataType != codec.TypeHistogram && dataType != codec.TypeFloatHistogram && (dataType != codec.TypeDouble || r.Legacy) {
				dataType = ""
			}
		}
		switch dataType {
		case codec.TypeDouble:
			// The rows the adapter writes: an 8-byte double (§4.2), here
			// without DecodeValue's calls and switch on the type per cell
			// (BENCHMARKS.md, "The raw read path"). Any other length goes
			// the general way, which counts it as undecodable.
			if len(value) == 8 {
				v = math.Float64frombits(binary.BigEndian.Uint64(value))
				break
			}
			if v, ok = s.floatCell(r, col, value); !ok {
				return false, nil
			}
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
func (s *Store) eachCell(ctx context.Context, ref *index.Series, start, end int64, budget *sampleBudget, cell func(r *index.Row, t int64, col uint32, value []byte) (bool, error)) error {
	return s.eachCellIn(ctx, ref, []span{{start, end}}, budget, nil, cell)
}

// span is an inclusive time range, ms.
type span struct{ lo, hi int64 }

// eachCellIn is eachCell over the cells in spans (sorted, disjoint), so
// that a read limited to the windows a query evaluates skips the cells
// between them: a data_points slice per row and span that overlap, or per
// run of spans with few cells between them. With bulk, the rows of doubles
// go into bulk's series without a call of cell per sample.
func (s *Store) eachCellIn(ctx context.Context, ref *index.Series, spans []span, budget *sampleBudget, bulk *bulkRead, cell func(r *index.Row, t int64, col uint32, value []byte) (bool, error)) error {
	if budget.left() < 0 {
		return fmt.Errorf("read data_points of %s: %w", ref.Labels, ErrTooManySamples)
	}
	t0 := time.Now()
	defer s.observe("data_points", t0)
	uncounted, read := int64(0), 0
	defer func() { s.m.cellsRead.WithLabelValues("raw").Add(float64(read)) }()
	w := s.spec.WidthMillis()
	// What the slices read so far held, cells per ms, tells how many cells
	// lie between two windows: where fewer than a slice costs, one slice
	// reads through both. A first window reads alone, and a series denser
	// further on than so far reads at most sliceCells times its density
	// ratio more cells per gap, never beyond its row.
	var spanMillis uint64
	for i := range ref.Rows {
		r := &ref.Rows[i]
		if r.DataType == codec.TypeExemplar {
			continue // a metric whose own name ends in ExemplarSuffix: not samples
		}
		inRow := overlapping(spans, r.RowTime, r.RowTime+w)
		for len(inRow) > 0 {
			maxGap := uint64(0)
			if read > 0 {
				maxGap = min(spanMillis/uint64(read), math.MaxUint64/sliceCells) * sliceCells
			}
			j := 1
			for j < len(inRow) && uint64(inRow[j].lo)-uint64(inRow[j-1].hi)-1 <= maxGap {
				j++
			}
			sl := span{inRow[0].lo, inRow[j-1].hi}
			keep := spanFilter{spans: inRow[:j]}
			filtered := j > 1 // one span is sl itself
			inRow = inRow[j:]
			if lo, hi := max(sl.lo, r.RowTime), min(sl.hi, addSat(r.RowTime, w-1)); lo <= hi {
				spanMillis += uint64(hi) - uint64(lo) + 1
			}
			lo, hi := s.spec.SliceBounds(r.RowTime, sl.lo, sl.hi)
			fn := func(col uint32, value []byte) error {
				read++
				t := s.spec.Timestamp(r.RowTime, col)
				if t < sl.lo || t > sl.hi || filtered && !keep.in(t) {
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
			}
			var err error
			if bulk != nil && !r.Legacy && (r.DataType == codec.TypeDouble || r.DataType == codec.TypeNull) {
				err = bulk.cells(ctx, s, r, lo, hi, sl, filtered, &keep, &read, &uncounted, budget, fn)
			} else {
				err = s.eng.Cells(ctx, r.Key, lo, hi, fn)
			}
			if err != nil {
				return fmt.Errorf("read data_points of %s: %w", ref.Labels, err)
			}
		}
	}
	if err := budget.take(uncounted); err != nil {
		return fmt.Errorf("read data_points of %s: %w", ref.Labels, err)
	}
	return nil
}

// floatCell decodes the value of a cell of a row of a float type; !ok is
// a value that is no number (counted as skipped). The 8-byte double of
// the rows the adapter writes (§4.2) is read without DecodeValue's
// switch on the type.
func (s *Store) floatCell(r *index.Row, col uint32, value []byte) (float64, bool) {
	if r.DataType == codec.TypeDouble && !r.Legacy && len(value) == 8 {
		return math.Float64frombits(binary.BigEndian.Uint64(value)), true
	}
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

// doubleCells is an engine that hands over a row's 8-byte cells in bulk,
// appended to a series' slices, and only its other cells one call each
// (pebblekv.Engine.CellDoubles): a call per cell, through three closures,
// cost a raw read more than decoding the cell (BENCHMARKS.md, "The raw
// read path, in bulk"). The Cassandra engine has none.
type doubleCells interface {
	CellDoubles(ctx context.Context, rowKey []byte, lo, hi uint32, cols *[]int64, vals *[]float64, flush func() error, other func(column uint32, value []byte) error) error
}

// bulkRead is readSeriesIn's series, filled through doubleCells.
type bulkRead struct {
	eng    doubleCells
	out    *listSeries
	sorted *bool
	// drain, if set, is called after each flush and may take the samples
	// out of out (the chunked read encodes them and empties it), so that
	// out holds a flush's samples, not the series'.
	drain func() error
}

// cells reads the slice [lo, hi) of row r into b.out: the engine appends
// columns to out.ts, which flush turns into timestamps in place, keeping
// those in sl (and in keep when filtered) as the per-cell path does, and
// counting them against budget. The row's other cells go to other, which
// is the per-cell path.
func (b *bulkRead) cells(ctx context.Context, s *Store, r *index.Row, lo, hi uint32, sl span, filtered bool, keep *spanFilter, read *int, uncounted *int64, budget *sampleBudget, other func(col uint32, value []byte) error) error {
	out := b.out
	k := len(out.ts) // out.ts[k:] are columns not yet flushed
	flush := func() error {
		ts, vs := out.ts, out.vs
		j := k
		last := int64(math.MinInt64) // ts[j-1]; a first sample at MinInt64 costs a sort, no more
		if j > 0 {
			last = ts[j-1]
		}
		if !filtered && s.spec.Unit == codec.Milliseconds {
			// The rows the adapter writes, one span: Timestamp's switch on
			// the unit and the filter's call, once per flush instead of
			// per cell (BENCHMARKS.md, "Issue #31: the day query").
			for i := k; i < len(ts); i++ {
				t := r.RowTime + int64(int32(ts[i]))
				if t < sl.lo || t > sl.hi {
					continue
				}
				if t <= last {
					*b.sorted = false
				}
				ts[j], vs[j] = t, vs[i]
				last = t
				j++
			}
		} else {
			for i := k; i < len(ts); i++ {
				t := s.spec.Timestamp(r.RowTime, uint32(ts[i]))
				if t < sl.lo || t > sl.hi || filtered && !keep.in(t) {
					continue
				}
				if t <= last && j > 0 {
					*b.sorted = false
				}
				ts[j], vs[j] = t, vs[i]
				last = t
				j++
			}
		}
		*read += len(ts) - k
		*uncounted += int64(j - k)
		out.ts, out.vs = ts[:j], vs[:j]
		for out.hs != nil && len(out.hs) < j {
			out.hs = append(out.hs, nil)
			out.fhs = append(out.fhs, nil)
		}
		k = j
		if *uncounted >= budgetStep {
			n := *uncounted
			*uncounted = 0
			if err := budget.take(n); err != nil {
				return err
			}
		}
		if b.drain != nil {
			err := b.drain()
			k = len(out.ts)
			return err
		}
		return nil
	}
	return b.eng.CellDoubles(ctx, r.Key, lo, hi, &out.ts, &out.vs, flush, func(col uint32, value []byte) error {
		err := other(col, value) // after a flush of every column before it
		k = len(out.ts)
		return err
	})
}
