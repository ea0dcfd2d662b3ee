package queryapi

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/internal/rolluptest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
)

// startStopData is counters scraped every 60 s that start, stop or pause
// inside rollup buckets (but one at a bucket's end): runs of [from, to) each,
// a run's first value given (0: a counter that restarts; -1: it goes on).
// The pauses leave a 6h bucket empty, one for less than a day (windows of
// a day hold both sides), one for more.
func startStopData(t0 int64) []rolluptest.Series {
	const min, hour, day = int64(60_000), int64(3_600_000), int64(86_400_000)
	promMin := int64(math.MinInt64/1000+62135596801) * 1000 // -292273086-05-16T16:47:06Z
	type run struct {
		from, to int64
		first    float64
	}
	series := []struct {
		name string
		runs []run
		// pre are samples before the first run: a stale marker, NaN, a
		// sample at Prometheus's minimum time.
		pre [][2]float64
	}{
		{name: "start", runs: []run{{t0 + 3*day + 2*hour + 17*min + 13_000, t0 + 12*day, 5000}}},
		// kairosload's series: the first sample at a midnight, the last of
		// its bucket, alone in the windows that end there.
		{name: "start_midnight", runs: []run{{t0 + 5*day, t0 + 12*day, 300}}},
		{name: "start_zero", runs: []run{{t0 + 4*day + 7*hour + 3*min + 7_000, t0 + 12*day, 0}}},
		{name: "stop", runs: []run{{t0 + 7_000, t0 + 6*day + 4*hour + 41*min + 7_000, 100}}},
		{name: "gap_long", runs: []run{{t0 + 11_000, t0 + 5*day + 3*hour + 10*min, 100}, {t0 + 6*day + 14*hour + 47*min + 11_000, t0 + 12*day, 0}}},
		{name: "gap_short", runs: []run{{t0 + 13_000, t0 + 7*day + 5*hour + 20*min, 100}, {t0 + 7*day + 12*hour + 35*min + 13_000, t0 + 12*day, -1}}},
		{name: "stale_start", runs: []run{{t0 + 2*day + 5*hour + 32*min + 3_000, t0 + 12*day, 40}},
			pre: [][2]float64{{float64(t0 + 2*day + 5*hour + 30*min), math.Float64frombits(value.StaleNaN)}, {float64(t0 + 2*day + 5*hour + 31*min), math.NaN()}}},
		{name: "min_time", runs: []run{{t0 + 3*day + 9*hour + 12*min + 1_000, t0 + 12*day, 7}}, pre: [][2]float64{{float64(promMin), 3}}},
	}
	var out []rolluptest.Series
	for i, sd := range series {
		s := rolluptest.Series{Labels: labels.FromStrings("__name__", "c_total", "s", sd.name)}
		for _, p := range sd.pre {
			s.T, s.V = append(s.T, int64(p[0])), append(s.V, p[1])
		}
		v := 0.0
		for _, rn := range sd.runs {
			if rn.first >= 0 {
				v = rn.first
			}
			for t := rn.from; t < rn.to; t += min {
				s.T, s.V = append(s.T, t), append(s.V, v)
				// 90 a minute, give or take 2 %, by a rule of the sample.
				v += 90 * (0.98 + 0.04*float64((t/min*7919+int64(i))%101)/100)
			}
		}
		out = append(out, s)
	}
	return out
}

// TestRollupCounterStartStop compares rate and increase over rollups
// (max_source_resolution=auto) with raw (=0), point by point, for counters
// that start, stop and pause inside buckets: the same points, and every
// window that holds a run's first or last sample answered as raw; the
// others within the planner's 1 %, plus a scrape interval over the range
// where a window meets raw samples read around a start or a stop.
func TestRollupCounterStartStop(t *testing.T) {
	if testing.Short() {
		cassandratest.SkipUnlessCI(t, "12 days of samples, not under -short")
	}
	for _, rolled := range [][2]int64{{0, 12}, {4, 9}} {
		t.Run("days "+strconv.FormatInt(rolled[0], 10)+"-"+strconv.FormatInt(rolled[1], 10), func(t *testing.T) {
			startStop(t, rolled[0], rolled[1])
		})
	}
}

