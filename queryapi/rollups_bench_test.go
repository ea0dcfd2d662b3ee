package queryapi

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/rolluptest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// BenchmarkLongRange is issue 23's figure: a query_range over a year at
// Grafana's step for it (a year over 1,000 points is 31,536 s, which
// Grafana rounds to 6h: 1,460 points) over 100 counters of 60 s samples
// (52.6 M), as Grafana sends $__rate_interval (the interval plus a scrape
// interval) and $__interval, with rollups (5m, 1h and 6h, all written) and
// with max_source_resolution=0 (raw cells, windows still applied), on both
// engines. It reports the cells read per query (raw and rollup) and the
// data_points slices (on Cassandra a round trip each) beside the time. The
// rollup side runs under the default --query.max-samples (50 M), the raw
// side without a limit. KAIROS_BENCH_CASSANDRA_SERIES scales the
// Cassandra side down (writing 52 M samples to one shared node takes
// long), and KAIROS_BENCH_PEBBLE_SERIES the embedded side; 0 skips a side.
//
//	go test -run '^$' -bench LongRange -benchtime 3x -timeout 2h ./queryapi/
func BenchmarkLongRange(b *testing.B) {
	for _, name := range []string{"pebble", "cassandra"} {
		b.Run("engine="+name, func(b *testing.B) {
			n := benchSeries(b, "KAIROS_BENCH_"+strings.ToUpper(name)+"_SERIES")
			if n == 0 {
				b.Skip("no series asked for")
			}
			sc := &sliceCounter{Engine: openEngine(b, name)}
			var eng engine.Engine = sc
			if name == "pebble" {
				eng = doublesCounter{sc}
			}
			longRange(b, sc, eng, n)
		})
	}
}

// benchSeries is the series count env names, 100 by default.
func benchSeries(b *testing.B, env string) int {
	s := os.Getenv(env)
	if s == "" {
		return 100
	}
	n, err := strconv.Atoi(s)
	require.NoError(b, err)
	return n
}

// sliceCounter counts the data_points slices read: on Cassandra a round
// trip each.
type sliceCounter struct {
	engine.Engine
	slices atomic.Int64
}

func (e *sliceCounter) Cells(ctx context.Context, key []byte, lo, hi uint32, fn func(uint32, []byte) error) error {
	e.slices.Add(1)
	return e.Engine.Cells(ctx, key, lo, hi, fn)
}

// CellsOfRows passes the embedded engine's read of several rows through
// one iterator on, so that the benchmark measures the store's path, and
// counts each row read through it as a slice.
func (e *sliceCounter) CellsOfRows(ctx context.Context, read func(cells func([]byte, uint32, uint32, func(uint32, []byte) error) error) error) error {
	counted := func(cells func([]byte, uint32, uint32, func(uint32, []byte) error) error) error {
		return read(func(key []byte, lo, hi uint32, fn func(uint32, []byte) error) error {
			e.slices.Add(1)
			return cells(key, lo, hi, fn)
		})
	}
	if r, ok := e.Engine.(interface {
		CellsOfRows(context.Context, func(func([]byte, uint32, uint32, func(uint32, []byte) error) error) error) error
	}); ok {
		return r.CellsOfRows(ctx, counted)
	}
	return counted(func(key []byte, lo, hi uint32, fn func(uint32, []byte) error) error {
		return e.Engine.Cells(ctx, key, lo, hi, fn)
	})
}

// doublesCounter is sliceCounter with the embedded engine's bulk read of
// rollup rows passed on, so that the store reads them as it does in the
// adapter, each row counted as a slice.
type doublesCounter struct{ *sliceCounter }

func (e doublesCounter) CellDoublesOfRows(ctx context.Context, read func(doubles func([]byte, uint32, uint32, *[]int64, *[]float64, func() error, func(uint32, []byte) error) error) error) error {
	return e.Engine.(*pebblekv.Engine).CellDoublesOfRows(ctx, func(doubles func([]byte, uint32, uint32, *[]int64, *[]float64, func() error, func(uint32, []byte) error) error) error {
		return read(func(key []byte, lo, hi uint32, cols *[]int64, vals *[]float64, flush func() error, other func(uint32, []byte) error) error {
			e.slices.Add(1)
			return doubles(key, lo, hi, cols, vals, flush, other)
		})
	})
}

func longRange(b *testing.B, sc *sliceCounter, eng engine.Engine, series int) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	st, err := kairosstore.Open(ctx, eng, kairosstore.Options{}, nil, reg)
	require.NoError(b, err)
	day := int64(24 * time.Hour / time.Millisecond)
	t0 := 1_700_000_000_000 / day * day
	end := t0 + 366*day
	rnd := rand.New(rand.NewPCG(3, 4))
	t1 := time.Now()
	for i := range series {
		s := rolluptest.Series{Labels: labels.FromStrings("__name__", "x", "job", fmt.Sprint("j", i%4), "instance", fmt.Sprint("i", i))}
		v := 0.0
		for t := t0 + int64(i)*100; t < end; t += 60_000 {
			if rnd.IntN(100_000) == 0 {
				v = 0 // a restart
			}
			v += 5 + rnd.Float64()
			s.T, s.V = append(s.T, t), append(s.V, v)
		}
		for lo := 0; lo < len(s.T); lo += 50_000 {
			app := st.NewAppender()
			for k := lo; k < min(lo+50_000, len(s.T)); k++ {
				require.NoError(b, errOf(app.Append(0, s.Labels, s.T[k], s.V[k])))
			}
			require.NoError(b, app.Commit(ctx))
		}
		require.NoError(b, rolluptest.Write(ctx, st, eng, testResolutions, t0, end, []rolluptest.Series{s}))
	}
	b.Logf("%d series of a year written with their rollups in %s", series, time.Since(t1).Round(time.Second))
	apis := map[string]http.Handler{
		"rollups": mount(New(st, withBudget(Options{RollupResolutions: testResolutions, MaxSamples: 50_000_000}), nil, prometheus.NewRegistry()), http.NotFoundHandler()),
		"raw":     mount(New(st, Options{RollupResolutions: testResolutions}, nil, prometheus.NewRegistry()), http.NotFoundHandler()),
	}
	for _, q := range []string{`sum by (job) (rate(x[6h1m]))`, `sum by (job) (rate(x[1h]))`, `max_over_time(x[6h])`, `avg by (job) (avg_over_time(x[6h]))`, `sum by (job) (rate(x[5m]))`} {
		for _, read := range []string{"rollups", "raw"} {
			b.Run(fmt.Sprintf("q=%s/read=%s", q, read), func(b *testing.B) {
				form := url.Values{"query": {q}, "start": {strconv.FormatInt((t0+day)/1000, 10)}, "end": {strconv.FormatInt(end/1000, 10)}, "step": {"6h"}}
				if read == "raw" {
					form.Set("max_source_resolution", "0")
				}
				before, slices := cellCounts(b, reg), sc.slices.Load()
				for b.Loop() {
					if got := get(b, apis[read], http.MethodPost, "/api/v1/query_range", form); got.code != http.StatusOK {
						b.Fatal(got.body)
					}
				}
				after := cellCounts(b, reg)
				b.ReportMetric(float64(sc.slices.Load()-slices)/float64(b.N), "slices/op")
				b.ReportMetric((after["raw"]-before["raw"])/float64(b.N), "raw_cells/op")
				b.ReportMetric((after["rollup"]-before["rollup"])/float64(b.N), "rollup_cells/op")
			})
		}
	}
}
