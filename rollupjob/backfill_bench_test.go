package rollupjob_test

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/rollup"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

// BenchmarkBackfill is the job rolling up 20 series at 60 s over a year
// (KAIROS_BENCH_BACKFILL_DAYS days, 365 unless set; KAIROS_BENCH_BACKFILL_STEP
// sets the interval) on the embedded engine,
// at the default resolutions (5m, 1h, 6h), at a duty cycle of 1, from a
// progress of the latest unit alone:
//   - seeded: the history written without marks (KairosDB, an adapter
//     without the job), so the backfill alone rolls it up;
//   - imported: the history written as `import tsdb` writes it, through a
//     store whose Guard is a job that is not run, so every commit leaves
//     recomputation marks; the serving job steps right after the import,
//     the marks young (the import done within Config.MarkSlack of the
//     job's step), until it has nothing to do, then again once the marks
//     ripened.
//
// It reports raw samples rolled up per second of the process's CPU (user
// and system, all goroutines, Pebble's included) and per wall second, and
// the buckets written. The seed is written once, outside the measurement;
// each iteration starts the job over on it (progress deleted; imported:
// the marks stored again).
func BenchmarkBackfill(b *testing.B) {
	days := int64(365)
	if s := os.Getenv("KAIROS_BENCH_BACKFILL_DAYS"); s != "" {
		d, err := strconv.ParseInt(s, 10, 64)
		require.NoError(b, err)
		days = d
	}
	for _, mode := range []string{"seeded", "imported"} {
		b.Run(mode, func(b *testing.B) { benchBackfill(b, days, mode == "imported") })
	}
}

func benchBackfill(b *testing.B, days int64, marked bool) {
	const nSeries = 20
	step := minute
	if s := os.Getenv("KAIROS_BENCH_BACKFILL_STEP"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(b, err)
		step = d.Milliseconds()
	}
	end := int64(1_000_000) * hour // the latest closed unit's end
	clk := &clock{}
	clk.set(end + 15*minute)
	eng, err := pebblekv.Open(b.TempDir(), pebblekv.Options{}, nil)
	require.NoError(b, err)
	b.Cleanup(func() { eng.Close() })
	require.NoError(b, eng.Setup(b.Context()))
	res := []rollup.Resolution{m5, h1, rollup.Resolution(6 * time.Hour)}
	var span time.Duration // the default unless KAIROS_BENCH_BACKFILL_SPAN is set
	if s := os.Getenv("KAIROS_BENCH_BACKFILL_SPAN"); s != "" {
		var err error
		span, err = time.ParseDuration(s)
		require.NoError(b, err)
	}
	cfg := func(owner string) rollupjob.Config {
		return rollupjob.Config{Resolutions: res, Delay: 10 * time.Minute, Owner: owner, Now: clk.Now, DutyCycle: 1, Span: span}
	}
	g := &guard{}
	seedOpts := kairosstore.Options{Now: clk.Now}
	if marked {
		seedOpts.Guard = g
	}
	seedStore, err := kairosstore.Open(b.Context(), eng, seedOpts, nil, prometheus.NewRegistry())
	require.NoError(b, err)
	imp, err := rollupjob.New(seedStore, cfg("import"), nil, prometheus.NewRegistry())
	require.NoError(b, err)
	g.j.Store(imp)
	var ls []labels.Labels
	for s := range nSeries {
		ls = append(ls, labels.FromStrings("__name__", fmt.Sprintf("bench_%d", s%2), "instance", fmt.Sprint(s), "job", "node"))
	}
	start := end - days*24*hour
	raw := 0
	// A day of every series per commit, as an import writes a slice.
	seed := func(count bool) {
		for d := start; d < end; d += 24 * hour {
			app := seedStore.NewAppender()
			for i, l := range ls {
				c := 0.0
				for t := d + step; t <= d+24*hour; t += step {
					c += float64((t/step+int64(i))%5) + 1
					_, err := app.Append(0, l, t, c)
					require.NoError(b, err)
					if count {
						raw++
					}
				}
			}
			require.NoError(b, app.Commit(b.Context()))
		}
	}
	if !marked {
		seed(true)
	}
	st, err := kairosstore.Open(b.Context(), eng, kairosstore.Options{Now: clk.Now}, nil, prometheus.NewRegistry())
	require.NoError(b, err)
	b.ResetTimer()
	var cpu time.Duration
	bucketsWritten := 0.0
	for i := range b.N {
		b.StopTimer()
		clk.set(clk.ms.Load() + time.Minute.Milliseconds())
		for _, r := range res {
			require.NoError(b, st.DeleteServiceValue(b.Context(), rollup.Service, rollup.ServiceKey, rollup.DoneKey(r), clk.Now().UnixMilli()))
		}
		require.NoError(b, st.DeleteServiceValue(b.Context(), rollup.Service, rollup.ServiceKey, "lease", clk.Now().UnixMilli()))
		clk.set(clk.ms.Load() + 1)
		reg := prometheus.NewRegistry()
		j, err := rollupjob.New(st, cfg(fmt.Sprint("bench", i)), nil, reg)
		require.NoError(b, err)
		steps := func() {
			for {
				worked, err := j.Step(b.Context())
				require.NoError(b, err)
				if !worked {
					return
				}
			}
		}
		if marked {
			// The serving job has rolled up the present when the import
			// comes; the import's writes store the marks.
			worked, err := j.Step(b.Context())
			require.NoError(b, err)
			require.True(b, worked)
			clk.set(clk.ms.Load() + 1)
			seed(i == 0)
		}
		b.StartTimer()
		before := cpuTime()
		steps()
		if marked {
			clk.set(clk.ms.Load() + 31*time.Second.Milliseconds()) // the marks ripen
			steps()
		}
		cpu += cpuTime() - before
		n := &node{reg: reg}
		for _, r := range res {
			bucketsWritten += float64(buckets(n, r))
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(raw)*n/cpu.Seconds(), "raw/cpu-s")
	b.ReportMetric(float64(raw)*n/b.Elapsed().Seconds(), "raw/s")
	b.ReportMetric(bucketsWritten/n, "buckets/op")
	b.ReportMetric(float64(raw), "raw/op")
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
