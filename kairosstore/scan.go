package kairosstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
)

// Walks of a metric's rows and series for the rollup job (package
// rollupjob), which needs of the store, beside the appender and
// MetricNames, a way through every series of a metric, a metric's oldest
// sample, and deletes of single cells.

// OldestRowTime is metric's earliest row time (row_key_time_index, §7.3):
// no sample of the metric is older.
func (s *Store) OldestRowTime(ctx context.Context, metric string) (int64, bool, error) {
	var oldest int64
	found := false
	err := s.eng.RowTimes(ctx, s.mapper.Prefix+metric, s.minTime(), math.MaxInt64, func(rowTime int64) error {
		oldest, found = rowTime, true
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return 0, false, err
	}
	return oldest, found, nil
}

// RowTimes calls fn with metric's row times in [lo, hi]
// (row_key_time_index, §7.3), ascending: the rollup job skips the time
// between them that holds no row.
func (s *Store) RowTimes(ctx context.Context, metric string, lo, hi int64, fn func(rowTime int64) error) error {
	return s.eng.RowTimes(ctx, s.mapper.Prefix+metric, max(lo, s.minTime()), hi, fn)
}

// OldestSample is the time of metric's oldest sample (float, non-finite or
// histogram; exemplars do not count): the first cell of each series' row in
// the metric's oldest row window (row_key_time_index, §7.3) that has one.
// A row time alone would be up to a row width (three weeks by default)
// older than the data, and the rollup job would backfill that much empty
// time.
func (s *Store) OldestSample(ctx context.Context, metric string) (int64, bool, error) {
	var rowTimes []int64
	err := s.eng.RowTimes(ctx, s.mapper.Prefix+metric, s.minTime(), math.MaxInt64, func(rowTime int64) error {
		rowTimes = append(rowTimes, rowTime)
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	name := labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, metric)
	for _, rt := range rowTimes {
		sel, err := s.idx.Select(ctx, index.Query{Matchers: []*labels.Matcher{name}, Start: rt, End: rt + s.spec.WidthMillis() - 1})
		if err != nil {
			return 0, false, fromIndex(err)
		}
		oldest, found := int64(math.MaxInt64), false
		for _, sr := range sel.Series {
			for _, r := range sr.Rows {
				if r.RowTime != rt || r.DataType == codec.TypeExemplar {
					continue
				}
				col, ok, err := s.eng.FirstCell(ctx, r.Key, 0, math.MaxUint32)
				if err != nil {
					return 0, false, err
				}
				if ok {
					oldest, found = min(oldest, s.spec.Timestamp(rt, col)), true
				}
			}
		}
		if found {
			return oldest, true, nil
		}
	}
	return 0, false, nil
}

// ScanSeries selects, as Querier's Select does, the series of ms over
// [mint, maxt] whose labels keep accepts (nil: all), but without
// --query.max-series: the rollup job must roll up a metric of any size.
// It lists row_keys rather than trusting a kept listing, which may lack
// the series another writer (an import, a second adapter) added since it
// was read: the job's buckets would lack them for good.
// The series' list is in memory, their samples are read lazily, a bounded
// number of series ahead (seriesSet). done cancels the reads still running
// and waits for them.
func (s *Store) ScanSeries(ctx context.Context, mint, maxt int64, keep func(labels.Labels) bool, ms ...*labels.Matcher) (set storage.SeriesSet, done func()) {
	sel, err := s.idx.Select(ctx, index.Query{Matchers: ms, Start: mint, End: maxt, Fresh: true})
	if err != nil {
		return storage.ErrSeriesSet(fromIndex(err)), func() {}
	}
	series := sel.Series
	if keep != nil {
		kept := series[:0]
		for _, sr := range series {
			if keep(sr.Labels) {
				kept = append(kept, sr)
			}
		}
		series = kept
	}
	if len(series) == 0 {
		return storage.EmptySeriesSet(), func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var reads sync.WaitGroup
	return newSeriesSet(ctx, s, series, mint, maxt, &reads, false, nil), func() { cancel(); reads.Wait() }
}

// Clear is the cells of one series at one time that ClearSamples deletes:
// its kairos_double cell, its non-finite one (§5.7's null row), or both.
type Clear struct {
	Labels            labels.Labels
	T                 int64
	Double, NonFinite bool
}

// ClearSamples deletes single cells, as a delete by query of the range
// [T, T] of one series would (§8, a partial row: index rows stay), without
// the index lookups: the rollup job overwrites a bucket in place and
// deletes only the cells of buckets that became empty, or whose value moved
// between a finite and a non-finite one. It reports no Change: the cells
// are derived.
func (s *Store) ClearSamples(ctx context.Context, cs []Clear) error {
	if len(cs) == 0 {
		return nil
	}
	d := &engine.Deletes{WriteTime: max(s.opts.Now().UnixMilli(), s.lastDeleteMillis.Load()+1)}
	for _, c := range cs {
		sr, err := s.lookupSeries(c.Labels)
		if err != nil {
			return badRequest("%w", err)
		}
		rowTime := s.spec.RowTime(c.T)
		col := s.spec.Column(rowTime, c.T)
		if c.Double {
			key := codec.AppendRowKey(nil, codec.RowKey{Metric: sr.metric, RowTime: rowTime, DataType: codec.TypeDouble, Tags: sr.tags})
			d.CellRanges = append(d.CellRanges, engine.CellRange{Key: key, Lo: col, Hi: col})
		}
		if c.NonFinite {
			key := codec.AppendRowKey(nil, codec.RowKey{Metric: sr.metric, RowTime: rowTime, DataType: codec.TypeNull, Tags: sr.tags})
			d.CellRanges = append(d.CellRanges, engine.CellRange{Key: key, Lo: col, Hi: col})
		}
	}
	err := s.eng.Delete(ctx, d)
	raiseTo(&s.lastDeleteMillis, d.WriteTime)
	if err != nil {
		return fmt.Errorf("delete %d cells: %w", len(d.CellRanges), err)
	}
	return nil
}
