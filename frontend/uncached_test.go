package frontend

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
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
	secs := func(t time.Time) string { return formatTime(t.UnixMilli()) }
	for _, r := range []struct{ start, end, step string }{
		{secs(timeparam.Min), secs(timeparam.Max), "9467280000"},
		{secs(midnight.Add(-time.Hour)), secs(midnight.Add(time.Hour)), "0.001"},
		{secs(timeparam.Max.Add(-72 * time.Hour)), secs(timeparam.Max), "3600"},
		{secs(timeparam.Min), secs(timeparam.Min.Add(72 * time.Hour)), "3600"},
		{secs(midnight.Add(-2 * time.Hour)), secs(midnight.Add(2 * time.Hour)), "60"},
	} {
		form := map[string][]string{"query": {q}, "start": {r.start}, "end": {r.end}, "step": {r.step}}
		sameAnswer(t, fmt.Sprint(r), ask(t, whole, form, nil), ask(t, f, form, noStore))
	}
}
