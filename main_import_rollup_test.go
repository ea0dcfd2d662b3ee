package main

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/config"
	"github.com/kairos-remote/kairos-adapter/importer"
	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/rollup"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

// TestImportIsRolledUp: an import into a store whose serving adapter's
// job has rolled up a day stores recomputation marks for what it writes
// into that day (the import's store has the job as its Guard, as a serving
// adapter's has), and the serving job, at its next steps, recomputes those
// units and backfills the imported metric it has not listed yet below the
// day; then every rollup cell is what the raw series give. Before, the
// import wrote without a Guard and only logged a recompute request to
// send: the rolled-up day kept its rollups without the imported samples.
func TestImportIsRolledUp(t *testing.T) {
	ctx := t.Context()
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	require.NoError(t, eng.Setup(ctx))
	cfg := config.Default()
	cfg.Rollup.Delay = 0
	logger := slog.New(slog.DiscardHandler)

	// The serving adapter: its store, Guard and job, stepped by hand.
	rc, err := rollupjob.ConfigFrom(cfg)
	require.NoError(t, err)
	rc.MarkSlack = 100 * time.Millisecond // not 30 s of waiting for the marks to ripen
	rc.DutyCycle = 1
	rolls, err := rollupjob.NewRunner(rc, logger, prometheus.NewRegistry())
	require.NoError(t, err)
	opts := storeOptions(cfg)
	opts.Guard = rolls
	served, err := kairosstore.Open(ctx, eng, opts, logger, prometheus.NewRegistry())
	require.NoError(t, err)
	require.NoError(t, rolls.MarkOnly(served))
	j := rolls.Job()
	run := func() {
		t.Helper()
		for i := 0; ; i++ {
			require.Less(t, i, 200, "the job does not finish")
			worked, err := j.Step(ctx)
			require.NoError(t, err)
			if !worked {
				return
			}
		}
	}

	unit := 6 * hourMs // the largest default resolution
	now := time.Now().UnixMilli()
	end := now - now%unit // closed, with no delay
	raw := map[string]*rawSeries{}
	add := func(ls labels.Labels, from, to int64) {
		s := raw[ls.String()]
		if s == nil {
			s = &rawSeries{ls: ls}
			raw[ls.String()] = s
		}
		for ts := from + 60_000; ts <= to; ts += 60_000 {
			s.ts, s.vs = append(s.ts, ts), append(s.vs, float64(ts/60_000%89))
		}
	}
	a := labels.FromStrings("__name__", "served", "job", "a")
	add(a, end-24*hourMs, end)
	app := served.NewAppender()
	for i, ts := range raw[a.String()].ts {
		_, err := app.Append(0, a, ts, raw[a.String()].vs[i])
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit(ctx))
	time.Sleep(2 * rc.MarkSlack) // the write's own marks ripen, and go
	run()
	requireSame(t, expectedRollups(raw, end), storedRollups(t, served, "served"))

	// The import: a series of the served metric inside the rolled-up day,
	// and a metric the job has not listed, below the day and inside it.
	b := labels.FromStrings("__name__", "served", "job", "b")
	add(b, end-14*hourMs, end-10*hourMs)
	fresh := labels.FromStrings("__name__", "fresh", "job", "c")
	add(fresh, end-36*hourMs, end-30*hourMs)
	add(fresh, end-7*hourMs, end-5*hourMs)
	var block []storage.Series
	for _, ls := range []labels.Labels{b, fresh} {
		s := raw[ls.String()]
		var smps []chunks.Sample
		for i := range s.ts {
			smps = append(smps, floatSample{t: s.ts[i], f: s.vs[i]})
		}
		block = append(block, storage.NewListSeries(ls, smps))
	}
	dir := t.TempDir()
	_, err = tsdb.CreateBlock(block, dir, 48*hourMs, logger)
	require.NoError(t, err)
	imp, err := importStore(ctx, eng, cfg, logger)
	require.NoError(t, err)
	sum, err := importer.ImportTSDB(ctx, imp, importer.TSDB{Dir: dir}, importer.Options{Start: timeparam.FloorMilli(timeparam.Min), End: timeparam.FloorMilli(timeparam.Max)}, logger)
	require.NoError(t, err)
	require.Equal(t, int64(len(raw[b.String()].ts)+len(raw[fresh.String()].ts)), sum.Samples)

	marked := []string{}
	require.NoError(t, served.ServiceKeys(ctx, rollup.Service, rollup.ServiceKey, "dirty.", func(k string) error {
		marked = append(marked, k)
		return nil
	}))
	require.NotEmpty(t, marked, "the import stores recomputation marks")
	for _, m := range []string{"served", "fresh"} {
		require.True(t, strings.Contains(strings.Join(marked, " "), m), "a mark of %s among %v", m, marked)
	}

	time.Sleep(2 * rc.MarkSlack) // the marks ripen
	run()
	from, _, ok := doneRange(t, served, rollup.Resolution(5*time.Minute))
	require.True(t, ok)
	require.LessOrEqual(t, from, end-36*hourMs+5*60_000, "backfilled down to the imported metric's oldest sample")
	requireSame(t, expectedRollups(raw, end), storedRollups(t, served, "served", "fresh"))
}

