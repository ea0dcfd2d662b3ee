// Package rolluptest writes rollups for tests of the read side, as the
// rollup job would: rollup.Compute over samples the test generated, through
// the store's Appender, and the progress key that makes reads use them.
package rolluptest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// Series is one raw float series: timestamps ascending, and its values.
type Series struct {
	Labels labels.Labels
	T      []int64
	V      []float64
}

// Write rolls up every series at each resolution for the buckets ending in
// [from, to] and records that range as done (rollup.DoneKey).
func Write(ctx context.Context, st *kairosstore.Store, eng engine.Engine, res []rollup.Resolution, from, to int64, series []Series) error {
	for _, r := range res {
		app := st.NewAppender()
		n := 0
		for _, s := range series {
			for _, p := range rollup.Compute(r, from-r.Millis(), to, s.T, s.V) {
				for _, a := range rollup.Aggregates {
					if _, err := app.Append(0, rollup.SeriesLabels(s.Labels, r, a), p.End, p.Value(a)); err != nil {
						return fmt.Errorf("append rollup of %s: %w", s.Labels, err)
					}
				}
				if n++; n%10000 == 0 {
					if err := app.Commit(ctx); err != nil {
						return err
					}
					app = st.NewAppender()
				}
			}
		}
		if err := app.Commit(ctx); err != nil {
			return err
		}
		if err := eng.SetServiceValue(ctx, rollup.Service, rollup.ServiceKey, rollup.DoneKey(r), rollup.FormatDone(from, to), time.Now().UnixMilli()); err != nil {
			return err
		}
	}
	return nil
}

// PromMin and PromMax are Prometheus's minimum and maximum times in
// milliseconds, the ends a hostile series reaches.
var (
	PromMin = int64(math.MinInt64/1000+62135596801) * 1000
	PromMax = int64(math.MaxInt64/1000-62135596801)*1000 + 999
)

// Hostile is a random series named name (a counter if name is "c", with
// resets; a gauge otherwise) with label i, sampled every minute for ten
// days from t0+13s, with a gap of up to 19 hours at one sample in gapOneIn
// (some longer than a rollup bucket), NaN, ±Inf or ±1e300 at one in 200,
// and a sample at each of Prometheus's ends: what a rollup read must
// answer as the raw read does.
func Hostile(rnd *rand.Rand, name string, i, gapOneIn int, t0 int64) Series {
	const minute, hour, day = 60_000, 3_600_000, 86_400_000
	odd := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, -1e300}
	s := Series{Labels: labels.FromStrings("__name__", name, "i", fmt.Sprint(i))}
	add := func(ts int64, v float64) { s.T, s.V = append(s.T, ts), append(s.V, v) }
	add(PromMin, 1)
	v := 0.0
	for ts := t0 + 13_000; ts < t0+10*day; ts += minute {
		if rnd.IntN(gapOneIn) == 0 {
			ts += int64(rnd.IntN(20)) * hour
		}
		switch {
		case name == "c" && rnd.IntN(500) == 0:
			v = 0 // a reset
		case name == "c":
			v += rnd.Float64() * 10
		default:
			v = rnd.NormFloat64() * 100
		}
		if rnd.IntN(200) == 0 {
			add(ts, odd[rnd.IntN(len(odd))])
			continue
		}
		add(ts, v)
	}
	add(PromMax, 2)
	return s
}
