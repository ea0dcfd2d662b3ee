package kairosstore

import (
	"context"
	"errors"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
)

// The label lookups of the query API (/api/v1/labels, /label/<name>/values,
// /series) come from the indexes alone (index.Index): no data_points row
// is read, so a series counts when it has a row in a row window that overlaps
// the range, even if none of its samples falls inside.

// LabelNames returns the label names of the series the matchers select, or
// of every series without matchers, sorted.
func (q *querier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	names, err := q.s.idx.LabelNames(ctx, index.Query{Matchers: ms, Start: q.mint, End: q.maxt})
	if err != nil {
		return nil, nil, fromIndex(err)
	}
	return limit(names, hints), nil, nil
}

// LabelValues returns the values of label name over the series the matchers
// select (every series without matchers), sorted.
func (q *querier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	values, err := q.s.idx.LabelValues(ctx, name, index.Query{Matchers: ms, Start: q.mint, End: q.maxt})
	if err != nil {
		return nil, nil, fromIndex(err)
	}
	return limit(values, hints), nil, nil
}

// fromIndex answers the errors of a selector the index cannot answer as
// asked with 400.
func fromIndex(err error) error {
	if errors.Is(err, index.ErrBadSelector) {
		return badRequest("%w", err)
	}
	return err
}

func limit(sorted []string, hints *storage.LabelHints) []string {
	if hints != nil && hints.Limit > 0 && len(sorted) > hints.Limit {
		return sorted[:hints.Limit]
	}
	return sorted
}

// selectIndex answers a Select whose hints say that no sample is needed
// (Func "series", as /api/v1/series asks): the series come from the row
// keys alone, with no samples.
func (q *querier) selectIndex(ctx context.Context, ms []*labels.Matcher) storage.SeriesSet {
	if len(ms) == 0 {
		return storage.EmptySeriesSet()
	}
	series, err := q.s.selectSeries(ctx, index.Query{Matchers: ms, Start: q.mint, End: q.maxt})
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	return &indexSeriesSet{series: series, i: -1}
}

// indexSeriesSet is a series set of label sets without samples.
type indexSeriesSet struct {
	series []*index.Series
	i      int
}

func (ss *indexSeriesSet) Next() bool {
	ss.i++
	return ss.i < len(ss.series)
}

func (ss *indexSeriesSet) At() storage.Series {
	return storage.NewListSeries(ss.series[ss.i].Labels, nil)
}

func (ss *indexSeriesSet) Err() error                        { return nil }
func (ss *indexSeriesSet) Warnings() annotations.Annotations { return nil }