// requireSame fails with the cells missing and those in excess, at most
// ten of each.
func requireSame(t *testing.T, want, got []string) {
	t.Helper()
	var missing, extra []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	if len(missing)+len(extra) > 0 {
		t.Fatalf("%d rollup cells missing, %d in excess; first ones:\nmissing %s\nextra %s", len(missing), len(extra),
			strings.Join(missing[:min(10, len(missing))], "\n"), strings.Join(extra[:min(10, len(extra))], "\n"))
	}
}

const hourMs = int64(time.Hour / time.Millisecond)

type rawSeries struct {
	ls labels.Labels
	ts []int64
	vs []float64
}

type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.f }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Copy() chunks.Sample           { return s }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }

// expectedRollups is every rollup cell of raw with bucket end at or before
// to, computed by rollup.Compute over each series whole.
func expectedRollups(raw map[string]*rawSeries, to int64) []string {
	var out []string
	for _, s := range raw {
		for _, r := range []rollup.Resolution{rollup.Resolution(5 * time.Minute), rollup.Resolution(time.Hour), rollup.Resolution(6 * time.Hour)} {
			for _, p := range rollup.Compute(r, math.MinInt64+1, to, s.ts, s.vs) {
				for _, a := range rollup.Aggregates {
					out = append(out, fmt.Sprintf("%s @%d %g", rollup.SeriesLabels(s.ls, r, a), p.End, p.Value(a)))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// storedRollups is every rollup cell of metrics in the store, in
// expectedRollups' form.
func storedRollups(t *testing.T, st *kairosstore.Store, metrics ...string) []string {
	t.Helper()
	q, err := st.Querier(0, math.MaxInt64)
	require.NoError(t, err)
	defer q.Close()
	var out []string
	for _, m := range metrics {
		set := q.Select(t.Context(), true, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, m+rollup.NameSuffix))
		var it chunkenc.Iterator
		for set.Next() {
			it = set.At().Iterator(it)
			for it.Next() == chunkenc.ValFloat {
				ts, v := it.At()
				out = append(out, fmt.Sprintf("%s @%d %g", set.At().Labels(), ts, v))
			}
			require.NoError(t, it.Err())
		}
		require.NoError(t, set.Err())
	}
	sort.Strings(out)
	return out
}

func doneRange(t *testing.T, st *kairosstore.Store, r rollup.Resolution) (int64, int64, bool) {
	t.Helper()
	v, ok, err := st.ServiceValue(t.Context(), rollup.Service, rollup.ServiceKey, rollup.DoneKey(r))
	require.NoError(t, err)
	if !ok {
		return 0, 0, false
	}
	from, to, err := rollup.ParseDone(v)
	require.NoError(t, err)
	return from, to, true
}
