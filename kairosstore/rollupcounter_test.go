package kairosstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/rolluptest"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/readhint"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// TestCounterReadHostile reads a counter through its rollups where it
// starts, stops and pauses around values of NaN, ±Inf and 1e300, with
// samples at Prometheus's minimum and maximum times, over ranges and steps
// from 1 ms to 300 years: ascending points, no more than the raw samples
// and two a bucket, and the raw samples themselves wherever a window sees
// the series start or stop.
func TestCounterReadHostile(t *testing.T) {
	ctx := context.Background()
	eng := openPebble(t)
	reg := prometheus.NewRegistry()
	st, err := ks.Open(ctx, eng, ks.Options{RowWidth: 6 * time.Hour}, nil, reg)
	require.NoError(t, err)
	day := 24 * hour
	t0 := 1_700_000_000_000 / day * day
	promMin := int64(math.MinInt64/1000+62135596801) * 1000     // -292273086-05-16T16:47:06Z
	promMax := int64(math.MaxInt64/1000-62135596801)*1000 + 999 // 292277025-08-18T07:12:54.999Z
	c := rolluptest.Series{Labels: labels.FromStrings("__name__", "c")}
	add := func(t int64, v float64) { c.T, c.V = append(c.T, t), append(c.V, v) }
	add(promMin, 1)
	add(t0+3*hour+17*60_000, math.Float64frombits(value.StaleNaN))
	add(t0+3*hour+18*60_000, math.NaN())
	v := 0.0
	for ts := t0 + 3*hour + 19*60_000; ts < t0+2*day; ts += 60_000 {
		switch {
		case ts > t0+20*hour && ts < t0+29*hour: // a pause
			continue
		case ts == t0+10*hour+19*60_000:
			add(ts, math.Inf(1))
		case ts == t0+10*hour+20*60_000:
			add(ts, math.Inf(-1))
		case ts == t0+33*hour+19*60_000:
			add(ts, 1e300)
		default:
			v += 1.5
			add(ts, v)
		}
	}
	add(promMax, 2)
	appendSeries(t, st, []rolluptest.Series{c})
	h := rollup.Resolution(time.Hour)
	require.NoError(t, rolluptest.Write(ctx, st, eng, []rollup.Resolution{h}, t0+hour, t0+2*day, []rolluptest.Series{c}))

	defer func() { require.Positive(t, cellsRead(t, reg, "rollup")) }()
	const years300 = int64(300 * 365.25 * 24 * 3600 * 1000)
	for _, hc := range []struct {
		name               string
		start, end, step   int64
		rng, windowsMillis int64
	}{
		{"all time, range 1ms", promMin, promMax, 0, 1, 0},
		{"all time, range 300y", promMin, promMax, 0, years300, 0},
		{"all time, step 300y", promMin, promMax, years300, hour, hour},
		{"two days, step 1ms", t0, t0 + 2*day, 1, hour, 0},
		{"two days, range 300y", t0, t0 + 2*day, hour, years300, 0},
		{"to the maximum time", t0 + 5*hour, promMax, 6 * hour, hour, hour},
		{"from the minimum time", promMin, t0 + 30*hour, 6 * hour, 4 * hour, 4 * hour},
	} {
		t.Run(hc.name, func(t *testing.T) {
			q, err := st.Querier(hc.start, hc.end)
			require.NoError(t, err)
			defer q.Close()
			hints := &storage.SelectHints{Start: hc.start, End: hc.end, Step: hc.step, Range: hc.rng}
			p := readhint.Hint{Aggregate: rollup.Counter, Resolution: h, WindowMillis: hc.windowsMillis}
			ss := q.Select(readhint.With(ctx, p), false, hints, labels.MustNewMatcher(labels.MatchEqual, "__name__", "c"))
			var ts []int64
			var vs []float64
			for ss.Next() {
				it := ss.At().Iterator(nil)
				for it.Next() != 0 {
					t, v := it.At()
					ts, vs = append(ts, t), append(vs, v)
				}
				require.NoError(t, it.Err())
			}
			require.NoError(t, ss.Err())
			require.NotEmpty(t, ts)
			for i := 1; i < len(ts); i++ {
				require.Less(t, ts[i-1], ts[i], "ascending")
			}
			require.LessOrEqual(t, len(ts), len(c.T)+2*48)
			if hc.rng == hour && hc.start == t0 {
				// Covered hours between the start and the pause: from rollups,
				// a point 1 ms after each bucket's start.
				require.Contains(t, ts, t0+13*hour+1)
			}
			// The series' first samples in the range are the raw ones: a window
			// holding them sees the series start.
			if hc.start <= t0 && hc.end >= t0+4*hour {
				want := []int64{t0 + 3*hour + 18*60_000, t0 + 3*hour + 19*60_000, t0 + 3*hour + 20*60_000}
				if hc.start == promMin {
					want = append([]int64{promMin}, want...)
				}
				require.Equal(t, want, ts[:len(want)])
				require.True(t, math.IsNaN(vs[len(want)-3]), "NaN as raw")
			}
		})
	}
}
