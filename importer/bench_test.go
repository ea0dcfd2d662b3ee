package importer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// benchSeries and benchHours size the TSDB of BenchmarkImport:
// KAIROS_BENCH_IMPORT_SERIES series (default 1,000) of 15 s samples over
// KAIROS_BENCH_IMPORT_HOURS hours (default 6) in blocks of 2 h.
func benchSize(b *testing.B) (series, hours int) {
	series, hours = 1000, 6
	if v, err := strconv.Atoi(os.Getenv("KAIROS_BENCH_IMPORT_SERIES")); err == nil && v > 0 {
		series = v
	}
	if v, err := strconv.Atoi(os.Getenv("KAIROS_BENCH_IMPORT_HOURS")); err == nil && v > 0 {
		hours = v
	}
	return series, hours
}

// benchTSDB writes the TSDB, into KAIROS_BENCH_IMPORT_DIR when set (kept,
// for measuring the commands against a Prometheus serving it).
func benchTSDB(b *testing.B, series, hours int) string {
	b.Helper()
	dir := os.Getenv("KAIROS_BENCH_IMPORT_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	for blk := 0; blk < hours; blk += 2 {
		var ss []storage.Series
		from := t0 + int64(blk)*hour
		for i := range series {
			var s []chunks.Sample
			for ts := from; ts < from+2*hour && ts < t0+int64(hours)*hour; ts += 15_000 {
				s = append(s, smp{t: ts, f: float64((ts/15_000)%1000) * float64(i%7)})
			}
			ss = append(ss, storage.NewListSeries(labels.FromStrings("__name__", fmt.Sprintf("bench_metric_%d", i%20), "instance", fmt.Sprintf("host-%d", i), "job", "bench"), s))
		}
		// The writer refuses samples older than half its range behind the
		// newest committed, and it commits every 10,000 samples.
		_, err := tsdb.CreateBlock(ss, dir, 8*hour, slog.New(slog.DiscardHandler))
		require.NoError(b, err)
	}
	return dir
}

func benchStore(b *testing.B, engineName string) *kairosstore.Store {
	b.Helper()
	var eng engine.Engine
	switch engineName {
	case "embedded":
		e, err := pebblekv.Open(b.TempDir(), pebblekv.DefaultOptions(), nil)
		require.NoError(b, err)
		eng = e
	case "cassandra":
		addr, keyspace := cassandratest.Keyspace(b)
		e, err := cql.Open(context.Background(), cql.Config{
			Hosts: []string{addr}, Keyspace: keyspace,
			Replication:      "{'class': 'SimpleStrategy', 'replication_factor': 1}",
			WriteConsistency: "ONE", ReadConsistency: "ONE",
			Timeout: 30 * time.Second, ConnectTimeout: 15 * time.Second,
		}, nil)
		require.NoError(b, err)
		eng = e
	}
	b.Cleanup(func() { eng.Close() })
	require.NoError(b, eng.Setup(context.Background()))
	st, err := kairosstore.Open(context.Background(), eng, kairosstore.Options{RowWidth: 3 * 7 * 24 * time.Hour}, nil, nil)
	require.NoError(b, err)
	return st
}

// BenchmarkImport imports a generated TSDB (benchSize) into a fresh
// store of each engine, as import tsdb does, and the same samples over
// remote read from an adapter serving them, as import remote-read does
// (slices of 1 h); it reports samples written per second of the whole run.
// The Cassandra cases need KAIROS_TEST_CASSANDRA.
func BenchmarkImport(b *testing.B) {
	series, hours := benchSize(b)
	dir := benchTSDB(b, series, hours)
	// The remote-read source: an adapter's store holding the TSDB.
	src := benchStore(b, "embedded")
	_, err := ImportTSDB(context.Background(), src, TSDB{Dir: dir}, all(), nil)
	require.NoError(b, err)
	for _, engineName := range []string{"embedded", "cassandra"} {
		for _, path := range []string{"tsdb", "remote-read"} {
			b.Run(path+"/"+engineName, func(b *testing.B) {
				if engineName == "cassandra" && os.Getenv("KAIROS_TEST_CASSANDRA") == "" {
					b.Skip("KAIROS_TEST_CASSANDRA is not set")
				}
				var samples int64
				var spent time.Duration
				for b.Loop() {
					b.StopTimer()
					st := benchStore(b, engineName)
					var url string
					if path == "remote-read" {
						url = remoteReadServer(b, src).URL + "/api/v1/read"
					}
					b.StartTimer()
					start := time.Now()
					var sum Summary
					var err error
					if path == "tsdb" {
						sum, err = ImportTSDB(context.Background(), st, TSDB{Dir: dir}, all(), nil)
					} else {
						o := all()
						o.Start, o.End = t0, t0+int64(hours)*hour-1
						sum, err = ImportRemoteRead(context.Background(), st, RemoteRead{URL: url, Slice: time.Hour, Timeout: time.Minute}, o, nil)
					}
					spent += time.Since(start)
					require.NoError(b, err)
					require.Equal(b, int64(series*hours*240), sum.Samples)
					samples += sum.Samples
				}
				b.ReportMetric(float64(samples)/spent.Seconds(), "samples/s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
