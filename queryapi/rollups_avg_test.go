package queryapi

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/rolluptest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// TestRollupAvgOneBucket: avg_over_time over windows of one bucket reads
// the buckets' means (rollup.Avg) instead of the quotient of two
// selectors, and answers byte for byte what the quotient answers (the
// query sum_over_time/count_over_time, which the planner reads as it read
// avg_over_time before), over hostile series (NaN, ±Inf, ±1e300, gaps,
// stale markers, samples at Prometheus's ends) with rollups for the middle
// days only (raw stitched on either side), at steps of 1 ms, 6 h, 1 d and
// 300 y, offsets, and the sources auto, 6h, 1h and 0. Then another writer
// deletes a count bucket and a sum bucket and writes a count of 0: the
// quotient had no point where either was missing, and neither has the new
// read. On both engines; within float tolerance of raw before the damage.
func TestRollupAvgOneBucket(t *testing.T) {
	for _, name := range []string{"pebble", "cassandra"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rollupAvg(t, name)
		})
	}
}

func rollupAvg(t *testing.T, engName string) {
	ctx := context.Background()
	eng := openEngine(t, engName)
	reg := prometheus.NewRegistry()
	st, err := kairosstore.Open(ctx, eng, kairosstore.Options{RowWidth: 7 * 24 * time.Hour}, nil, reg)
	require.NoError(t, err)
	const hour, day = int64(3_600_000), int64(86_400_000)
	t0 := 1_700_000_000_000 / day * day
	rnd := rand.New(rand.NewPCG(3, 30))
	var data []rolluptest.Series
	for i := range 4 {
		s := rolluptest.Hostile(rnd, "g", i, 300, t0)
		if i == 3 {
			// Tame: a window of several buckets sums their sums, so 1e300
			// and -1e300 in two buckets of one window leave nothing of the
			// rest; only this one's means are compared with raw's.
			for j, v := range s.V {
				if math.IsNaN(v) || math.Abs(v) >= 1e300 {
					s.V[j] = float64(j % 7)
				}
			}
		}
		data = append(data, s)
	}
	// Stale markers in series 0, some alone in their bucket.
	stale := rolluptest.Series{Labels: data[0].Labels}
	for i, ts := range data[0].T {
		stale.T, stale.V = append(stale.T, ts), append(stale.V, data[0].V[i])
		if i%97 == 5 && i+1 < len(data[0].T) && data[0].T[i+1]-ts > 2 {
			stale.T, stale.V = append(stale.T, ts+1), append(stale.V, math.Float64frombits(value.StaleNaN))
		}
	}
	data[0] = stale
	for _, s := range data {
		app := st.NewAppender()
		for i := range s.T {
			require.NoError(t, errOf(app.Append(0, s.Labels, s.T[i], s.V[i])))
		}
		require.NoError(t, app.Commit(ctx))
	}
	require.NoError(t, rolluptest.Write(ctx, st, eng, testResolutions, t0+2*day, t0+8*day, data))
	// Native histograms have no rollups: the means read a series of them
	// raw, and avg_over_time answers as over raw samples. Among floats,
	// the floats are rolled up (as the job does), and the means are the
	// quotient's.
	mixed := rolluptest.Series{Labels: labels.FromStrings("__name__", "hg", "i", "mixed")}
	app := st.NewAppender()
	for ts := t0 + 13_000; ts < t0+10*day; ts += 10 * 60_000 {
		h := &histogram.Histogram{Count: uint64(ts % 7), Sum: float64(ts%13) - 6, ZeroThreshold: 0.001, ZeroCount: uint64(ts % 7),
			PositiveSpans: []histogram.Span{{Offset: 0, Length: 0}}}
		require.NoError(t, errOf(app.AppendHistogram(0, labels.FromStrings("__name__", "hg", "i", "h"), ts, h, nil)))
		if ts%3 == 0 {
			require.NoError(t, errOf(app.AppendHistogram(0, labels.FromStrings("__name__", "hg", "i", "mixed"), ts, h, nil)))
		} else {
			require.NoError(t, errOf(app.Append(0, mixed.Labels, ts, float64(ts%11))))
			mixed.T, mixed.V = append(mixed.T, ts), append(mixed.V, float64(ts%11))
		}
	}
	require.NoError(t, app.Commit(ctx))
	require.NoError(t, rolluptest.Write(ctx, st, eng, testResolutions, t0+2*day, t0+8*day, []rolluptest.Series{mixed}))
	api := New(st, Options{RollupResolutions: testResolutions}, nil, prometheus.NewRegistry())
	h := mount(api, http.NotFoundHandler())

	sec := func(ms int64) string { return strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64) }
	// The first and last bucket ends of 6h between Prometheus's ends.
	promMin6h := rollup.Resolution(6 * time.Hour).Bucket(rolluptest.PromMin)
	promMax6h := rollup.Resolution(6*time.Hour).Bucket(rolluptest.PromMax) - 6*hour
	const centuries = 292 * 365 * 24 * time.Hour
	type window struct {
		start, end int64
		step       time.Duration // 0 for an instant query at end
	}
	windows := []window{
		{t0, t0 + 10*day, 6 * time.Hour},
		{t0 + 6*hour, t0 + 11*day, 24 * time.Hour},
		{t0 + 2*day, t0 + 2*day + 10_000, time.Millisecond},
		{promMin6h, promMin6h + 10*day, 6 * time.Hour},
		{promMax6h - 10*day, promMax6h, 6 * time.Hour},
		// 300 y overflows a step (Prometheus refuses it).
		{promMin6h, promMin6h + 100*centuries.Milliseconds(), centuries},
		{promMax6h - 100*centuries.Milliseconds(), promMax6h, centuries},
		{0, promMin6h, 0},
		{0, promMax6h, 0},
		{0, t0 + 5*day, 0},
		{0, t0 + 11*day, 0},
	}
	exprs := []struct{ avg, quotient string }{
		{`avg_over_time(g[6h])`, `sum_over_time(g[6h]) / count_over_time(g[6h])`},
		{`avg by (i) (avg_over_time(g[6h]))`, `avg by (i) (sum_over_time(g[6h]) / count_over_time(g[6h]))`},
		{`avg_over_time(g[1h])`, `sum_over_time(g[1h]) / count_over_time(g[1h])`},
		{`avg_over_time(g[6h] offset 1d)`, `sum_over_time(g[6h] offset 1d) / count_over_time(g[6h] offset 1d)`},
		{`avg_over_time(g{i="3"}[5m] offset -6h)`, `sum_over_time(g{i="3"}[5m] offset -6h) / count_over_time(g{i="3"}[5m] offset -6h)`},
	}
	query := func(q string, w window, src string) answer {
		form := url.Values{"query": {q}}
		path := "/api/v1/query_range"
		if w.step == 0 {
			path = "/api/v1/query"
			form.Set("time", sec(w.end))
		} else {
			form.Set("start", sec(w.start))
			form.Set("end", sec(w.end))
			form.Set("step", strconv.FormatFloat(w.step.Seconds(), 'f', -1, 64))
		}
		if src != "" {
			form.Set("max_source_resolution", src)
		}
		ans := get(t, h, http.MethodPost, path, form)
		require.Equal(t, http.StatusOK, ans.code, "%s: %s", q, ans.body)
		return ans
	}
	// planned: avg_over_time reads rollups (the means or the quotient),
	// so that it is the quotient read the same way; otherwise it is read
	// raw, and the quotient differs from it in the last bits (PromQL's
	// mean is not its sum over its count).
	planned := func(q string, w window, src string) bool {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
		require.NoError(t, err)
		start := w.end
		if w.step != 0 {
			start = w.start
		}
		_, hints, apiErr := api.planReads(url.Values{"max_source_resolution": {src}}, promql.NewPrometheusQueryOpts(false, 0, nil), expr, time.UnixMilli(start), w.step)
		require.Nil(t, apiErr)
		for _, h := range hints {
			if h.Resolution != 0 {
				return true
			}
		}
		return false
	}
	compared, rawPoints := 0, 0
	compare := func(damaged bool) {
		for _, w := range windows {
			for _, e := range exprs {
				for _, src := range []string{"", "6h", "1h", "0"} {
					c0 := cellCounts(t, reg)
					got := query(e.avg, w, src)
					c1 := cellCounts(t, reg)
					if planned(e.avg, w, src) {
						require.Equal(t, query(e.quotient, w, src).body, got.body, "%s over %v at %q", e.avg, w, src)
						compared++
					}
					if w == windows[0] && src == "" && e.avg != `avg_over_time(g{i="3"}[5m] offset -6h)` {
						require.Positive(t, c1["rollup"]-c0["rollup"], "%s reads rollups", e.avg)
					}
					if damaged || src == "0" {
						continue
					}
					raw := query(e.avg, w, "0")
					if w.step == 0 {
						continue // the bytes above; the table test checks instant answers against raw
					}
					want, have := rangeBody(t, raw.body), rangeBody(t, got.body)
					require.Equal(t, keys(want), keys(have), e.avg)
					for ls, pts := range want {
						if ls != `{i="3"}` {
							continue
						}
						requireClose(t, e.avg+" "+ls, pts, have[ls], 1e-9)
						rawPoints += len(pts)
					}
				}
			}
		}
	}
	compare(false)
	for _, w := range windows[:2] {
		for _, r := range []string{"6h", "1h"} {
			q := `avg_over_time(hg{i="h"}[` + r + `])`
			require.True(t, planned(q, w, ""))
			require.Equal(t, query(q, w, "0").body, query(q, w, "").body, "%s over %v", q, w)
			q = `avg_over_time(hg{i="mixed"}[` + r + `])`
			require.Equal(t, query(`sum_over_time(hg{i="mixed"}[`+r+`]) / count_over_time(hg{i="mixed"}[`+r+`])`, w, "").body, query(q, w, "").body, "%s over %v", q, w)
		}
	}
	// Buckets of NaN or ±Inf are read (the null-typed rows of the
	// rollups): max and min over them are raw's, byte for byte.
	for _, w := range windows {
		for _, q := range []string{`max_over_time(g[6h])`, `min_over_time(g[1h])`, `max_over_time(g[6h] offset 1d)`} {
			require.Equal(t, query(q, w, "0").body, query(q, w, "").body, "%s over %v", q, w)
		}
	}
	require.Greater(t, compared, 40, "most reads are planned")
	require.Greater(t, rawPoints, 500)

	// Another writer: series 1 loses the count of one 6h bucket and the
	// sum of another, and series 2's count of a third becomes 0.
	six := rollup.Resolution(6 * time.Hour)
	for _, d := range []struct {
		s   int
		a   rollup.Aggregate
		end int64
	}{{1, rollup.Count, t0 + 3*day + 6*hour}, {1, rollup.Sum, t0 + 4*day + 12*hour}} {
		ms := []*labels.Matcher{}
		rollup.SeriesLabels(data[d.s].Labels, six, d.a).Range(func(l labels.Label) {
			ms = append(ms, labels.MustNewMatcher(labels.MatchEqual, l.Name, l.Value))
		})
		n, err := st.Delete(ctx, d.end, d.end, ms...)
		require.NoError(t, err)
		require.Positive(t, n)
	}
	app = st.NewAppender()
	require.NoError(t, errOf(app.Append(0, rollup.SeriesLabels(data[2].Labels, six, rollup.Count), t0+5*day, 0)))
	require.NoError(t, app.Commit(ctx))
	whole := func(ms int64) string { return strconv.FormatInt(ms/1000, 10) }
	require.Contains(t, query(`avg_over_time(g{i="1"}[6h])`, windows[0], "0").body, `[`+whole(t0+3*day+6*hour)+`,`)
	require.Contains(t, query(`avg_over_time(g{i="1"}[6h])`, windows[0], "0").body, `[`+whole(t0+4*day+12*hour)+`,`)
	hole := query(`avg_over_time(g{i="1"}[6h])`, windows[0], "")
	require.NotContains(t, hole.body, `[`+whole(t0+3*day+6*hour)+`,`, "no mean without its count")
	require.NotContains(t, hole.body, `[`+whole(t0+4*day+12*hour)+`,`, "no mean without its sum")
	require.Contains(t, query(`avg_over_time(g{i="2"}[6h])`, windows[0], "").body, `[`+whole(t0+5*day)+`,"-Inf"]`, "a count of 0 divides")
	compare(true)
}
