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
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
)

// Exemplars returns the exemplars with timestamps in [start, end]
// (inclusive, ms) of the series the matchers select, for an exemplar query
// API. It runs the three-phase read (§7) over the exemplar metrics of the
// selected metric names. Results are sorted by series labels and exemplars
// by timestamp; series without exemplars in the range are left out.
func (s *Store) Exemplars(ctx context.Context, start, end int64, ms ...*labels.Matcher) ([]exemplar.QueryResult, error) {
	refs, err := s.selectSeries(ctx, index.Query{Matchers: ms, Start: start, End: end, Kind: index.Exemplars})
	if err != nil {
		return nil, err
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
		// The index named the series after the exemplar metric.
		lb := labels.NewBuilder(ref.Labels)
		lb.Set(model.MetricNameLabel, strings.TrimSuffix(ref.Labels.Get(model.MetricNameLabel), codec.ExemplarSuffix))
		out = append(out, exemplar.QueryResult{SeriesLabels: lb.Labels(), Exemplars: es})
	}
	// Dropping the suffix can change the order of names.
	slices.SortFunc(out, func(a, b exemplar.QueryResult) int { return labels.Compare(a.SeriesLabels, b.SeriesLabels) })
	return out, nil
}

// readExemplars reads the prom_exemplar cells of one series in [start, end].
func (s *Store) readExemplars(ctx context.Context, ref *index.Series, start, end int64) ([]exemplar.Exemplar, error) {
	t0 := time.Now()
	defer s.observe("data_points", t0)
	var out []exemplar.Exemplar
	for _, r := range ref.Rows {
		if r.DataType != codec.TypeExemplar {
			continue // a metric whose own name ends in the suffix
		}
		lo, hi := s.spec.SliceBounds(r.RowTime, start, end)
		err := s.eng.Cells(ctx, r.Key, lo, hi, func(col uint32, value []byte) error {
			t := s.spec.Timestamp(r.RowTime, col)
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
			return nil, fmt.Errorf("read exemplars of %s: %w", ref.Labels, err)
		}
	}
	slices.SortStableFunc(out, func(a, b exemplar.Exemplar) int { return cmp.Compare(a.Ts, b.Ts) })
	return out, nil
}
