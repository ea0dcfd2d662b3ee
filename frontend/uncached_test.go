package frontend

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
	"github.com/kairos-remote/kairos-adapter/queryapi"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// TestUncachedQueriesInFewerParts: a query whose answer is not cached
// (Cache-Control: no-store, nocache=1, or the cache off) is split into at
// most UncachedParts parts (2·Parallelism+2 by default), still at
// multiples of the split interval; one that is cached keeps the parts the
// cache is keyed by. The answers are the query API's either way. Before,
// every query of a year took 16 parts, each its own parse, plan, series
// lookup and row_keys checks.
func TestUncachedQueriesInFewerParts(t *testing.T) {
	store := testStore(t, nil)
	writeTestData(t, store)
	whole := queryAPI(store)
	now := func() time.Time { return midnight.Add(48 * time.Hour) }
	noStore := http.Header{"Cache-Control": {"no-store"}}
	const q = `sum by (job) (rate(http_requests_total[5m]))`
	for _, c := range []struct {
		name    string
		opts    Options
		form    func() map[string][]string
		header  http.Header
		parts   float64 // at most
		atLeast float64
	}{
		// 4h in 10m intervals: 24 parts at most 16, uncached at most 6.
		{"no-store", Options{SplitInterval: 10 * time.Minute, Parallelism: 2, CacheBytes: 16 << 20, Now: now}, nil, noStore, 6, 4},
		{"nocache=1", Options{SplitInterval: 10 * time.Minute, Parallelism: 2, CacheBytes: 16 << 20, Now: now}, func() map[string][]string {
			f := rangeForm(q, midnight.Add(-2*time.Hour), midnight.Add(2*time.Hour), time.Minute)
			f.Set("nocache", "1")
			return f
		}, nil, 6, 4},
		{"cache off", Options{SplitInterval: 10 * time.Minute, Parallelism: 2}, nil, nil, 6, 4},
		{"one core", Options{SplitInterval: 10 * time.Minute, Parallelism: 1}, nil, nil, 4, 3},
		{"set", Options{SplitInterval: 10 * time.Minute, Parallelism: 2, UncachedParts: 12}, nil, nil, 12, 8},
		// Parts of 60m at rows of 40m: 80m, 4 parts instead of 5 (+2h
		// alone in the fifth), where an evaluation reads
		// no further back than a step (5m); at a step of 1m its windows
		// overlap the step before, a row is read twice anyway, and the
		// parts stay as they were.
		{"row aligned", Options{SplitInterval: 10 * time.Minute, Parallelism: 2, Shards: 1, RowAlign: 40 * time.Minute}, func() map[string][]string {
			return rangeForm(q, midnight.Add(-2*time.Hour), midnight.Add(2*time.Hour), 5*time.Minute)
		}, nil, 4, 4},
		{"windows overlap", Options{SplitInterval: 10 * time.Minute, Parallelism: 2, Shards: 1, RowAlign: 40 * time.Minute}, nil, nil, 5, 5},
		// A step that is a multiple of the largest resolution: aligned; one
		// that is not (its windows end inside buckets): as before.
		{"on the grain", Options{SplitInterval: 10 * time.Minute, Parallelism: 2, Shards: 1, RowAlign: 40 * time.Minute, AlignGrain: 5 * time.Minute}, func() map[string][]string {
			return rangeForm(q, midnight.Add(-2*time.Hour), midnight.Add(2*time.Hour), 5*time.Minute)
		}, nil, 4, 4},
		{"off the grain", Options{SplitInterval: 10 * time.Minute, Parallelism: 2, Shards: 1, RowAlign: 40 * time.Minute, AlignGrain: 10 * time.Minute}, func() map[string][]string {
			return rangeForm(q, midnight.Add(-2*time.Hour), midnight.Add(2*time.Hour), 5*time.Minute)
		}, nil, 5, 5},
		{"start off the step", Options{SplitInterval: 10 * time.Minute, Parallelism: 2, Shards: 1, RowAlign: 40 * time.Minute, AlignGrain: 5 * time.Minute}, func() map[string][]string {
			return rangeForm(q, midnight.Add(-2*time.Hour+time.Second), midnight.Add(2*time.Hour+time.Second), 5*time.Minute)
		}, nil, 5, 5},
		// 4h across midnight in 4h intervals: uncached, one part (in two
		// shards), not the two uneven parts either side of midnight;
		// cached, the two parts the cache is keyed by.
		{"no longer than the interval", Options{SplitInterval: 4 * time.Hour, Parallelism: 2, Shards: 2}, nil, nil, 1, 1},
		{"no longer than the interval, cached", Options{SplitInterval: 4 * time.Hour, Parallelism: 2, Shards: 2, CacheBytes: 16 << 20, Now: now}, nil, nil, 2, 2},
		{"longer than the interval", Options{SplitInterval: 4*time.Hour - time.Minute, Parallelism: 2, Shards: 2}, nil, nil, 2, 2},
		{"cached", Options{SplitInterval: 10 * time.Minute, Parallelism: 2, CacheBytes: 16 << 20, Now: now}, nil, nil, 16, 13},
		// Parallelism far above MaxParts: MaxParts bounds, no overflow.
		{"huge parallelism", Options{SplitInterval: 10 * time.Minute, Parallelism: 1 << 62, Shards: 1}, nil, nil, 16, 13},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			f := New(whole, c.opts, reg, nil)
			form := rangeForm(q, midnight.Add(-2*time.Hour), midnight.Add(2*time.Hour), time.Minute)
			if c.form != nil {
				form = c.form()
			}
			sameAnswer(t, c.name, ask(t, whole, form, nil), ask(t, f, form, c.header))
			parts := counter(t, reg, "kairos_adapter_frontend_parts_evaluated_total", "")
			require.LessOrEqual(t, parts, c.parts)
			require.GreaterOrEqual(t, parts, c.atLeast)
		})
	}
	// Prometheus's bounds and steps of 1 ms and 300 years, uncached: the
	// same answers (or refusals) as the query API's.
	f := New(whole, Options{}, prometheus.NewRegistry(), nil)
	aligned := New(whole, Options{Parallelism: 2, RowAlign: 3 * 7 * 24 * time.Hour}, prometheus.NewRegistry(), nil)
	secs := func(t time.Time) string { return formatTime(t.UnixMilli()) }
	for _, r := range []struct{ start, end, step string }{
		{secs(timeparam.Min), secs(timeparam.Max), "9467280000"},
		{secs(midnight.Add(-time.Hour)), secs(midnight.Add(time.Hour)), "0.001"},
		{secs(timeparam.Max.Add(-72 * time.Hour)), secs(timeparam.Max), "3600"},
		{secs(timeparam.Min), secs(timeparam.Min.Add(72 * time.Hour)), "3600"},
		{secs(midnight.Add(-2 * time.Hour)), secs(midnight.Add(2 * time.Hour)), "60"},
	} {
		form := map[string][]string{"query": {q}, "start": {r.start}, "end": {r.end}, "step": {r.step}}
		want := ask(t, whole, form, nil)
		sameAnswer(t, fmt.Sprint(r), want, ask(t, f, form, noStore))
		sameAnswer(t, fmt.Sprint("row aligned ", r), want, ask(t, aligned, form, noStore))
	}
}

