package rollupjob_test

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// TestRecomputeMatchesRaw: over random series (values among NaN, ±Inf,
// ±1e300, stale markers, counter resets; a native histogram series beside
// them, which is not rolled up; samples at Prometheus's minimum and maximum
// times), the backfill and then the recomputations of random late writes
// (new samples that move buckets between finite and non-finite values,
// samples sent again with the same values) and deletes leave every rollup cell
// what rollup.Compute gives over the raw series whole, the reference the
// store's rollup reads are held to: the spans of recomputation, the cells
// not written again and the walk over the old cells change no answer.
func TestRecomputeMatchesRaw(t *testing.T) {
	engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
		seed := uint64(time.Now().UnixNano())
		if s := os.Getenv("KAIROS_TEST_SEED"); s != "" { // to replay a failure
			var err error
			seed, err = strconv.ParseUint(s, 10, 64)
			require.NoError(t, err)
		}
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 7))
		pool := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, -1e300, math.Float64frombits(value.StaleNaN), 0, -3.5}
		val := func(c *float64) float64 {
			if rng.IntN(8) == 0 {
				return pool[rng.IntN(len(pool))]
			}
			if rng.IntN(40) == 0 {
				*c = 0 // a reset
			}
			*c += float64(rng.IntN(100)) / 4
			return *c
		}
		promMin := int64(math.MinInt64/1000+62135596801) * 1000
		promMax := int64(math.MaxInt64/1000-62135596801) * 1000
		var data []series
		for i := range 5 {
			s := series{ls: labels.FromStrings("__name__", []string{"x", "y"}[i%2], "i", string(rune('a'+i)))}
			c := 0.0
			for ts := 990*hour + int64(rng.IntN(60_000)); ts <= t0; ts += 10_000 + int64(rng.IntN(80_000)) {
				s.ts, s.vs = append(s.ts, ts), append(s.vs, val(&c))
			}
			data = append(data, s)
		}
		data[0].ts = append([]int64{promMin, promMin + 1}, data[0].ts...)
		data[0].vs = append([]float64{math.Inf(-1), 5}, data[0].vs...)
		data[1].ts, data[1].vs = append(data[1].ts, promMax), append(data[1].vs, 1)
		clk := &clock{}
		clk.set(t0)
		eng := open(t)
		seedStore := func() {
			n := newNode(t, eng, clk, "seed")
			write(t, n.store, data)
			app := n.store.NewAppender()
			h := labels.FromStrings("__name__", "x", "i", "hist")
			for ts := 990 * hour; ts <= 1000*hour; ts += 5 * minute {
				_, err := app.AppendHistogram(0, h, ts, &histogram.Histogram{Count: uint64(ts / minute), ZeroCount: uint64(ts / minute), Sum: 1, Schema: 0, ZeroThreshold: 1e-128}, nil)
				require.NoError(t, err)
			}
			require.NoError(t, app.Commit(t.Context()))
		}
		seedStore()
		n := newNode(t, eng, clk, "a")
		settle(clk)
		n.run(t)
		require.Equal(t, expected(data, 1000*hour), storedSince(t, n.store, promMin, "x", "y"))

		for round := range 4 {
			settle(clk)
			for range 1 + rng.IntN(3) {
				s := rng.IntN(len(data))
				var ts []int64
				var vs []float64
				c := float64(rng.IntN(1000))
				// New samples, at times the series does not hold: a
				// sample overwritten with another value is not what
				// Prometheus sends.
				at := 990*hour + int64(rng.IntN(10*60))*minute
				for range 1 + rng.IntN(30) {
					at += 1 + int64(rng.IntN(90_000))
					if _, ok := slices.BinarySearch(data[s].ts, at); !ok {
						ts, vs = append(ts, at), append(vs, val(&c))
					}
				}
				if rng.IntN(3) == 0 { // the same values again: nothing changes
					k := rng.IntN(len(data[s].ts) - 1)
					ts, vs = data[s].ts[k:k+1], data[s].vs[k:k+1]
				}
				lateWrite(t, n, data, s, slices.Clone(ts), slices.Clone(vs))
			}
			if round%2 == 1 {
				s := rng.IntN(len(data))
				lo := 990*hour + int64(rng.IntN(600))*minute
				hi := lo + int64(rng.IntN(120))*minute
				_, err := n.store.Delete(t.Context(), lo, hi, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, data[s].ls.Get("__name__")),
					labels.MustNewMatcher(labels.MatchEqual, "i", data[s].ls.Get("i")))
				require.NoError(t, err)
				var keepT []int64
				var keepV []float64
				for i, ts := range data[s].ts {
					if ts < lo || ts > hi {
						keepT, keepV = append(keepT, ts), append(keepV, data[s].vs[i])
					}
				}
				data[s].ts, data[s].vs = keepT, keepV
			}
			settle(clk)
			n.run(t)
			require.Equal(t, expected(data, 1000*hour), storedSince(t, n.store, promMin, "x", "y"), "round %d", round)
		}
	})
}