func startStop(t *testing.T, doneFrom, doneTo int64) {
	ctx := context.Background()
	eng := openEngine(t, "pebble")
	reg := prometheus.NewRegistry()
	st, err := kairosstore.Open(ctx, eng, kairosstore.Options{RowWidth: 7 * 24 * time.Hour}, nil, reg)
	require.NoError(t, err)
	day := int64(24 * time.Hour / time.Millisecond)
	t0 := 1_700_000_000_000 / day * day
	data := startStopData(t0)
	// A run's first and last sample, where raw extrapolates by half its spacing.
	edges := map[string][]int64{}
	for _, s := range data {
		key := labels.FromStrings("s", s.Labels.Get("s")).String()
		app := st.NewAppender()
		for i := range s.T {
			require.NoError(t, errOf(app.Append(0, s.Labels, s.T[i], s.V[i])))
			if math.IsNaN(s.V[i]) || s.T[i] < t0 {
				continue
			}
			if i == 0 || s.T[i]-s.T[i-1] > 60_000 || math.IsNaN(s.V[i-1]) {
				edges[key] = append(edges[key], s.T[i])
			}
			if i == len(s.T)-1 || s.T[i+1]-s.T[i] > 60_000 {
				edges[key] = append(edges[key], s.T[i])
			}
		}
		require.NoError(t, app.Commit(ctx))
	}
	require.NoError(t, rolluptest.Write(ctx, st, eng, testResolutions, t0+doneFrom*day, t0+doneTo*day, data))
	h := mount(New(st, Options{RollupResolutions: testResolutions}, nil, prometheus.NewRegistry()), http.NotFoundHandler())

	start, end := t0+day, t0+11*day
	for _, q := range []struct {
		expr string
		rng  time.Duration
	}{
		{`rate(c_total[1h])`, time.Hour},
		{`increase(c_total[1d])`, 24 * time.Hour},
		{`increase(c_total[6h])`, 6 * time.Hour},
		{`sum(increase(c_total[1d]))`, 24 * time.Hour},
		// Grafana's $__rate_interval at 6h: windows start a minute before
		// a bucket, in raw samples.
		{`rate(c_total[6h1m])`, 6*time.Hour + time.Minute},
	} {
		for _, step := range []time.Duration{6 * time.Hour, time.Hour} {
			form := url.Values{"query": {q.expr}, "start": {strconv.FormatInt(start/1000, 10)}, "end": {strconv.FormatInt(end/1000, 10)}, "step": {step.String()}}
			c1 := cellCounts(t, reg)
			planned := rangeResult(t, h, form)
			c2 := cellCounts(t, reg)
			require.Positive(t, c2["rollup"]-c1["rollup"], "%s at %s reads rollups", q.expr, step)
			form.Set("max_source_resolution", "0")
			raw := rangeResult(t, h, form)
			require.NotEmpty(t, raw, "%s at %s", q.expr, step)

			// Every difference is counted and the worst logged, so that a
			// failure shows how far off it is.
			bad, points, worst, worstAt := 0, 0, 0.0, ""
			fail := func(format string, args ...any) {
				if bad++; bad <= 3 {
					t.Errorf(format, args...)
				}
			}
			for _, ls := range keys(planned) {
				if _, ok := raw[ls]; !ok {
					fail("%s at %s: %s has points from rollups, none from raw", q.expr, step, ls)
				}
			}
			tolerance := 0.01 + 60/q.rng.Seconds()
			for ls, want := range raw {
				got := map[float64]float64{}
				for _, p := range planned[ls] {
					got[p[0]] = p[1]
				}
				if len(got) != len(want) {
					fail("%s at %s %s: %d points from rollups, %d from raw", q.expr, step, ls, len(got), len(want))
				}
				for _, p := range want {
					points++
					at := int64(p[0] * 1000)
					w, g, ok := p[1], 0.0, false
					if g, ok = got[p[0]]; !ok {
						fail("%s at %s %s at %s: no point from rollups", q.expr, step, ls, time.UnixMilli(at).UTC())
						continue
					}
					if math.IsNaN(w) || math.IsNaN(g) {
						if !math.IsNaN(w) || !math.IsNaN(g) {
							fail("%s at %s %s at %s: raw %v, rollups %v", q.expr, step, ls, time.UnixMilli(at).UTC(), w, g)
						}
						continue
					}
					rel := math.Abs(g-w) / math.Max(math.Abs(w), math.Abs(g))
					if rel > worst {
						worst, worstAt = rel, fmt.Sprintf("%s at %s (%v against %v)", ls, time.UnixMilli(at).UTC().Format(time.DateTime), g, w)
					}
					edge := false
					for _, e := range edges[ls] {
						edge = edge || e > at-q.rng.Milliseconds() && e <= at
					}
					if edge && rel > 1e-9 {
						fail("%s at %s %s at %s: raw %v, rollups %v; a window where the series starts or stops is read raw", q.expr, step, ls, time.UnixMilli(at).UTC(), w, g)
					} else if rel > tolerance {
						fail("%s at %s %s at %s: raw %v, rollups %v", q.expr, step, ls, time.UnixMilli(at).UTC(), w, g)
					}
				}
			}
			t.Logf("%s at %s: %d raw points, %d differences, the largest %.3g %%, %s", q.expr, step, points, bad, 100*worst, worstAt)
		}
	}
}
