package queryapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// BenchmarkQueryRange measures a dashboard-like range query over the
// embedded store: sum by (job) (rate(...[5m])) over 200 counters of 6 hours
// at 15 s (288,000 samples), 360 steps.
//
//	go test -run '^$' -bench QueryRange -benchtime 20x ./queryapi/
func BenchmarkQueryRange(b *testing.B) {
	ctx := context.Background()
	store, err := kairosstore.Open(ctx, openEngine(b, "pebble"), kairosstore.Options{}, nil, nil)
	require.NoError(b, err)
	const series, samples = 200, 6 * 240
	app := store.NewAppender()
	for i := range series {
		ls := labels.FromStrings("__name__", "bench_requests_total", "job", fmt.Sprint("j", i%4), "instance", fmt.Sprint("i", i))
		for k := range samples {
			require.NoError(b, errOf(app.Append(0, ls, int64(k)*15_000, float64(k*(i+1)))))
		}
	}
	require.NoError(b, app.Commit(ctx))
	h := mount(New(store, Options{}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
	form := url.Values{"query": {"sum by (job) (rate(bench_requests_total[5m]))"}, "start": {"300"}, "end": {"21600"}, "step": {"60"}}
	b.ResetTimer()
	for b.Loop() {
		if got := get(b, h, http.MethodGet, "/api/v1/query_range", form); got.code != http.StatusOK {
			b.Fatal(got.body)
		}
	}
	b.ReportMetric(float64(series*samples)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
}

// BenchmarkRawPanel is the raw year panel of BENCHMARKS.md ("Issue #31,
// second pass") at a smaller scale, as the frontend evaluates it: one
// query_range per day of sum(rate(x[6h])) at a step of 6h over 20 counters
// at 60 s, read raw. 60 days keep the seeding short; the cost per sample
// read is what it measures.
//
//	go test -run '^$' -bench RawPanel -benchtime 10x ./queryapi/
func BenchmarkRawPanel(b *testing.B) {
	ctx := context.Background()
	eng := openEngine(b, "pebble")
	store, err := kairosstore.Open(ctx, eng, kairosstore.Options{}, nil, nil)
	require.NoError(b, err)
	const series, days, perDay = 20, 60, 1440
	for d := range days {
		app := store.NewAppender()
		for i := range series {
			ls := labels.FromStrings("__name__", "bench_counter", "instance", fmt.Sprint("i", i))
			for k := d * perDay; k < (d+1)*perDay; k++ {
				require.NoError(b, errOf(app.Append(0, ls, int64(k)*60_000, float64(k*(i+1)))))
			}
		}
		require.NoError(b, app.Commit(ctx))
	}
	// As the measured store was: compacted, every row's blocks merged.
	_, err = eng.(*pebblekv.Engine).Compact(ctx)
	require.NoError(b, err)
	h := mount(New(store, Options{}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
	b.ResetTimer()
	cpu0 := processCPU(b)
	for b.Loop() {
		for d := 1; d < days; d++ {
			form := url.Values{"query": {"sum(rate(bench_counter[6h]))"}, "start": {fmt.Sprint(d * 86400)}, "end": {fmt.Sprint(d*86400 + 86400 - 21600)}, "step": {"21600"}, "max_source_resolution": {"0"}}
			if got := get(b, h, http.MethodGet, "/api/v1/query_range", form); got.code != http.StatusOK {
				b.Fatal(got.body)
			}
		}
	}
	// Each day's query reads its day and the 6h before it. On a shared
	// machine the process's CPU per sample is the figure to compare.
	read := float64(series * (days - 1) * (perDay + perDay/4) * b.N)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/read, "ns/sample")
	b.ReportMetric(float64(processCPU(b)-cpu0)/read, "cpu-ns/sample")
}

// processCPU is the user and system CPU time of this process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDayQuery is the day query of issue #31 at a fifth of its
// series: sum by (job) (rate(x[5m])) over a day at a step of 60 s, on 200
// counters at 15 s in a compacted store, evaluated whole (the frontend's
// parts evaluate it the same way, a day each). What it measures is the
// process's CPU per sample read, the engine's included: the adapter's part
// of it is the read and the series iterator PromQL calls per sample.
//
//	go test -run '^$' -bench DayQuery -benchtime 10x ./queryapi/
func BenchmarkDayQuery(b *testing.B) {
	ctx := context.Background()
	eng := openEngine(b, "pebble")
	store, err := kairosstore.Open(ctx, eng, kairosstore.Options{}, nil, nil)
	require.NoError(b, err)
	const series, samples = 200, 5760 + 20 // a day at 15 s and the 5m before it
	app := store.NewAppender()
	for i := range series {
		ls := labels.FromStrings("__name__", "bench_requests_total", "job", fmt.Sprint("j", i%4), "instance", fmt.Sprint("i", i),
			"env", "prod", "region", fmt.Sprint("r", i%3), "mode", fmt.Sprint("m", i%8))
		for k := range samples {
			require.NoError(b, errOf(app.Append(0, ls, int64(k)*15_000, float64(k*(i+1)))))
		}
		if i%20 == 19 {
			require.NoError(b, app.Commit(ctx))
			app = store.NewAppender()
		}
	}
	require.NoError(b, app.Commit(ctx))
	_, err = eng.(*pebblekv.Engine).Compact(ctx)
	require.NoError(b, err)
	h := mount(New(store, Options{}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
	form := url.Values{"query": {"sum by (job) (rate(bench_requests_total[5m]))"}, "start": {"300"}, "end": {"86400"}, "step": {"60"}, "max_source_resolution": {"0"}}
	b.ResetTimer()
	cpu0 := processCPU(b)
	for b.Loop() {
		if got := get(b, h, http.MethodGet, "/api/v1/query_range", form); got.code != http.StatusOK {
			b.Fatal(got.body)
		}
	}
	read := float64(series * samples * b.N)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/read, "ns/sample")
	b.ReportMetric(float64(processCPU(b)-cpu0)/read, "cpu-ns/sample")
}
