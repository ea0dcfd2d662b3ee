package rollup

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/stretchr/testify/require"
)

func TestBucket(t *testing.T) {
	r := Resolution(5 * time.Minute)
	for _, c := range []struct{ t, end int64 }{
		{0, 0}, {1, 300000}, {300000, 300000}, {300001, 600000}, {-1, 0}, {-300000, -300000}, {-300001, -300000},
	} {
		require.Equal(t, c.end, r.Bucket(c.t), "t=%d", c.t)
	}
}

func TestLabels(t *testing.T) {
	raw := labels.FromStrings("__name__", "x", "job", "a")
	ls := SeriesLabels(raw, Resolution(time.Hour), Sum)
	require.Equal(t, labels.FromStrings("__name__", "x_rollup", "job", "a", "rollup_aggregate", "sum", "rollup_resolution", "1h", "saved_from", "x"), ls)
	back, ok := RawLabels(ls)
	require.True(t, ok)
	require.Equal(t, raw, back)
	require.True(t, Rollable(raw))
	require.False(t, Rollable(ls))
	require.False(t, Rollable(labels.FromStrings("__name__", "y_rollup", "saved_from", "y"))) // KairosDB's own roll-up
	_, ok = RawLabels(labels.FromStrings("__name__", "y_rollup", "saved_from", "y"))
	require.False(t, ok)
}

func TestCompute(t *testing.T) {
	r := Resolution(time.Minute)
	m := int64(60000)
	nan := math.NaN()
	stale := math.Float64frombits(value.StaleNaN)
	// The sample at 0 is before from: only the counter's start.
	ts := []int64{0, 10000, m, m + 1, m + 30000, 2 * m, 4*m - 1, 4 * m}
	vs := []float64{5, 7, 9, 2, stale, nan, 3, 4}
	got := Compute(r, 0, 4*m, ts, vs)
	require.Len(t, got, 3)
	// (0, 1m]: 7, 9; counter from 5: +2 +2.
	require.Equal(t, Point{End: m, Count: 2, Sum: 16, Min: 7, Max: 9, Counter: 4}, got[0])
	// (1m, 2m]: 2 (a reset after 9: +2), stale skipped, NaN counted.
	require.Equal(t, 2*m, got[1].End)
	require.Equal(t, 2.0, got[1].Count)
	require.True(t, math.IsNaN(got[1].Sum))
	require.Equal(t, 2.0, got[1].Min)
	require.Equal(t, 2.0, got[1].Max)
	require.Equal(t, 2.0, got[1].Counter)
	// (3m, 4m]: the bucket (2m, 3m] is empty, so the increase starts at 3.
	require.Equal(t, Point{End: 4 * m, Count: 2, Sum: 7, Min: 3, Max: 4, Counter: 1}, got[2])
	// The compensated sum sum_over_time takes: ten 0.1 alone sum to 1 (a
	// plain sum gives 0.9999999999999999), and between 1e300 and -1e300 to
	// their plain sum, which the compensation held (a plain sum gives 0);
	// an infinite sum keeps no compensation.
	tenths := func(edges bool) ([]int64, []float64) {
		var ts []int64
		var vs []float64
		for i := range 12 {
			v := 0.1
			if i == 0 || i == 11 {
				if !edges {
					continue
				}
				v = math.Copysign(1e300, float64(5-i))
			}
			ts, vs = append(ts, int64(i+1)), append(vs, v)
		}
		return ts, vs
	}
	for _, edges := range []bool{false, true} {
		ts, vs := tenths(edges)
		want := 1.0
		if edges {
			want = 0
			for range 10 {
				want += 0.1
			}
		}
		got = Compute(r, 0, m, ts, vs)
		require.Equal(t, want, got[0].Sum, "edges %v", edges)
	}
	got = Compute(r, 0, m, []int64{1, 2, 3}, []float64{math.MaxFloat64, math.MaxFloat64, -1})
	require.Equal(t, math.Inf(1), got[0].Sum)
	// All NaN: min and max NaN.
	got = Compute(r, 0, m, []int64{1, 2}, []float64{nan, nan})
	require.True(t, math.IsNaN(got[0].Min) && math.IsNaN(got[0].Max))
}

// TestMean: a bucket's mean is what sum_over_time(sum) / sum_over_time(count)
// of that one bucket answered, sum_over_time adding a zero compensation to
// each: -0 sums become 0, ±Inf and NaN pass, a count of 0 divides.
func TestMean(t *testing.T) {
	for _, c := range []struct{ sum, count, want float64 }{
		{6, 4, 1.5},
		{math.Copysign(0, -1), 3, 0},
		{math.Inf(1), 2, math.Inf(1)},
		{math.Inf(-1), 2, math.Inf(-1)},
		{1e300, 1e-10, math.Inf(1)},
		{-1e300, 3, -1e300 / 3},
		{5, 0, math.Inf(1)},
		{-5, 0, math.Inf(-1)},
		{0, 0, math.NaN()},
		{math.NaN(), 3, math.NaN()},
	} {
		got := Mean(c.sum, c.count)
		if math.IsNaN(c.want) {
			require.True(t, math.IsNaN(got), "%v/%v", c.sum, c.count)
			continue
		}
		require.Equal(t, math.Float64bits(c.want), math.Float64bits(got), "%v/%v: %v", c.sum, c.count, got)
	}
}