// TestPartsAlignedToRows: an uncached query's parts longer than a row
// start at multiples of the row width, so no row window holds evaluation
// times of two parts, with no more parts than before and every evaluation
// time in exactly one; at Prometheus's bounds, steps of 1 ms and 300
// years and ranges of 1 ms nothing overflows.
func TestPartsAlignedToRows(t *testing.T) {
	day := int64(24 * time.Hour / time.Millisecond)
	row := 21 * day
	minMs, maxMs := timeparam.Min.UnixMilli(), timeparam.Max.UnixMilli()
	y300 := 300 * 365 * day
	year := (1_764_115_200_000 / day) * day // a UTC midnight in 2025
	for _, c := range []struct{ start, end, step int64 }{
		{year, year + 365*day, 6 * 3600_000},
		{year + 1, year + 365*day - 7, 6 * 3600_000},
		{year, year + 90*day, 60_000},
		{year, year + 30*day, 3600_000},
		{year, year + 1, 1},
		{year, year, 1},
		{minMs, maxMs, y300},
		{minMs, minMs + 400*day, day},
		{maxMs - 400*day, maxMs, day},
		{maxMs - 5000, maxMs, 1},
	} {
		iv := partInterval(c.start, c.end, day, 6)
		aligned := alignInterval(iv, day, row)
		before, after := splitParts(c.start, c.end, c.step, iv), splitParts(c.start, c.end, c.step, aligned)
		require.LessOrEqual(t, len(after), len(before), "%+v", c)
		require.LessOrEqual(t, len(after), 6, "%+v", c)
		next := c.start
		for i, p := range after {
			require.Equal(t, next, p.start, "%+v: every time in one part", c)
			if i > 0 && iv >= row {
				require.Zero(t, floorDiv(p.start, row)*row%aligned, "%+v: a part starts in the row window of its interval", c)
				require.Less(t, floorDiv(after[i-1].end, row), floorDiv(p.start, row), "%+v: two parts in one row window", c)
			}
			if p.end > math.MaxInt64-c.step {
				next = p.end
				break
			}
			next = p.end + c.step
		}
	}
	require.Equal(t, 105*day, alignInterval(92*day, day, row), "a year in at most 6 parts: 92 days, then 5 rows")
	require.Equal(t, 42*day, alignInterval(42*day, day, row), "already aligned")
	require.Equal(t, 5*day, alignInterval(5*day, day, row), "parts shorter than a row are left as they are")
	require.Equal(t, 30*day, alignInterval(30*day, 2*day, row), "a row that is no multiple of the interval")
	require.Equal(t, int64(math.MaxInt64-1), alignInterval(math.MaxInt64-1, 1, 1<<62+1), "no multiple holds")
	require.Equal(t, int64(-1), alignInterval(-1, day, row), "splitting off stays off")
	require.Equal(t, 92*day, alignInterval(92*day, day, 0), "no rows given")
}

