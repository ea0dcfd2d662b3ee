package cql_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
)

// BenchmarkCells reads one day of every series of a keyspace seeded by
// kairosload (BENCHMARKS.md "Reproduce", read seed: load_metric_0..99 from
// 2025-01-01), the data_points phase of a remote read alone, with the
// engine's page sizes, compressions and slice concurrencies side by side.
// It reports its own CPU per million cells, and with
// KAIROS_BENCH_CASSANDRA_PID set the node's, which is what caps a read on a
// machine it shares.
//
//	KAIROS_TEST_CASSANDRA=127.0.0.1:PORT KAIROS_BENCH_READ_KEYSPACE=load_read \
//	KAIROS_BENCH_CASSANDRA_PID=$CPID go test -run '^$' -bench BenchmarkCells -benchtime 2x ./kairosstore/cql/
func BenchmarkCells(b *testing.B) {
	addr, ks := os.Getenv("KAIROS_TEST_CASSANDRA"), os.Getenv("KAIROS_BENCH_READ_KEYSPACE")
	if addr == "" || ks == "" {
		b.Skip("needs KAIROS_TEST_CASSANDRA and a seeded KAIROS_BENCH_READ_KEYSPACE")
	}
	cpid, _ := strconv.Atoi(os.Getenv("KAIROS_BENCH_CASSANDRA_PID"))
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	end := start + 24*time.Hour.Milliseconds()
	spec := codec.DefaultRowSpec()

	e, err := cql.Open(b.Context(), testConfig(addr, ks), nil)
	require.NoError(b, err)
	type slice struct {
		key    []byte
		lo, hi uint32
	}
	var slices []slice
	for m := range 100 {
		metric := fmt.Sprintf("load_metric_%d", m)
		var rts []int64
		require.NoError(b, e.RowTimes(b.Context(), metric, spec.RowTime(start), end, func(rt int64) error {
			rts = append(rts, rt)
			return nil
		}))
		for _, rt := range rts {
			lo, hi := spec.SliceBounds(rt, start, end)
			require.NoError(b, e.RowKeys(b.Context(), metric, rt, func(dataType string, tags []codec.Tag) error {
				tags = append([]codec.Tag(nil), tags...)
				codec.SortTags(tags)
				key := codec.AppendRowKey(nil, codec.RowKey{Metric: metric, RowTime: rt, DataType: dataType, Tags: tags})
				slices = append(slices, slice{key, lo, hi})
				return nil
			}))
		}
	}
	require.NoError(b, e.Close())
	require.NotEmpty(b, slices)

	for _, comp := range strings.Split(envOr("KAIROS_BENCH_COMPRESSION", "snappy,none"), ",") {
		for _, page := range strings.Split(envOr("KAIROS_BENCH_PAGE_SIZE", "5000,20000"), ",") {
			for _, conc := range strings.Split(envOr("KAIROS_BENCH_CONCURRENCY", "16"), ",") {
				b.Run(fmt.Sprintf("compression=%s/page=%s/concurrency=%s", comp, page, conc), func(b *testing.B) {
					cfg := testConfig(addr, ks)
					cfg.Compression = comp
					cfg.PageSize, _ = strconv.Atoi(page)
					n, _ := strconv.Atoi(conc)
					e, err := cql.Open(b.Context(), cfg, nil)
					require.NoError(b, err)
					defer e.Close()
					var cells atomic.Int64
					cpu0, self0 := procCPU(cpid), procCPU(os.Getpid())
					b.ReportAllocs()
					for b.Loop() {
						var wg sync.WaitGroup
						next := atomic.Int64{}
						errs := make(chan error, n)
						for range n {
							wg.Go(func() {
								for i := next.Add(1) - 1; i < int64(len(slices)); i = next.Add(1) - 1 {
									s := slices[i]
									var c int64
									if err := e.Cells(b.Context(), s.key, s.lo, s.hi, func(uint32, []byte) error { c++; return nil }); err != nil {
										errs <- err
										return
									}
									cells.Add(c)
								}
							})
						}
						wg.Wait()
						close(errs)
						require.NoError(b, <-errs)
					}
					b.ReportMetric(float64(cells.Load())/b.Elapsed().Seconds(), "cells/s")
					// The scan's own CPU, to set beside the adapter's in a
					// remote read of the same cells (kairosload's adapter_cpu_s).
					b.ReportMetric((procCPU(os.Getpid())-self0).Seconds()/(float64(cells.Load())/1e6), "scan-cpu-s/Mcells")
					if cpid > 0 {
						b.ReportMetric((procCPU(cpid)-cpu0).Seconds()/(float64(cells.Load())/1e6), "cass-cpu-s/Mcells")
					}
				})
			}
		}
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// procCPU is the user+system CPU time of process pid, 0 if unknown.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command: utime and stime are the
	// 12th and 13th, in clock ticks of 1/100 s on Linux.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}
