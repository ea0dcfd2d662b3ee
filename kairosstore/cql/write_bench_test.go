package cql_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
)

// BenchmarkWrite compares the groupings of Write side by side against the
// real node, on two workloads: Prometheus's shape, 2,000 series × 1 sample
// (2,000 data_points inserts, 2,000 row_keys, 10 row_key_time_index and 10
// string_index rows per op), and 1,000 series × 10 samples.
//
//	KAIROS_TEST_CASSANDRA=127.0.0.1:PORT go test -run '^$' -bench BenchmarkWrite -benchtime 20x ./kairosstore/cql/
func BenchmarkWrite(b *testing.B) {
	addr, ks := cassandratest.Keyspace(b)
	for _, shape := range []struct{ series, samples int }{{2000, 1}, {1000, 10}} {
		for _, bc := range []struct {
			name     string
			g        cql.Grouping
			inFlight int
		}{
			{"singles/inflight=64", cql.GroupSingles, 64},
			{"partition_batches/inflight=64", cql.GroupPartitions, 64},
			{"replica_batches/inflight=64", cql.GroupReplicas, 64},
		} {
			b.Run(fmt.Sprintf("%dx%d/%s", shape.series, shape.samples, bc.name), func(b *testing.B) {
				cfg := testConfig(addr, ks)
				cfg.MaxInFlight = bc.inFlight
				e, err := cql.Open(b.Context(), cfg, nil)
				require.NoError(b, err)
				defer e.Close()
				require.NoError(b, e.Setup(b.Context()))
				cql.SetGrouping(e, bc.g)
				batch := workload(time.Now().UnixMilli(), shape.series, shape.samples)
				b.ReportAllocs()
				for b.Loop() {
					require.NoError(b, e.Write(b.Context(), batch))
				}
				b.ReportMetric(float64(shape.series*shape.samples*b.N)/b.Elapsed().Seconds(), "samples/s")
			})
		}
	}
}

// BenchmarkCompression writes and reads the same workload with each protocol
// compression, side by side in one run.
func BenchmarkCompression(b *testing.B) {
	const series, samples = 1000, 10
	addr, ks := cassandratest.Keyspace(b)
	for _, comp := range []string{"lz4", "snappy", "none"} {
		b.Run(comp, func(b *testing.B) {
			cfg := testConfig(addr, ks)
			cfg.Compression = comp
			e, err := cql.Open(b.Context(), cfg, nil)
			require.NoError(b, err)
			defer e.Close()
			require.NoError(b, e.Setup(b.Context()))
			batch := workload(time.Now().UnixMilli(), series, samples)
			b.ReportAllocs()
			for b.Loop() {
				require.NoError(b, e.Write(b.Context(), batch))
				for _, c := range batch.Cells[:100] {
					n := 0
					require.NoError(b, e.Cells(b.Context(), c.Key, 0, 1<<31, func(uint32, []byte) error { n++; return nil }))
					require.Positive(b, n)
				}
			}
			b.ReportMetric(float64(series*samples*b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// BenchmarkWriteSteady is Prometheus's shape once the adapter has run a
// while: 2,000 series × 1 sample whose index rows are cached, so a Write
// holds data_points inserts only, in replica batches (the default).
func BenchmarkWriteSteady(b *testing.B) {
	addr, ks := cassandratest.Keyspace(b)
	e, err := cql.Open(b.Context(), testConfig(addr, ks), nil)
	require.NoError(b, err)
	defer e.Close()
	require.NoError(b, e.Setup(b.Context()))
	batch := workload(time.Now().UnixMilli(), 2000, 1)
	batch.RowKeys, batch.RowTimes, batch.MetricNames = nil, nil, nil
	b.ReportAllocs()
	for b.Loop() {
		require.NoError(b, e.Write(b.Context(), batch))
	}
	b.ReportMetric(float64(len(batch.Cells)*b.N)/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(len(batch.Cells)*b.N), "ns/sample")
}
