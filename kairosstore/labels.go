package kairosstore

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/translate"
)

// The label lookups of the query API (/api/v1/labels, /label/<name>/values,
// /series) come from the indexes alone: metric names from string_index
// (docs/kairosdb-layout.md §9.1), tags from the row keys of the row windows
// that overlap the range (§7.3, §7.4). No data_points row is read, so a
// series counts when it has a row in a window that overlaps the range,
// even if none of its samples falls inside: the answer is at row-window
// granularity, as Prometheus's is at block granularity.

// everything selects every series, for lookups without matchers: the label
// APIs then mean "all", where a selector without matchers means nothing.
var everything = []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+")}

// LabelNames returns the label names of the series the matchers select, or
// of every series without matchers, sorted.
func (q *querier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	set := map[string]struct{}{}
	err := q.eachIndex(ctx, ms, func(metric string, x *rowIndex, plan translate.Plan) {
		if x.tagNames(plan, func(n string) { addString(set, n) }) {
			set[model.MetricNameLabel] = struct{}{}
		}
	}, func(metric string, tags []codec.Tag) {
		set[model.MetricNameLabel] = struct{}{}
		for _, t := range tags {
			addString(set, t.Name)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return sortedLimit(set, hints), nil, nil
}

// LabelValues returns the values of label name over the series the matchers
// select (every series without matchers), sorted. The values of __name__
// without matchers are the metric names of string_index, which has no time
// range: a metric whose samples all lie outside the range is listed too.
func (q *querier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	set := map[string]struct{}{}
	if name == model.MetricNameLabel && len(ms) == 0 {
		err := q.s.eng.MetricNames(ctx, func(metric string) error {
			if n, ok := strings.CutPrefix(metric, q.s.mapper.Prefix); ok && n != "" && !isExemplarMetric(metric) {
				set[n] = struct{}{}
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		return sortedLimit(set, hints), nil, nil
	}
	if name == model.MetricNameLabel {
		err := q.eachIndex(ctx, ms, func(metric string, x *rowIndex, plan translate.Plan) {
			if x.tagNames(plan, func(string) {}) {
				set[strings.TrimPrefix(metric, q.s.mapper.Prefix)] = struct{}{}
			}
		}, func(metric string, _ []codec.Tag) {
			set[strings.TrimPrefix(metric, q.s.mapper.Prefix)] = struct{}{}
		})
		if err != nil {
			return nil, nil, err
		}
		return sortedLimit(set, hints), nil, nil
	}
	err := q.eachIndex(ctx, ms, func(_ string, x *rowIndex, plan translate.Plan) {
		x.values(name, plan, func(v string) { addString(set, v) })
	}, func(_ string, tags []codec.Tag) {
		for _, t := range tags {
			if t.Name == name {
				addString(set, t.Value)
			}
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return sortedLimit(set, hints), nil, nil
}

// addString adds s, copied: it may alias an engine's buffer.
func addString(set map[string]struct{}, s string) {
	if _, ok := set[s]; !ok {
		set[strings.Clone(s)] = struct{}{}
	}
}

// eachIndex walks the index entries of the series the matchers select
// (every series without matchers) in the row windows that overlap the
// range, the metric's own row_keys and the legacy row_key_index: listings
// held in Store.rowIndexes go to cached whole, other entries that pass the
// matchers one by one to entry (tags valid during the call). Unlike a
// read, it does not check cached entries one by one: a label lookup may
// list a value of a series deleted behind the adapter's back until the
// listing expires (--kairosdb.index-cache-ttl). Rows indexed only under
// the non-finite side metric are left out, as reads leave them out
// (withoutOrphans).
func (q *querier) eachIndex(ctx context.Context, ms []*labels.Matcher, cached func(metric string, x *rowIndex, plan translate.Plan), entry func(metric string, tags []codec.Tag)) error {
	s := q.s
	if len(ms) == 0 {
		ms = everything
	}
	plan, err := s.mapper.Plan(ms)
	if err != nil {
		return badRequest("%w", err)
	}
	if plan.Empty() || q.mint > q.maxt {
		return nil
	}
	metrics, err := s.planMetrics(ctx, plan)
	if err != nil {
		return err
	}
	start := max(q.mint, s.minTime())
	for _, metric := range metrics {
		err := s.legacyRowKeys(ctx, metric, plan, start, q.maxt, func(metric string, tags []codec.Tag, _ rowRef) {
			if translate.Readable(tags) {
				entry(metric, tags)
			}
		})
		if err != nil {
			return err
		}
		rowTimes, err := s.rowTimes(ctx, metric, start, q.maxt)
		if err != nil {
			return err
		}
		for _, rt := range rowTimes {
			if x := s.keptListing(metric, rt); x != nil {
				s.m.rowIndexLookups.WithLabelValues("hit").Inc()
				s.refreshLater(metric, rt, x)
				cached(metric, x, plan)
				continue
			}
			scanned := 0
			err := s.listRowKeys(ctx, metric, rt, s.startFill(metric, rt), func(_ string, tags []codec.Tag) {
				scanned++
				if translate.Readable(tags) && plan.MatchTags(tags) {
					entry(metric, tags)
				}
			})
			s.m.indexScanned.WithLabelValues(metric).Add(float64(scanned))
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func sortedLimit(set map[string]struct{}, hints *storage.LabelHints) []string {
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	slices.Sort(out)
	if hints != nil && hints.Limit > 0 && len(out) > hints.Limit {
		out = out[:hints.Limit]
	}
	return out
}

// selectIndex answers a Select whose hints say that no sample is needed
// (Func "series", as /api/v1/series asks): the series come from the row
// keys alone, with no samples.
func (q *querier) selectIndex(ctx context.Context, ms []*labels.Matcher) storage.SeriesSet {
	if len(ms) == 0 {
		return storage.EmptySeriesSet()
	}
	refs, err := q.seriesIndex(ctx, ms)
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	return &indexSeriesSet{refs: refs, i: -1}
}

// indexSeriesSet is a series set of label sets without samples.
type indexSeriesSet struct {
	refs []*seriesRef
	i    int
}

func (ss *indexSeriesSet) Next() bool {
	ss.i++
	return ss.i < len(ss.refs)
}

func (ss *indexSeriesSet) At() storage.Series {
	return storage.NewListSeries(ss.refs[ss.i].lset, nil)
}

func (ss *indexSeriesSet) Err() error                        { return nil }
func (ss *indexSeriesSet) Warnings() annotations.Annotations { return nil }

// seriesIndex runs phases 0 to 2 of the read (§7.2 to §7.4) for the matchers,
// or for every metric without matchers, and returns the series sorted by
// labels, orphaned non-finite rows left out as Select leaves them out.
func (q *querier) seriesIndex(ctx context.Context, ms []*labels.Matcher) ([]*seriesRef, error) {
	s := q.s
	if len(ms) == 0 {
		ms = everything
	}
	plan, err := s.mapper.Plan(ms)
	if err != nil {
		return nil, badRequest("%w", err)
	}
	if plan.Empty() || q.mint > q.maxt {
		return nil, nil
	}
	metrics, err := s.planMetrics(ctx, plan)
	if err != nil {
		return nil, err
	}
	refs, err := s.findSeries(ctx, metrics, plan, q.mint, q.maxt, true)
	if err != nil {
		return nil, err
	}
	refs = withoutOrphans(refs)
	if s.opts.MaxSeries > 0 && len(refs) > s.opts.MaxSeries {
		return nil, badRequest("the query selects %d series, more than the limit of %d (--query.max-series)", len(refs), s.opts.MaxSeries)
	}
	return refs, nil
}

// planMetrics is the metric names a plan reads: its pinned names, or those
// of string_index that its __name__ matchers accept, at most
// --query.max-metrics of them.
func (s *Store) planMetrics(ctx context.Context, plan translate.Plan) ([]string, error) {
	if plan.Metrics != nil {
		return plan.Metrics, nil
	}
	var metrics []string
	start := time.Now()
	err := s.eng.MetricNames(ctx, func(name string) error {
		// Exemplar metrics hold no samples (exemplar.go).
		if !isExemplarMetric(name) && plan.MatchName(name) {
			metrics = append(metrics, name)
			if s.opts.MaxMetrics > 0 && len(metrics) > s.opts.MaxMetrics {
				return badRequest("the selector matches more than %d metric names (--query.max-metrics); add a __name__ matcher", s.opts.MaxMetrics)
			}
		}
		return nil
	})
	s.observe("metric_names", start)
	return metrics, err
}
