package queryapi

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/rollup"
)

var testResolutions = []rollup.Resolution{rollup.Resolution(5 * time.Minute), rollup.Resolution(time.Hour), rollup.Resolution(6 * time.Hour)}

// renderHints is expr with the hint of each planned selector written as a
// matcher on __kairos_read__, for the table below to read.
func renderHints(expr parser.Expr, hints selectorHints) string {
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && len(vs.LabelMatchers) > 0 {
			if h, ok := hints[vs.LabelMatchers[0]]; ok {
				vs.LabelMatchers = append(vs.LabelMatchers, labels.MustNewMatcher(labels.MatchEqual, "__kairos_read__", h.String()))
			}
		}
		return nil
	})
	return expr.String()
}

// TestPlanReads holds the planner to its rules: which selectors read
// rollups of which aggregate and resolution, which read windows, and which
// are left alone.
func TestPlanReads(t *testing.T) {
	day := time.Unix(1_700_006_400, 0) // a multiple of 1h (and of 1d)
	const r = `__kairos_read__=`
	for _, c := range []struct {
		name, q string
		start   time.Time
		step    time.Duration // 0: instant
		src     string        // max_source_resolution
		want    string        // "" = unchanged
		err     string
		off     bool // rollups off (--rollup.resolutions=): windows only
	}{
		{name: "max 1h", q: `max_over_time(x[8h])`, start: day, step: 8 * time.Hour,
			want: `max_over_time(x{` + r + `"max@1h"}[8h])`},
		{name: "min 5m at step 30m", q: `min_over_time(x[1h])`, start: day, step: 30 * time.Minute,
			want: `min_over_time(x{` + r + `"min@5m"}[1h])`},
		{name: "sum windows", q: `sum_over_time(x[1h])`, start: day, step: 8 * time.Hour,
			want: `sum_over_time(x{` + r + `"sum@1h,windows=3600000"}[1h])`},
		{name: "count", q: `count_over_time(x{job="a"}[8h])`, start: day, step: 8 * time.Hour,
			want: `sum_over_time(x{` + r + `"count@1h",job="a"}[8h])`},
		{name: "avg", q: `2 ^ avg_over_time(x[8h])`, start: day, step: 8 * time.Hour,
			want: `2 ^ (sum_over_time(x{` + r + `"sum@1h"}[8h]) / sum_over_time(x{` + r + `"count@1h"}[8h]))`},
		// A window of one bucket reads the buckets' means: the call stays.
		{name: "avg of one bucket", q: `avg by (job) (avg_over_time(x[6h]))`, start: day, step: 6 * time.Hour,
			want: `avg by (job) (avg_over_time(x{` + r + `"avg@6h"}[6h]))`},
		{name: "avg of one bucket, windows", q: `avg_over_time(x{job="a"}[1h])`, start: day, step: 8 * time.Hour,
			want: `avg_over_time(x{` + r + `"avg@1h,windows=3600000",job="a"}[1h])`},
		{name: "avg of one bucket, offset", q: `avg_over_time(x[6h] offset 1d)`, start: day, step: 6 * time.Hour,
			want: `avg_over_time(x{` + r + `"avg@6h"}[6h] offset 1d)`},
		{name: "avg of one bucket, instant", q: `avg_over_time(x[1h])`, start: day,
			want: `avg_over_time(x{` + r + `"avg@1h"}[1h])`},
		{name: "avg of one 5m bucket, at most 5m", q: `avg_over_time(x[5m])`, start: day, step: time.Hour, src: "5m",
			want: `avg_over_time(x{` + r + `"avg@5m,windows=300000"}[5m])`},
		// 1h where 6h is not aligned: 6 buckets a window, the quotient.
		{name: "avg of 6h at 1h", q: `avg_over_time(x[6h])`, start: day.Add(time.Hour), step: 6 * time.Hour,
			want: `(sum_over_time(x{` + r + `"sum@1h"}[6h]) / sum_over_time(x{` + r + `"count@1h"}[6h]))`},
		{name: "avg of 6h at most 1h", q: `avg_over_time(x[6h])`, start: day, step: 6 * time.Hour, src: "1h",
			want: `(sum_over_time(x{` + r + `"sum@1h"}[6h]) / sum_over_time(x{` + r + `"count@1h"}[6h]))`},
		{name: "avg raw", q: `avg_over_time(x[6h])`, start: day, step: 6 * time.Hour, src: "0"},
		{name: "offset aligned", q: `max_over_time(x[8h] offset 1h)`, start: day, step: 8 * time.Hour,
			want: `max_over_time(x{` + r + `"max@1h"}[8h] offset 1h)`},
		{name: "offset misaligned to 1h", q: `max_over_time(x[8h] offset 5m)`, start: day, step: 8 * time.Hour,
			want: `max_over_time(x{` + r + `"max@5m"}[8h] offset 5m)`},
		{name: "start misaligned", q: `max_over_time(x[8h])`, start: day.Add(time.Minute), step: 8 * time.Hour},
		{name: "range misaligned", q: `max_over_time(x[8h1m])`, start: day, step: 8 * time.Hour},
		{name: "step misaligned, windows", q: `max_over_time(x[1h])`, start: day, step: 8*time.Hour + time.Minute,
			want: `max_over_time(x{` + r + `"windows=3600000"}[1h])`},
		// Once the step admits rollups (5m at most step/5), an exact
		// answer takes the largest aligned resolution; shorter steps stay
		// raw.
		{name: "1h at step 1h", q: `max_over_time(x[1h])`, start: day, step: time.Hour,
			want: `max_over_time(x{` + r + `"max@1h"}[1h])`},
		{name: "step too short", q: `max_over_time(x[1h])`, start: day, step: 15 * time.Minute},
		{name: "step aligned to none", q: `max_over_time(x[1h])`, start: day, step: 37 * time.Minute},
		{name: "Grafana's year: max 6h", q: `max_over_time(x[6h])`, start: day, step: 6 * time.Hour,
			want: `max_over_time(x{` + r + `"max@6h"}[6h])`},
		{name: "Grafana's year: rate 6h", q: `sum by (job) (rate(x[6h1m]))`, start: day, step: 6 * time.Hour,
			want: `sum by (job) (rate(x{` + r + `"counter@6h"}[6h1m]))`},
		{name: "rate at step 6h, start aligned to 1h", q: `rate(x[6h1m])`, start: day.Add(time.Hour), step: 6 * time.Hour,
			want: `rate(x{` + r + `"counter@1h"}[6h1m])`},
		{name: "rate: 6h buckets cover a quarter of 8h", q: `rate(x[8h])`, start: day, step: 6 * time.Hour,
			want: `rate(x{` + r + `"counter@6h"}[8h])`},
		{name: "rate: 6h buckets cover too little of 8h1m", q: `rate(x[8h1m])`, start: day, step: 6 * time.Hour,
			want: `rate(x{` + r + `"counter@1h"}[8h1m])`},
		{name: "rate offset aligned", q: `increase(x[1d] offset 6h)`, start: day, step: 24 * time.Hour,
			want: `increase(x{` + r + `"counter@6h"}[1d] offset 6h)`},
		{name: "rate 1h", q: `sum by (job) (rate(x[8h1m]))`, start: day, step: 8 * time.Hour,
			want: `sum by (job) (rate(x{` + r + `"counter@1h"}[8h1m]))`},
		{name: "increase aligned 1h", q: `increase(x[1h])`, start: day, step: 8 * time.Hour,
			want: `increase(x{` + r + `"counter@1h,windows=3600000"}[1h])`},
		{name: "increase 5m, misaligned", q: `increase(x[1h])`, start: day.Add(time.Minute), step: 8 * time.Hour,
			want: `increase(x{` + r + `"counter@5m,windows=3600000"}[1h])`},
		{name: "rate too short, windows", q: `rate(x[5m])`, start: day, step: 8 * time.Hour,
			want: `rate(x{` + r + `"windows=300000"}[5m])`},
		{name: "rate step short", q: `rate(x[5m])`, start: day, step: time.Minute},
		{name: "irate windows only", q: `irate(x[5m])`, start: day, step: time.Hour,
			want: `irate(x{` + r + `"windows=300000"}[5m])`},
		{name: "instant selector windows", q: `x + on() group_left y{a="b"}`, start: day, step: time.Hour,
			want: `x{` + r + `"windows=300000"} + on () group_left () y{` + r + `"windows=300000",a="b"}`},
		{name: "instant selector short step", q: `x`, start: day, step: time.Minute},
		{name: "instant query", q: `max_over_time(x[1d])`, start: day,
			want: `max_over_time(x{` + r + `"max@6h"}[1d])`},
		{name: "instant query rate", q: `rate(x[1h])`, start: day,
			want: `rate(x{` + r + `"counter@1h"}[1h])`},
		{name: "instant query rate, misaligned", q: `rate(x[1h])`, start: day.Add(time.Minute),
			want: `rate(x{` + r + `"counter@5m"}[1h])`},
		{name: "subquery", q: `max_over_time(rate(x[5m])[1d:1h])`, start: day, step: 8 * time.Hour},
		{name: "at", q: `max_over_time(x[8h] @ 1700006400)`, start: day, step: 8 * time.Hour},
		{name: "at end", q: `max_over_time(x[8h] @ end())`, start: day, step: 8 * time.Hour},
		{name: "no name", q: `max_over_time({job="a"}[8h])`, start: day, step: 8 * time.Hour},
		{name: "name regexp", q: `max_over_time({__name__=~"x|y"}[8h])`, start: day, step: 8 * time.Hour},
		{name: "raw", q: `max_over_time(x[8h])`, start: day, step: 8 * time.Hour, src: "raw"},
		{name: "0", q: `rate(x[8h])`, start: day, step: 9 * time.Hour, src: "0",
			want: `rate(x{` + r + `"windows=28800000"}[8h])`},
		{name: "at most 5m", q: `max_over_time(x[8h])`, start: day, step: 8 * time.Hour, src: "5m",
			want: `max_over_time(x{` + r + `"max@5m"}[8h])`},
		{name: "1h beats step/5", q: `max_over_time(x[1h])`, start: day, step: time.Hour, src: "1h",
			want: `max_over_time(x{` + r + `"max@1h"}[1h])`},
		{name: "bad source resolution", q: `x`, start: day, step: time.Hour, src: "2m", err: `invalid parameter "max_source_resolution"`},
		// The label the plans once travelled in is an ordinary label.
		{name: "old plan label", q: `x{__kairos_read__="max@1h"}`, start: day, step: time.Minute},
		// With rollups off the windows still apply, and nothing else.
		{name: "off: rate", off: true, q: `sum by (job) (rate(x[6h1m]))`, start: day, step: 8 * time.Hour,
			want: `sum by (job) (rate(x{` + r + `"windows=21660000"}[6h1m]))`},
		{name: "off: max", off: true, q: `max_over_time(x[6h])`, start: day, step: 6 * time.Hour},
		{name: "off: instant", off: true, q: `increase(x[1d])`, start: day},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := testResolutions
			if c.off {
				res = nil
			}
			a := New(nil, Options{RollupResolutions: res}, nil, nil)
			form := url.Values{"query": {c.q}}
			if c.src != "" {
				form.Set("max_source_resolution", c.src)
			}
			req := httptest.NewRequest("POST", "/api/v1/query_range", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			require.NoError(t, req.ParseForm())
			opts, apiErr := queryOpts(req.Form)
			require.Nil(t, apiErr)
			expr, hints, apiErr := a.check(req.FormValue("query"), req.Form, opts, c.start, c.step)
			if c.err != "" {
				require.NotNil(t, apiErr)
				require.Equal(t, errBadData, apiErr.typ)
				require.ErrorContains(t, apiErr.err, c.err)
				return
			}
			require.Nil(t, apiErr)
			got := renderHints(expr, hints)
			if c.want == "" {
				// Unplanned: no hint, and so no rewrite.
				require.Empty(t, hints, got)
				return
			}
			require.Equal(t, c.want, got)
		})
	}
}
