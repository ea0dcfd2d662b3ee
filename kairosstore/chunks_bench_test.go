package kairosstore_test

import (
	"context"
	"math"
	"syscall"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/stretchr/testify/require"

	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// BenchmarkStoreReadChunks reads 200 series × 2,000 samples (about 8 hours
// at 15 s, gauge-like values) back as XOR chunks, what a Prometheus reading
// the adapter over remote read asks for (ChunkQuerier). On a shared
// machine the process's CPU per sample is the figure to compare.
//
//	go test -run '^$' -bench StoreReadChunks -benchtime 20x ./kairosstore/
func BenchmarkStoreReadChunks(b *testing.B) {
	benchEngines(b, func(b *testing.B, eng engine.Engine) {
		s, err := ks.Open(context.Background(), eng, ks.Options{}, nil, nil)
		require.NoError(b, err)
		const perSeries = 2000
		t0 := int64(1_700_000_000_000)
		writeBenchSeries(b, s, 200, perSeries, t0, func(i, j int) float64 { return math.Round(100*math.Sin(float64(i+j)/50)) / 4 })
		if pe, ok := eng.(*pebblekv.Engine); ok {
			// As a store read over remote read is: compacted, every row's
			// blocks merged (on Cassandra, rows are what they are).
			_, err := pe.Compact(context.Background())
			require.NoError(b, err)
		}
		b.ReportAllocs()
		cpu0 := cpuTime(b)
		var it chunks.Iterator
		total := 0
		for b.Loop() {
			q, err := s.ChunkQuerier(t0, t0+perSeries*15000)
			require.NoError(b, err)
			set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", "bench_metric_.*"))
			got := 0
			for set.Next() {
				it = set.At().Iterator(it)
				for it.Next() {
					got += it.At().Chunk.NumSamples()
				}
				require.NoError(b, it.Err())
			}
			require.NoError(b, set.Err())
			require.NoError(b, q.Close())
			require.Equal(b, 200*perSeries, got)
			total += got
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/sample")
		b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(total), "cpu-ns/sample")
	})
}

// cpuTime is the process's CPU time so far (user and system), ns: on a
// machine shared with other work, a benchmark's CPU per sample moves less
// than its wall time.
func cpuTime(b *testing.B) int64 {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return ru.Utime.Nano() + ru.Stime.Nano()
}
