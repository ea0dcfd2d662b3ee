package frontend

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
)

// TestAutoShardsFillIdleCoresOnly: by default a query is sharded only when
// its parts leave cores idle. A query of as many parts as cores was
// sharded all the same, each shard costing another evaluation of every
// part for no core left to run it on.
func TestAutoShardsFillIdleCoresOnly(t *testing.T) {
	store := testStore(t, nil)
	writeTestData(t, store)
	whole := queryAPI(store)
	const q = `sum by (instance) (rate(http_requests_total[5m]))`
	start, end := midnight.Add(-90*time.Minute), midnight.Add(90*time.Minute)
	for _, c := range []struct {
		name              string
		opts              Options
		parts, subQueries float64
	}{
		// 20m parts: 10 of them, on 2 cores (uncached, as many as the
		// cached would be).
		{"parts fill the cores", Options{SplitInterval: 20 * time.Minute, Parallelism: 2, UncachedParts: 16}, 10, 10},
		{"one part, two cores", Options{SplitInterval: -1, Parallelism: 2}, 1, 2},
		{"two parts, three cores", Options{SplitInterval: 2 * time.Hour, Parallelism: 3}, 2, 4},
		// No longer than the interval and uncached: not cut at midnight.
		{"one part across midnight, three cores", Options{SplitInterval: 24 * time.Hour, Parallelism: 3}, 1, 3},
		// Nothing to split or shard: the query API answers it whole.
		{"one core", Options{SplitInterval: -1, Parallelism: 1}, 0, 0},
		// A count set by the operator is kept, whatever the parts.
		{"shards set", Options{SplitInterval: 20 * time.Minute, Parallelism: 2, Shards: 3, UncachedParts: 16}, 10, 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			f := New(whole, c.opts, reg, nil)
			form := rangeForm(q, start, end, time.Minute)
			sameAnswer(t, c.name, ask(t, whole, form, nil), ask(t, f, form, nil))
			parts := counter(t, reg, "kairos_adapter_frontend_parts_evaluated_total", "")
			shards := counter(t, reg, "kairos_adapter_frontend_shards_total", "")
			require.Equal(t, c.parts, parts, "parts")
			require.Equal(t, c.subQueries, max(shards, parts), "sub-queries (shards, or parts unsharded)")
		})
	}
}

func TestShardsPerPart(t *testing.T) {
	for _, c := range []struct {
		shards, parallelism, parts, want int
	}{
		{0, 2, 1, 2},
		{0, 2, 2, 1},
		{0, 2, 15, 1},
		{0, 8, 3, 3},
		{0, 1, 1, 1},
		{0, 2, 0, 1},
		{0, 100, 1, maxAutoShards},
		{0, math.MaxInt, 1, maxAutoShards},
		{0, math.MaxInt, 2, maxAutoShards},
		{0, math.MaxInt, math.MaxInt - 1, 2},
		{0, math.MaxInt, math.MaxInt, 1},
		{4, 2, 15, 4},
		{1, 8, 1, 1},
	} {
		require.Equal(t, c.want, shardsPerPart(c.shards, c.parallelism, c.parts), fmt.Sprint(c))
	}
}

// TestAutoShardsOnHostileRanges: the shard count follows from the parts
// alone, so the bounds of time and steps of 1 ms or 300 years change
// nothing about what a query is refused or answered with.
func TestAutoShardsOnHostileRanges(t *testing.T) {
	store := testStore(t, nil)
	writeTestData(t, store)
	whole := queryAPI(store)
	f := New(whole, Options{}, prometheus.NewRegistry(), nil)
	secs := func(t time.Time) string { return formatTime(t.UnixMilli()) }
	for _, c := range []struct{ start, end, step string }{
		{secs(timeparam.Min), secs(timeparam.Max), "9467280000"}, // 300 years
		{secs(midnight), secs(midnight.Add(10 * time.Second)), "0.001"},
		{secs(timeparam.Max.Add(-time.Hour)), secs(timeparam.Max), "60"},
		{secs(timeparam.Min), secs(timeparam.Min.Add(time.Hour)), "60"},
	} {
		for _, q := range []string{`sum(rate(http_requests_total[5m]))`, `avg by (job) (avg_over_time(http_requests_total[6h]))`} {
			form := map[string][]string{"query": {q}, "start": {c.start}, "end": {c.end}, "step": {c.step}}
			sameAnswer(t, fmt.Sprint(q, c), ask(t, whole, form, nil), ask(t, f, form, nil))
		}
	}
}