// TestRollupQueriesInOnePart: an uncached query whose every selector the
// query API reads from rollups (its plan, at the query's step and range
// and max_source_resolution) is answered whole, one part and no shards,
// where it would be cut into parts and shards that each pay their own
// evaluation for reads that need no spreading; the same query read raw,
// one that mixes a raw selector in, a subquery's and a cached one keep
// their parts. The answers are the query API's either way.
func TestRollupQueriesInOnePart(t *testing.T) {
	store := testStore(t, nil)
	writeTestData(t, store)
	whole := queryAPIWith(store, queryapi.Options{RollupResolutions: []rollup.Resolution{rollup.Resolution(5 * time.Minute), rollup.Resolution(time.Hour)}})
	now := func() time.Time { return midnight.Add(48 * time.Hour) }
	noStore := http.Header{"Cache-Control": {"no-store"}}
	start, end := midnight.Add(-2*time.Hour), midnight.Add(2*time.Hour)
	uncached := Options{SplitInterval: 10 * time.Minute, Parallelism: 2}
	for _, c := range []struct {
		name, q, src string
		opts         Options
		header       http.Header
		step         time.Duration
		start        time.Time
		whole        bool // else cut: at least 3 parts
	}{
		{name: "max", q: `max_over_time(http_requests_total[1h])`, whole: true},
		{name: "rate, sharded before", q: `sum by (job) (rate(http_requests_total[1h]))`, whole: true},
		{name: "avg, sharded before", q: `avg by (job) (avg_over_time(http_requests_total[1h]))`, whole: true},
		{name: "count", q: `count_over_time(http_requests_total[1h])`, whole: true},
		{name: "shards set", q: `sum(max_over_time(http_requests_total[1h]))`, opts: Options{SplitInterval: 10 * time.Minute, Parallelism: 2, Shards: 3}, whole: true},
		{name: "no-store", q: `max_over_time(http_requests_total[1h])`, opts: Options{SplitInterval: 10 * time.Minute, Parallelism: 2, CacheBytes: 16 << 20, Now: now}, header: noStore, whole: true},
		{name: "offset", q: `max_over_time(http_requests_total[1h] offset 1h)`, whole: true},
		{name: "5m", q: `max_over_time(http_requests_total[1h])`, src: "5m", whole: true},
		{name: "1h", q: `sum(rate(http_requests_total[1h]))`, src: "1h", whole: true},
		{name: "auto", q: `max_over_time(http_requests_total[1h])`, src: "auto", whole: true},
		{name: "raw", q: `max_over_time(http_requests_total[1h])`, src: "0"},
		{name: "garbage resolution", q: `max_over_time(http_requests_total[1h])`, src: "1e300"},
		{name: "rollup and raw", q: `rate(http_requests_total[1h]) / http_requests_total`},
		{name: "subquery", q: `max_over_time(rate(http_requests_total[1h])[1h:5m])`},
		{name: "offset misaligned", q: `max_over_time(http_requests_total[1h] offset 7m)`},
		{name: "start off the grid", q: `max_over_time(http_requests_total[1h])`, start: start.Add(time.Second)},
		{name: "step too short", q: `max_over_time(http_requests_total[1h])`, step: time.Minute},
		{name: "cached", q: `max_over_time(http_requests_total[1h])`, opts: Options{SplitInterval: 10 * time.Minute, Parallelism: 2, CacheBytes: 16 << 20, Now: now}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := c.opts
			if opts.SplitInterval == 0 {
				opts = uncached
			}
			reg := prometheus.NewRegistry()
			f := New(whole, opts, reg, nil)
			step, from := cmp.Or(c.step, time.Hour), start
			if !c.start.IsZero() {
				from = c.start
			}
			form := rangeForm(c.q, from, end, step)
			if c.src != "" {
				form.Set("max_source_resolution", c.src)
			}
			sameAnswer(t, c.name, ask(t, whole, form, nil), ask(t, f, form, c.header))
			parts := counter(t, reg, "kairos_adapter_frontend_parts_evaluated_total", "")
			shards := counter(t, reg, "kairos_adapter_frontend_shards_total", "")
			if c.whole {
				require.Equal(t, 1.0, counter(t, reg, "kairos_adapter_frontend_queries_total", "whole"), "answered whole")
				require.Zero(t, parts, "parts")
				require.Zero(t, shards, "shards")
				return
			}
			require.Zero(t, counter(t, reg, "kairos_adapter_frontend_queries_total", "whole"), "answered whole")
			require.GreaterOrEqual(t, parts, 3.0, "parts")
		})
	}
	// Prometheus's bounds and steps of 1 ms and 300 years, rollup queries
	// uncached: the same answers (or refusals) as the query API's.
	f := New(whole, Options{}, prometheus.NewRegistry(), nil)
	secs := func(t time.Time) string { return formatTime(t.UnixMilli()) }
	hour := func(t time.Time) time.Time { return t.Truncate(time.Hour) }
	for _, r := range []struct{ start, end, step string }{
		{secs(timeparam.Min), secs(timeparam.Max), "9467280000"},
		{secs(hour(timeparam.Min.Add(time.Hour))), secs(timeparam.Max), "9198000000"}, // 291.7 years, a multiple of 1h
		{secs(midnight.Add(-time.Hour)), secs(midnight.Add(-time.Hour + 5*time.Second)), "0.001"},
		{secs(hour(timeparam.Max.Add(-72 * time.Hour))), secs(timeparam.Max), "3600"},
		{secs(hour(timeparam.Min.Add(time.Hour))), secs(timeparam.Min.Add(72 * time.Hour)), "3600"},
	} {
		for _, q := range []string{`max_over_time(http_requests_total[1h])`, `sum by (job) (rate(http_requests_total[1h]))`, `avg(avg_over_time(http_requests_total[1h] offset 1h))`} {
			for _, src := range []string{"", "0", "5m", "1h", "auto", "NaN"} {
				form := map[string][]string{"query": {q}, "start": {r.start}, "end": {r.end}, "step": {r.step}, "max_source_resolution": {src}}
				sameAnswer(t, fmt.Sprint(q, r, src), ask(t, whole, form, nil), ask(t, f, form, noStore))
			}
		}
	}
}
