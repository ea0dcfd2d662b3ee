package kairosstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// Delete removes the samples of the series selected by ms in [start, end]
// (inclusive, ms), following KairosDB's rules (§8): a row wholly inside the
// range loses its data_points partition and its index entries, a row only
// partly inside loses a column range and keeps its index entries.
// row_key_time_index entries go only when no tag matcher narrows the delete,
// and the metric name leaves string_index only when the whole time range of an
// unfiltered metric is deleted. It returns the number of rows touched.
func (s *Store) Delete(ctx context.Context, start, end int64, ms ...*labels.Matcher) (int, error) {
	plan, err := s.mapper.Plan(ms)
	if err != nil {
		return 0, badRequest("%w", err)
	}
	if plan.Empty() || start > end {
		return 0, nil
	}
	metrics := plan.Metrics
	if metrics == nil {
		err := s.eng.MetricNames(ctx, func(name string) error {
			if plan.MatchName(name) {
				metrics = append(metrics, name)
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("list metric names: %w", err)
		}
	}
	// A series' exemplars go with it.
	for _, m := range metrics {
		if !strings.HasSuffix(m, codec.ExemplarSuffix) && !slices.Contains(metrics, m+codec.ExemplarSuffix) {
			metrics = append(metrics, m+codec.ExemplarSuffix)
		}
	}
	refs, err := s.findSeries(ctx, metrics, plan, start, end, false)
	if err != nil {
		return 0, err
	}
	tagged := false
	for _, m := range ms {
		tagged = tagged || m.Name != model.MetricNameLabel
	}
	whole := s.spec.WidthMillis()
	// Not before the time writes after the last delete carry (Commit): a
	// write in that delete's millisecond is stamped one later, and this
	// delete must still shadow it (a tie goes to the tombstone, §5.4).
	d := &engine.Deletes{WriteTime: max(s.opts.Now().UnixMilli(), s.deleteTime.Load()+1)}
	rowTimes := map[string]bool{}
	n := 0
	for _, ref := range refs {
		for _, r := range ref.rows {
			k, err := codec.ParseRowKey(r.key)
			if err != nil {
				return 0, fmt.Errorf("BUG: unparsable row key %x: %w", r.key, err)
			}
			n++
			last := r.rowTime + whole - 1
			if start > r.rowTime || end < last {
				lo, hi := max(start, r.rowTime), min(end, last)
				d.CellRanges = append(d.CellRanges, engine.CellRange{Key: r.key, Lo: s.spec.Column(r.rowTime, lo), Hi: s.spec.Column(r.rowTime, hi)})
				continue
			}
			d.Rows = append(d.Rows, r.key)
			if r.legacy {
				// Only row_key_index knows a type-less key.
				d.LegacyRowKeys = append(d.LegacyRowKeys, engine.LegacyRowKey{Metric: k.Metric, RowKey: r.key})
				continue
			}
			indexMetric := k.Metric
			if r.indexMetric != "" {
				indexMetric = r.indexMetric
			}
			irk := engine.IndexedRowKey{Metric: indexMetric, RowTime: r.rowTime, DataType: r.dataType, Tags: k.Tags}
			d.RowKeys = append(d.RowKeys, irk)
			if r.indexMetric == "" {
				d.TagIndexed = s.appendTagIndexed(d.TagIndexed, irk)
			}
			if id := metricRowKey(indexMetric, r.rowTime); !tagged && !rowTimes[id] {
				rowTimes[id] = true
				d.RowTimes = append(d.RowTimes, engine.RowTimeIndex{Metric: indexMetric, RowTime: r.rowTime})
			}
		}
	}
	if !tagged && start == math.MinInt64 && end == math.MaxInt64 {
		d.LegacyMetrics = append(d.LegacyMetrics, metrics...)
		d.MetricNames = append(d.MetricNames, metrics...)
	}
	err = s.eng.Delete(ctx, d)
	// Index rows are gone, so this process must write them again on the
	// next sample of those rows (§8 step 4, for every cache: KairosDB
	// clears the metric cache only on delete-all and can lose index rows).
	// The series' own marks go too, also those of handles the HTTP side
	// keeps. A failed delete may have removed some rows already.
	raiseTo(&s.deleteTime, d.WriteTime)
	if len(d.Rows) > 0 || len(d.MetricNames) > 0 {
		s.forgetIndex()
	}
	if err != nil {
		return 0, fmt.Errorf("delete: %w", err)
	}
	return n, nil
}

// raiseTo sets v to x unless it holds more already.
func raiseTo(v *atomic.Int64, x int64) {
	for {
		prev := v.Load()
		if prev >= x || v.CompareAndSwap(prev, x) {
			return
		}
	}
}
