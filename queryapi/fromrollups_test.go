package queryapi

import (
	"math"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
)

// TestFromRollups: the frontend's question, whether every selector of a
// range query is read from rollups, answered from the same plan the
// evaluation makes, without changing the tree the frontend holds: a
// selector read raw (a raw selector beside a rollup one, a subquery's, a
// misaligned one, max_source_resolution=0 or garbage) makes the answer
// no, and no start, end or step (Prometheus's bounds, 1 ms, 292 years)
// panics or overflows into a yes.
func TestFromRollups(t *testing.T) {
	day := time.Unix(1_700_006_400, 0) // a multiple of 6h
	// 300 years is no Duration: the frontend refuses such a step before
	// it asks, so the longest it can ask is this.
	y300 := time.Duration(math.MaxInt64).Truncate(6 * time.Hour)
	for _, c := range []struct {
		name, q string
		start   time.Time
		step    time.Duration
		src     string // max_source_resolution
		off     bool   // rollups off
		want    bool
	}{
		{name: "max 6h", q: `max_over_time(x[6h])`, start: day, step: 6 * time.Hour, want: true},
		{name: "rate", q: `sum by (job) (rate(x[1h]))`, start: day, step: 6 * time.Hour, want: true},
		{name: "avg", q: `avg by (job) (avg_over_time(x[6h]))`, start: day, step: 6 * time.Hour, want: true},
		{name: "avg one bucket, windows", q: `avg_over_time(x[1h])`, start: day, step: 6 * time.Hour, want: true},
		{name: "avg of four buckets", q: `avg_over_time(x[1d])`, start: day, step: 6 * time.Hour, want: true},
		{name: "avg step 292y", q: `avg_over_time(x[6h])`, start: day, step: y300, want: true},
		{name: "avg step 1ms", q: `avg_over_time(x[6h])`, start: day, step: time.Millisecond},
		{name: "avg Prometheus's min, 292y", q: `avg_over_time(x[6h])`, start: timeparam.Min, step: y300},
		{name: "avg Prometheus's max, offset", q: `avg_over_time(x[6h] offset -292y)`, start: timeparam.Max, step: 6 * time.Hour},
		{name: "avg src 0", q: `avg_over_time(x[6h])`, start: day, step: 6 * time.Hour, src: "0"},
		{name: "increase", q: `sum by (job) (increase(x[1d]))`, start: day, step: 6 * time.Hour, want: true},
		{name: "count", q: `count_over_time(x[1d])`, start: day, step: 6 * time.Hour, want: true},
		{name: "two rollup selectors", q: `max_over_time(x[6h]) - min_over_time(y[6h])`, start: day, step: 6 * time.Hour, want: true},
		{name: "offset aligned", q: `max_over_time(x[6h] offset 1h)`, start: day, step: 6 * time.Hour, want: true},
		{name: "offset misaligned", q: `max_over_time(x[6h] offset 7m)`, start: day, step: 6 * time.Hour},
		{name: "negative offset aligned", q: `max_over_time(x[6h] offset -1h)`, start: day, step: 6 * time.Hour, want: true},
		{name: "rollup and raw", q: `rate(x[1h]) / x`, start: day, step: 6 * time.Hour},
		{name: "raw function", q: `max_over_time(x[6h]) + irate(x[5m])`, start: day, step: 6 * time.Hour},
		{name: "subquery", q: `max_over_time(rate(x[1h])[1d:1h])`, start: day, step: 6 * time.Hour},
		{name: "at", q: `max_over_time(x[6h] @ 1700006400)`, start: day, step: 6 * time.Hour},
		{name: "at end", q: `max_over_time(x[6h] @ end())`, start: day, step: 6 * time.Hour},
		{name: "no selector", q: `vector(1)`, start: day, step: 6 * time.Hour},
		{name: "start misaligned", q: `max_over_time(x[6h])`, start: day.Add(time.Minute), step: 6 * time.Hour},
		{name: "step 1ms", q: `max_over_time(x[6h])`, start: day, step: time.Millisecond},
		{name: "step 292y", q: `max_over_time(x[6h])`, start: day, step: y300, want: true},
		{name: "Prometheus's min, 292y", q: `max_over_time(x[6h])`, start: timeparam.Min, step: y300},
		{name: "Prometheus's max, 1ms", q: `sum(rate(x[1h]))`, start: timeparam.Max, step: time.Millisecond},
		{name: "Prometheus's min, offset", q: `max_over_time(x[6h] offset 292y)`, start: timeparam.Min, step: y300},
		{name: "Prometheus's max, offset", q: `max_over_time(x[6h] offset -292y)`, start: timeparam.Max, step: 6 * time.Hour},
		{name: "src 0", q: `max_over_time(x[6h])`, start: day, step: 6 * time.Hour, src: "0"},
		{name: "src raw", q: `max_over_time(x[6h])`, start: day, step: 6 * time.Hour, src: "raw"},
		{name: "src 5m", q: `max_over_time(x[6h])`, start: day, step: 6 * time.Hour, src: "5m", want: true},
		{name: "src 1h", q: `sum by (job) (rate(x[1h]))`, start: day, step: 6 * time.Hour, src: "1h", want: true},
		{name: "src auto", q: `count_over_time(x[1d])`, start: day, step: 6 * time.Hour, src: "auto", want: true},
		{name: "src garbage", q: `max_over_time(x[6h])`, start: day, step: 6 * time.Hour, src: "1e300"},
		{name: "rollups off", q: `max_over_time(x[6h])`, start: day, step: 6 * time.Hour, off: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := testResolutions
			if c.off {
				res = nil
			}
			h := New(nil, Options{RollupResolutions: res}, nil, nil).RangeHandler()
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(c.q)
			require.NoError(t, err)
			before := expr.String()
			params := url.Values{}
			if c.src != "" {
				params.Set("max_source_resolution", c.src)
			}
			require.Equal(t, c.want, h.FromRollups(expr, c.start, c.step, params))
			require.Equal(t, before, expr.String(), "the tree is left as it was")
		})
	}
}
