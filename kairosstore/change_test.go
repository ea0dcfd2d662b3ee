package kairosstore_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// TestOnChange: every commit reports each metric it wrote with the times of
// its samples (floats, stale markers and histograms alike), by Prometheus
// name without the prefix, and a delete reports the metrics it selected and
// its range.
func TestOnChange(t *testing.T) {
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { eng.Close() })
	var (
		mu  sync.Mutex
		got [][]ks.Change
	)
	s := openStore(t, eng, ks.Options{MetricPrefix: "p.", OnChange: func(c []ks.Change) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, append([]ks.Change(nil), c...))
	}})
	write(t, s, map[string][]sample{
		lbl("__name__", "a", "k", "1"): {{50, bits(1)}, {10, bits(2)}},
		lbl("__name__", "a", "k", "2"): {{70, bits(math.NaN())}},
		lbl("__name__", "b"):           {{5 * hour, bits(3)}},
	})
	require.Len(t, got, 1)
	require.ElementsMatch(t, []ks.Change{{Metric: "a", MinT: 10, MaxT: 70}, {Metric: "b", MinT: 5 * hour, MaxT: 5 * hour}}, got[0])

	_, err = s.Delete(context.Background(), 20, 60, eq("__name__", "a"), eq("k", "1"))
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []ks.Change{{Metric: "a", MinT: 20, MaxT: 60, Deleted: true}}, got[1])
}

// TestShardPlan: the shards of a selector partition its series, each series
// in exactly one shard, and a malformed plan is refused.
func TestShardPlan(t *testing.T) {
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { eng.Close() })
	s := openStore(t, eng, ks.Options{})
	data := map[string][]sample{}
	for i := range 40 {
		data[lbl("__name__", "sh", "i", fmt.Sprint(i))] = []sample{{10, bits(float64(i))}}
	}
	write(t, s, data)
	seen := map[string]int{}
	for i := range 4 {
		got := readHinted(t, s, 0, 100, &storage.SelectHints{Start: 0, End: 100, ShardIndex: uint64(i), ShardCount: 4}, eq("__name__", "sh"))
		require.NotEmpty(t, got, "shard %d of 40 series", i)
		require.Less(t, len(got), 40)
		for _, g := range got {
			seen[g.Labels]++
		}
	}
	require.Len(t, seen, 40)
	for ls, n := range seen {
		require.Equal(t, 1, n, ls)
	}
	q, err := s.Querier(0, 100)
	require.NoError(t, err)
	set := q.Select(context.Background(), true, &storage.SelectHints{ShardIndex: 4, ShardCount: 4}, eq("__name__", "sh"))
	require.False(t, set.Next())
	require.ErrorContains(t, set.Err(), "no such shard")
}
