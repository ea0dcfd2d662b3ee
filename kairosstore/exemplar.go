package kairosstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// isExemplarMetric reports whether a stored metric name is an exemplar
// metric rather than a series' metric.
func isExemplarMetric(name string) bool { return strings.HasSuffix(name, codec.ExemplarSuffix) }

// Exemplars returns the exemplars with timestamps in [start, end]
// (inclusive, ms) of the series the matchers select, for an exemplar query
// API. It runs the three-phase read (§7) over the exemplar metrics of the
// selected metric names. Results are sorted by series labels and exemplars
// by timestamp; series without exemplars in the range are left out.
func (s *Store) Exemplars(ctx context.Context, start, end int64, ms ...*labels.Matcher) ([]exemplar.QueryResult, error) {
	plan, err := s.mapper.Plan(ms)
	if err != nil {
		return nil, badRequest("%w", err)
	}
	if plan.Empty() || start > end {
		return nil, nil
	}
	var metrics []string
	if plan.Metrics != nil {
		for _, m := range plan.Metrics {
			metrics = append(metrics, m+codec.ExemplarSuffix)
		}
	} else {
		t0 := time.Now()
		err := s.eng.MetricNames(ctx, func(name string) error {
			base, ok := strings.CutSuffix(name, codec.ExemplarSuffix)
			if !ok || !plan.MatchName(base) {
				return nil
			}
			metrics = append(metrics, name)
			if s.opts.MaxMetrics > 0 && len(metrics) > s.opts.MaxMetrics {
				return badRequest("the selector matches more than %d metric names (--query.max-metrics); add a __name__ matcher", s.opts.MaxMetrics)
			}
			return nil
		})
		s.observe("metric_names", t0)
		if err != nil {
			return nil, err
		}
	}
	refs, err := s.findSeries(ctx, metrics, plan, start, end, true)
	if err != nil {
		return nil, err
	}
	if s.opts.MaxSeries > 0 && len(refs) > s.opts.MaxSeries {
		return nil, badRequest("the query selects %d series, more than the limit of %d (--query.max-series)", len(refs), s.opts.MaxSeries)
	}
	var out []exemplar.QueryResult
	for _, ref := range refs {
		es, err := s.readExemplars(ctx, ref, start, end)
		if err != nil {
			return nil, err
		}
		if len(es) == 0 {
			continue
		}
		// The finder named the series after the exemplar metric.
		lb := labels.NewBuilder(ref.lset)
		lb.Set(model.MetricNameLabel, strings.TrimSuffix(ref.lset.Get(model.MetricNameLabel), codec.ExemplarSuffix))
		out = append(out, exemplar.QueryResult{SeriesLabels: lb.Labels(), Exemplars: es})
	}
	// Dropping the suffix can change the order of names.
	slices.SortFunc(out, func(a, b exemplar.QueryResult) int { return labels.Compare(a.SeriesLabels, b.SeriesLabels) })
	return out, nil
}

// readExemplars reads the prom_exemplar cells of one series in [start, end].
func (s *Store) readExemplars(ctx context.Context, ref *seriesRef, start, end int64) ([]exemplar.Exemplar, error) {
	t0 := time.Now()
	defer s.observe("data_points", t0)
	var out []exemplar.Exemplar
	for _, r := range ref.rows {
		if r.dataType != codec.TypeExemplar {
			continue // a metric whose own name ends in the suffix
		}
		lo, hi := s.spec.SliceBounds(r.rowTime, start, end)
		err := s.eng.Cells(ctx, r.key, lo, hi, func(col uint32, value []byte) error {
			t := s.spec.Timestamp(r.rowTime, col)
			if t < start || t > end {
				return nil
			}
			ls, v, err := codec.DecodeExemplarValue(value)
			if err != nil {
				s.m.skipped.WithLabelValues("undecodable").Inc()
				return nil
			}
			// Remote write marks an exemplar without a timestamp by 0
			// (prompb Exemplar.ToExemplar).
			out = append(out, exemplar.Exemplar{Labels: ls, Value: v, Ts: t, HasTs: t != 0})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read exemplars of %s: %w", ref.lset, err)
		}
	}
	slices.SortStableFunc(out, func(a, b exemplar.Exemplar) int { return cmp.Compare(a.Ts, b.Ts) })
	return out, nil
}
