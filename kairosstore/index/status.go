package index

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kairos-remote/kairos-adapter/internal/selfmetric"
)

func newMetrics(reg prometheus.Registerer) (scanned, selected *prometheus.CounterVec, perQuery prometheus.Histogram, lookups *prometheus.CounterVec) {
	f := promauto.With(reg)
	scanned = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kairos_adapter", Name: "read_index_entries_scanned_total",
		Help: "Index entries (row_keys, tag_indexed_row_keys, or their cached listings) that reads looked at to find series, by KairosDB metric.",
	}, []string{"metric"})
	selected = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kairos_adapter", Name: "read_index_entries_selected_total",
		Help: "Index entries that matched a read's label matchers, by KairosDB metric.",
	}, []string{"metric"})
	perQuery = f.NewHistogram(prometheus.HistogramOpts{
		Namespace: "kairos_adapter", Name: "read_index_entries_scanned_per_query",
		Help:    "Index entries one query looked at to find its series.",
		Buckets: prometheus.ExponentialBuckets(1, 10, 8),
	})
	lookups = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kairos_adapter", Name: "read_row_keys_cache_lookups_total",
		Help: "Lookups of cached row_keys listings: hit, miss, or too_many (more candidates than are checked one by one: the partition is listed again).",
	}, []string{"result"})
	return scanned, selected, perQuery, lookups
}

// Status is the state of the kept row_keys listings.
type Status struct {
	// Listings are kept, weighing Bytes of at most MaxBytes
	// (--kairosdb.row-keys-cache-bytes; 0: none are kept).
	Listings int   `json:"listings"`
	Bytes    int64 `json:"bytes"`
	MaxBytes int64 `json:"max_bytes"`
	// Lookups of kept listings since the process started, by result:
	// hit, miss, too_many.
	Lookups map[string]float64 `json:"lookups"`
}

// Status reads the kept listings and the index's own lookup counters.
func (x *Index) Status() Status {
	st := Status{Listings: x.Listings(), Bytes: x.ListingBytes(), MaxBytes: x.opts.ListingBytes, Lookups: map[string]float64{}}
	selfmetric.Each(x.m.ListingLookups, x.opts.Logger, func(result string, v float64) { st.Lookups[result] += v })
	return st
}

// EntriesRead calls fn with the index entries reads of each KairosDB metric
// looked at and selected since the process started (phase 2), for every
// metric read at least once.
func (x *Index) EntriesRead(fn func(metric string, scanned, selected float64)) {
	sel := map[string]float64{}
	selfmetric.Each(x.m.Selected, x.opts.Logger, func(metric string, v float64) { sel[metric] += v })
	selfmetric.Each(x.m.Scanned, x.opts.Logger, func(metric string, v float64) { fn(metric, v, sel[metric]) })
}
