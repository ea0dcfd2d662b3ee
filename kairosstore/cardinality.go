package kairosstore

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// What the web UI's metrics explorer and status page read (package web).
// Counts come from the indexes alone, never from data_points: a series
// counts in a row window when it has a row_keys entry there (§7.4).

// MetricNames lists the Prometheus metric names of string_index (§9.1),
// without the prefix and the exemplar side metrics, in byte order.
func (s *Store) MetricNames(ctx context.Context) ([]string, error) {
	var out []string
	err := s.eng.MetricNames(ctx, func(metric string) error {
		if n, ok := s.promName(metric); ok {
			out = append(out, strings.Clone(n))
		}
		return nil
	})
	return out, err
}

// promName is the Prometheus metric name of a KairosDB metric this
// adapter reads: without the prefix, and none for a name outside the
// prefix or an exemplar side metric.
func (s *Store) promName(metric string) (string, bool) {
	n, ok := strings.CutPrefix(metric, s.mapper.Prefix)
	return n, ok && n != "" && !strings.HasSuffix(metric, codec.ExemplarSuffix)
}

// SeriesCounts calls fn with the row_keys entries of metric (a Prometheus
// name) by data type, in each row window that overlaps start..end (ms); see
// index.EntriesByType.
func (s *Store) SeriesCounts(ctx context.Context, metric string, start, end int64, fn func(rowTime int64, dataType string, entries int, cached bool)) error {
	return s.idx.EntriesByType(ctx, s.mapper.Prefix+metric, start, end, fn)
}

// TagIndexed reports whether metric's rows also go to tag_indexed_row_keys
// (§6.1).
func (s *Store) TagIndexed(metric string) bool {
	_, ok := s.opts.TagIndexed[s.mapper.Prefix+metric]
	_, all := s.opts.TagIndexed["*"]
	return ok || all
}

// Layout describes the keyspace's row spec in force (§3.3), the sample TTL,
// the entries each cache holds, and the bytes of the kept row_keys listings
// (the cache bounded in bytes) against their budget.
func (s *Store) Layout() map[string]any {
	width := time.Duration(s.spec.Width) * time.Millisecond
	if s.spec.Unit == codec.Seconds {
		width = time.Duration(s.spec.Width) * time.Second
	}
	out := map[string]any{
		"row_time_unit":        unitFlag(s.spec.Unit),
		"row_width":            model.Duration(width).String(),
		"datapoint_ttl_s":      s.opts.TTL,
		"metric_prefix":        s.mapper.Prefix,
		"cache_entries":        map[string]int{"series": s.series.Len(), "row_keys_written": s.rowKeys.Len(), "metric_rows_written": s.metricRows.Len(), "metadata": s.meta.Len()},
		"row_keys_listings":    s.idx.Listings(),
		"row_keys_cache_bytes": s.idx.ListingBytes(),
		"row_keys_cache_max":   s.opts.RowKeysCacheBytes,
	}
	return out
}
