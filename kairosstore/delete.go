package kairosstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
)

// Delete removes the samples of the series selected by ms in [start, end]
// (inclusive, ms), following KairosDB's rules (§8): a row wholly inside the
// range loses its data_points partition and its index entries, a row only
// partly inside loses a column range and keeps its index entries.
// row_key_time_index entries go only when no tag matcher narrows the delete,
// and the metric name leaves string_index only when the whole time range of an
// unfiltered metric is deleted. It returns the number of rows touched.
func (s *Store) Delete(ctx context.Context, start, end int64, ms ...*labels.Matcher) (int, error) {
	sel, err := s.idx.Select(ctx, index.Query{Matchers: ms, Start: start, End: end, Kind: index.Deletion})
	if err != nil {
		return 0, fromIndex(err)
	}
	metrics, refs := sel.Metrics, sel.Series
	if len(metrics) == 0 {
		return 0, nil
	}
	tagged := false
	for _, m := range ms {
		tagged = tagged || m.Name != model.MetricNameLabel
	}
	whole := s.spec.WidthMillis()
	// Not before the time writes after the last delete carry (Commit): a
	// write in that delete's millisecond is stamped one later, and this
	// delete must still shadow it (a tie goes to the tombstone, §5.4).
	d := &engine.Deletes{WriteTime: max(s.opts.Now().UnixMilli(), s.lastDeleteMillis.Load()+1)}
	rowTimes := map[string]bool{}
	n := 0
	for _, ref := range refs {
		for _, r := range ref.Rows {
			k, err := codec.ParseRowKey(r.Key)
			if err != nil {
				return 0, fmt.Errorf("BUG: unparsable row key %x: %w", r.Key, err)
			}
			n++
			last := r.RowTime + whole - 1
			if start > r.RowTime || end < last {
				lo, hi := max(start, r.RowTime), min(end, last)
				d.CellRanges = append(d.CellRanges, engine.CellRange{Key: r.Key, Lo: s.spec.Column(r.RowTime, lo), Hi: s.spec.Column(r.RowTime, hi)})
				continue
			}
			d.Rows = append(d.Rows, r.Key)
			if r.Legacy {
				// Only row_key_index knows a type-less key.
				d.LegacyRowKeys = append(d.LegacyRowKeys, engine.LegacyRowKey{Metric: k.Metric, RowKey: r.Key})
				continue
			}
			indexMetric := k.Metric
			if r.IndexMetric != "" {
				indexMetric = r.IndexMetric
			}
			irk := engine.IndexedRowKey{Metric: indexMetric, RowTime: r.RowTime, DataType: r.DataType, Tags: k.Tags}
			d.RowKeys = append(d.RowKeys, irk)
			if r.IndexMetric == "" {
				d.TagIndexed = s.appendTagIndexed(d.TagIndexed, irk)
			}
			if id := metricRowKey(indexMetric, r.RowTime); !tagged && !rowTimes[id] {
				rowTimes[id] = true
				d.RowTimes = append(d.RowTimes, engine.RowTimeIndex{Metric: indexMetric, RowTime: r.RowTime})
			}
		}
	}
	if !tagged && start == math.MinInt64 && end == math.MaxInt64 {
		d.LegacyMetrics = append(d.LegacyMetrics, metrics...)
		d.MetricNames = append(d.MetricNames, metrics...)
	}
	var changes []Change
	if s.opts.OnChange != nil || s.opts.Guard != nil {
		changes = make([]Change, 0, len(metrics))
		for _, m := range metrics {
			// Side metrics (exemplars, non-finite values) change with
			// their metric, which the selection names too.
			if name, ok := s.promName(m); ok && !strings.HasSuffix(m, NonFiniteSuffix) {
				changes = append(changes, Change{Metric: name, MinT: start, MaxT: end, Deleted: true})
			}
		}
	}
	var began time.Time
	if s.opts.Guard != nil {
		began = s.opts.Now()
		if err := s.opts.Guard.BeforeChange(ctx, changes); err != nil {
			return 0, err
		}
	}
	err = s.eng.Delete(ctx, d)
	if s.opts.OnChange != nil {
		s.opts.OnChange(changes)
	}
	// Index rows are gone, so this process must write them again on the
	// next sample of those rows (§8 step 4, for every cache: KairosDB
	// clears the metric cache only on delete-all and can lose index rows).
	// The series' own marks go too, also those of handles the HTTP side
	// keeps. A failed delete may have removed some rows already.
	raiseTo(&s.lastDeleteMillis, d.WriteTime)
	if len(d.Rows) > 0 || len(d.MetricNames) > 0 {
		s.forgetIndex()
	}
	if err != nil {
		return 0, fmt.Errorf("delete: %w", err)
	}
	if s.opts.Guard != nil {
		if err := s.opts.Guard.AfterChange(ctx, changes, began); err != nil {
			return 0, err
		}
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
