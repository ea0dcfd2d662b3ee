package kairosstore

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
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

// Status is the store's part of the status page.
type Status struct {
	// The keyspace's row spec in force (§3.3), the sample TTL (0: none)
	// and the metric prefix.
	RowTimeUnit     string `json:"row_time_unit"`
	RowWidth        string `json:"row_width"`
	DatapointTTLSec int32  `json:"datapoint_ttl_s"`
	MetricPrefix    string `json:"metric_prefix"`
	// CacheEntries are the entries each index cache holds
	// (--kairosdb.index-cache-size bounds them).
	CacheEntries CacheEntries `json:"cache_entries"`
	// IndexRows counts the index rows of this process's writes since it
	// started, by table: written, or not written again because a cache
	// said they were (hits).
	IndexRows map[string]HitsMisses `json:"index_rows"`
	// Listings are the kept row_keys listings.
	Listings index.Status `json:"row_keys_listings"`
}

// CacheEntries are the entries of the store's caches.
type CacheEntries struct {
	Series            int `json:"series"`
	RowKeysWritten    int `json:"row_keys_written"`
	MetricRowsWritten int `json:"metric_rows_written"`
	Metadata          int `json:"metadata"`
}

// HitsMisses are one cache's lookups.
type HitsMisses struct {
	Hits   float64 `json:"hits"`
	Misses float64 `json:"misses"`
}

// Status reads the layout in force, the caches and the store's own
// counters.
func (s *Store) Status() Status {
	width := time.Duration(s.spec.Width) * time.Millisecond
	if s.spec.Unit == codec.Seconds {
		width = time.Duration(s.spec.Width) * time.Second
	}
	return Status{
		RowTimeUnit:     unitFlag(s.spec.Unit),
		RowWidth:        model.Duration(width).String(),
		DatapointTTLSec: s.opts.TTL,
		MetricPrefix:    s.mapper.Prefix,
		CacheEntries:    CacheEntries{Series: s.series.Len(), RowKeysWritten: s.rowKeys.Len(), MetricRowsWritten: s.metricRows.Len(), Metadata: s.meta.Len()},
		IndexRows: map[string]HitsMisses{
			"row_keys":           {Hits: counterValue(s.m.rowKeyHits), Misses: counterValue(s.m.rowKeyMisses)},
			"row_key_time_index": {Hits: counterValue(s.m.metricRowHits), Misses: counterValue(s.m.metricRowMisses)},
		},
		Listings: s.idx.Status(),
	}
}

// IndexEntries calls fn with the index entries reads looked at and
// selected since the process started, by Prometheus metric name, for the
// explorer: what tells the metrics worth --kairosdb.tag-indexed-metrics.
func (s *Store) IndexEntries(fn func(metric string, scanned, selected float64)) {
	s.idx.EntriesRead(func(metric string, scanned, selected float64) {
		if n, ok := s.promName(metric); ok {
			fn(n, scanned, selected)
		}
	})
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
