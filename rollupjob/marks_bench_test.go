package rollupjob_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/rollup"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

// BenchmarkLateWriteMarks is what the recomputation marks cost a write: a
// commit of Prometheus's default shape (2,000 samples: 10 metrics, 20
// series each, 10 samples per series) into the open unit (present: no
// mark), into a rolled-up unit with the marks stored (stored: one
// service_index write per metric, each commit MarkSlack/4 after the last),
// and into a rolled-up unit again within MarkSlack/4 (reused: the marks of
// the commit before stand). On the embedded engine, and on Cassandra when
// KAIROS_TEST_CASSANDRA names a node.
func BenchmarkLateWriteMarks(b *testing.B) {
	engines := map[string]func(b *testing.B) engine.Engine{
		"pebble": func(b *testing.B) engine.Engine {
			eng, err := pebblekv.Open(b.TempDir(), pebblekv.Options{}, nil)
			require.NoError(b, err)
			b.Cleanup(func() { eng.Close() })
			require.NoError(b, eng.Setup(b.Context()))
			return eng
		},
		"cassandra": func(b *testing.B) engine.Engine {
			addr, keyspace := cassandratest.Keyspace(b)
			return openCassandra(b, addr, keyspace)
		},
	}
	for _, name := range []string{"pebble", "cassandra"} {
		b.Run(name, func(b *testing.B) {
			for _, mode := range []string{"present", "stored", "reused"} {
				b.Run(mode, func(b *testing.B) { benchLateWrite(b, engines[name](b), mode) })
			}
		})
	}
}

func benchLateWrite(b *testing.B, eng engine.Engine, mode string) {
	clk := &clock{}
	clk.set(t0)
	gate := newGate(eng)
	g := &timedGuard{}
	st, err := kairosstore.Open(b.Context(), gate, kairosstore.Options{Now: clk.Now, Guard: g}, nil, prometheus.NewRegistry())
	require.NoError(b, err)
	j, err := rollupjob.New(st, rollupjob.Config{Resolutions: []rollup.Resolution{m5, h1}, Delay: 10 * time.Minute, Owner: "bench", Now: clk.Now}, nil, prometheus.NewRegistry())
	require.NoError(b, err)
	g.j.Store(j)
	var series []labels.Labels
	for m := range 10 {
		for s := range 20 {
			series = append(series, labels.FromStrings("__name__", fmt.Sprintf("bench_%d", m), "instance", fmt.Sprint(s), "job", "node"))
		}
	}
	base := int64(999 * hour) // the unit ending at 1000h, closed at t0
	if mode == "present" {
		base = t0 - 10*minute
	}
	commit := func(i int) {
		app := st.NewAppender()
		for _, ls := range series {
			for k := range 10 {
				// Every commit writes new cells, ten seconds apart
				// within the hour from base.
				_, err := app.Append(0, ls, base+int64((i*10+k)%360)*10_000, float64(i))
				require.NoError(b, err)
			}
		}
		require.NoError(b, app.Commit(b.Context()))
	}
	commit(0) // the series and index rows exist: what is measured is the marks
	marks := gate.setService.Load()
	g.spent = 0
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		// The clock moves on in every mode: a commit in the same
		// millisecond as the last one would meet its cells' ties
		// (§5.4), which the embedded engine resolves by reading.
		step := int64(1)
		if mode == "stored" {
			step = (30*time.Second/4 + time.Second).Milliseconds()
		}
		clk.set(clk.ms.Load() + step)
		commit(i)
	}
	b.StopTimer()
	b.ReportMetric(float64(gate.setService.Load()-marks)/float64(b.N), "marks/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2000), "ns/sample")
	b.ReportMetric(float64(g.spent.Nanoseconds())/float64(b.N), "guard-ns/op")
}

// timedGuard is guard, timed: the write's time in the marks alone, apart
// from the cells' write, whose time a busy machine makes vary more.
type timedGuard struct {
	guard
	spent time.Duration
}

func (g *timedGuard) BeforeChange(ctx context.Context, cs []kairosstore.Change) error {
	start := time.Now()
	defer func() { g.spent += time.Since(start) }()
	return g.guard.BeforeChange(ctx, cs)
}

func (g *timedGuard) AfterChange(ctx context.Context, cs []kairosstore.Change, began time.Time) error {
	start := time.Now()
	defer func() { g.spent += time.Since(start) }()
	return g.guard.AfterChange(ctx, cs, began)
}
