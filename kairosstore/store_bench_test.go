package kairosstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// benchEngines opens each engine for a benchmark: the same workload runs on
// both, side by side in one run, so their ratio is meaningful on a noisy
// machine.
func benchEngines(b *testing.B, fn func(b *testing.B, eng engine.Engine)) {
	b.Run("engine=pebble", func(b *testing.B) {
		fn(b, openPebbleWith(b, pebblekv.DefaultOptions()))
	})
	b.Run("engine=cassandra", func(b *testing.B) {
		fn(b, openCassandra(b))
	})
}

func benchSeries(n int) []labels.Labels {
	out := make([]labels.Labels, n)
	for i := range out {
		out[i] = labels.FromStrings("__name__", fmt.Sprintf("bench_metric_%d", i%20), "instance", fmt.Sprintf("host-%d:9100", i), "job", "node", "mode", "user")
	}
	return out
}

// BenchmarkStoreWrite stores 1,000 series × 10 samples per request, the
// shape of a remote-write request, through the whole layout.
func BenchmarkStoreWrite(b *testing.B) {
	benchEngines(b, func(b *testing.B, eng engine.Engine) {
		s, err := ks.Open(context.Background(), eng, ks.Options{}, nil, nil)
		require.NoError(b, err)
		series := benchSeries(1000)
		const perSeries = 10
		t0 := time.Now().UnixMilli()
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			app := s.NewAppender()
			for _, ls := range series {
				for k := 0; k < perSeries; k++ {
					require.NoError(b, errOf(app.Append(0, ls, t0+int64(n*perSeries+k)*15000, float64(k))))
				}
			}
			require.NoError(b, app.Commit(context.Background()))
			n++
		}
		b.ReportMetric(float64(n*len(series)*perSeries)/b.Elapsed().Seconds(), "samples/s")
	})
}

// BenchmarkStoreRead reads 200 series × 2,000 samples (about 8 hours at 15 s)
// back through the three-phase read.
func BenchmarkStoreRead(b *testing.B) {
	benchEngines(b, func(b *testing.B, eng engine.Engine) {
		s, err := ks.Open(context.Background(), eng, ks.Options{}, nil, nil)
		require.NoError(b, err)
		const perSeries = 2000
		t0 := int64(1_700_000_000_000)
		writeBenchSeries(b, s, 200, perSeries, t0, func(_, j int) float64 { return float64(j) })
		b.ReportAllocs()
		var it chunkenc.Iterator
		total := 0
		for b.Loop() {
			q, err := s.Querier(t0, t0+perSeries*15000)
			require.NoError(b, err)
			set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", "bench_metric_.*"))
			got := 0
			for set.Next() {
				it = set.At().Iterator(it)
				for it.Next() != chunkenc.ValNone {
					got++
				}
			}
			require.NoError(b, set.Err())
			require.Equal(b, 200*perSeries, got)
			total += got
		}
		b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "samples/s")
	})
}

// BenchmarkAppend measures the appender alone on a 10,000-sample request,
// with and without the request size known up front (Appender.Grow).
func BenchmarkAppend(b *testing.B) {
	s, err := ks.Open(context.Background(), openPebble(b), ks.Options{}, nil, nil)
	require.NoError(b, err)
	series := benchSeries(1000)
	for _, grow := range []bool{false, true} {
		b.Run(fmt.Sprintf("grow=%v", grow), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				app := s.NewAppender()
				if grow {
					app.Grow(len(series) * 10)
				}
				for _, ls := range series {
					for k := range 10 {
						if err := errOf(app.Append(0, ls, int64(k)*15000, float64(k))); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(series)*10), "ns/sample")
		})
	}
}

// writeBenchSeries writes n of benchSeries' series, perSeries samples each
// from t0 at 15 s, value(series, sample), in commits of 100 samples a series.
func writeBenchSeries(b *testing.B, s *ks.Store, n, perSeries int, t0 int64, value func(i, j int) float64) {
	series := benchSeries(n)
	for k := 0; k < perSeries; k += 100 {
		app := s.NewAppender()
		for i, ls := range series {
			for j := k; j < min(k+100, perSeries); j++ {
				require.NoError(b, errOf(app.Append(0, ls, t0+int64(j)*15000, value(i, j))))
			}
		}
		require.NoError(b, app.Commit(context.Background()))
	}
}
