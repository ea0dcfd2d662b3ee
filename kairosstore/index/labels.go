package index

import (
	"context"
	"slices"
	"strings"

	"github.com/prometheus/common/model"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/translate"
)

// The label lookups (/api/v1/labels, /label/<name>/values)
// come from the indexes alone, like Select, but build no series: kept
// listings answer whole, from their pair index where no tag matcher
// narrows the lookup. A series counts when it has a row in a row window that
// overlaps the range, even if none of its samples falls inside: the answer
// is at row-window granularity, as Prometheus's is at block granularity.

// LabelNames returns the label names of the series q selects (every series
// without matchers), sorted.
func (x *Index) LabelNames(ctx context.Context, q Query) ([]string, error) {
	set := map[string]struct{}{}
	err := x.eachEntry(ctx, q, func(_ string, _ int64, l *listing, plan translate.Plan) {
		if l.tagNames(plan, func(n string) { addString(set, n) }) {
			set[model.MetricNameLabel] = struct{}{}
		}
	}, func(_ string, _ int64, tags []codec.Tag) {
		set[model.MetricNameLabel] = struct{}{}
		for _, t := range tags {
			addString(set, t.Name)
		}
	})
	return sorted(set), err
}

// LabelValues returns the values of label name over the series q selects
// (every series without matchers), sorted. The values of __name__ without
// matchers are the metric names of string_index, which has no time range:
// a metric whose samples all lie outside the range is listed too.
func (x *Index) LabelValues(ctx context.Context, name string, q Query) ([]string, error) {
	set := map[string]struct{}{}
	prefix := x.opts.Mapper.Prefix
	var err error
	switch {
	case name == model.MetricNameLabel && len(q.Matchers) == 0:
		err = x.r.MetricNames(ctx, func(metric string) error {
			if n, ok := strings.CutPrefix(metric, prefix); ok && n != "" && !isExemplarMetric(metric) {
				set[n] = struct{}{}
			}
			return nil
		})
	case name == model.MetricNameLabel:
		err = x.eachEntry(ctx, q, func(metric string, _ int64, l *listing, plan translate.Plan) {
			if l.tagNames(plan, func(string) {}) {
				set[strings.TrimPrefix(metric, prefix)] = struct{}{}
			}
		}, func(metric string, _ int64, _ []codec.Tag) {
			set[strings.TrimPrefix(metric, prefix)] = struct{}{}
		})
	default:
		err = x.eachEntry(ctx, q, func(_ string, _ int64, l *listing, plan translate.Plan) {
			l.values(name, plan, func(v string) { addString(set, v) })
		}, func(_ string, _ int64, tags []codec.Tag) {
			for _, t := range tags {
				if t.Name == name {
					addString(set, t.Value)
				}
			}
		})
	}
	return sorted(set), err
}

// eachEntry walks the index entries of the series q selects (every series
// without matchers) in the row windows that overlap the range, the metric's
// own row_keys and the legacy row_key_index: kept listings go to kept whole,
// other entries that pass the matchers one by one to entry (tags valid
// during the call, readable ones only). Unlike Select, it does not check
// kept entries one by one: a label lookup may list a value of a series
// deleted behind the adapter's back until the listing expires
// (Options.TTL). Rows indexed only under the non-finite side metric are
// left out, as Select leaves them out (withoutOrphans).
func (x *Index) eachEntry(ctx context.Context, q Query, kept func(metric string, rowTime int64, l *listing, plan translate.Plan), entry func(metric string, rowTime int64, tags []codec.Tag)) error {
	if len(q.Matchers) == 0 {
		q.Matchers = All
	}
	q.Kind = Samples
	plan, metrics, err := x.plan(ctx, q)
	if err != nil {
		return err
	}
	start := max(q.Start, x.opts.MinTime)
	for _, metric := range metrics {
		err := x.legacyRowKeys(ctx, metric, plan, start, q.End, func(k codec.RowKey, _ []byte) {
			if translate.Readable(k.Tags) {
				entry(metric, k.RowTime, k.Tags)
			}
		})
		if err != nil {
			return err
		}
		rowTimes, err := x.rowTimes(ctx, metric, start, q.End)
		if err != nil {
			return err
		}
		for _, rt := range rowTimes {
			if l := x.keptListing(metric, rt); l != nil {
				x.m.ListingLookups.WithLabelValues("hit").Inc()
				x.refreshLater(metric, rt, l)
				kept(metric, rt, l, plan)
				continue
			}
			scanned := 0
			err := x.listRowKeys(ctx, metric, rt, x.startFill(metric, rt), func(_ string, tags []codec.Tag) {
				scanned++
				if translate.Readable(tags) && plan.MatchTags(tags) {
					entry(metric, rt, tags)
				}
			})
			x.m.Scanned.WithLabelValues(metric).Add(float64(scanned))
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// addString adds s, copied: it may alias an engine's buffer.
func addString(set map[string]struct{}, s string) {
	if _, ok := set[s]; !ok {
		set[strings.Clone(s)] = struct{}{}
	}
}

func sorted(set map[string]struct{}) []string {
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
