package frontend

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	queries        *prometheus.CounterVec
	parts          prometheus.Counter
	shards         prometheus.Counter
	shardFallbacks prometheus.Counter
	cacheRequests  *prometheus.CounterVec
	invalidations  *prometheus.CounterVec
	cacheBytes     prometheus.Gauge
	cacheExtents   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "kairos_adapter", "frontend"
	m := &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "queries_total",
			Help: "Range queries of the query API, by how they were answered: split (in parts, shards or from the cache) or whole (left to the query API: @ modifiers, limit, malformed)."}, []string{"path"}),
		parts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "parts_evaluated_total",
			Help: "Parts of range queries evaluated (not answered from the cache)."}),
		shards: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "shards_total",
			Help: "Shard queries run: one per shard and part of a sharded aggregation (two for avg)."}),
		shardFallbacks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "shard_fallbacks_total",
			Help: "Parts whose shards could not be combined exactly (native histograms, annotations), evaluated again whole."}),
		cacheRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "cache_requests_total",
			Help: "Parts looked up in the results cache: hit (all from the cache), partial (the missing times evaluated), miss."}, []string{"result"}),
		invalidations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "cache_invalidations_total",
			Help: "Cached extents dropped, by cause: write or delete (a change through this process in the times they depend on), ttl (older than --query.results-cache-ttl), evicted (to stay within --query.results-cache-bytes)."}, []string{"cause"}),
		cacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "cache_bytes",
			Help: "Estimated memory of the results cache's extents."}),
		cacheExtents: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "cache_extents",
			Help: "Extents in the results cache: one per query and part."}),
	}
	for _, r := range []string{"hit", "partial", "miss"} {
		m.cacheRequests.WithLabelValues(r)
	}
	for _, c := range []string{"write", "delete", "ttl", "evicted"} {
		m.invalidations.WithLabelValues(c)
	}
	if reg != nil {
		reg.MustRegister(m.queries, m.parts, m.shards, m.shardFallbacks, m.cacheRequests, m.invalidations, m.cacheBytes, m.cacheExtents)
	}
	return m
}
