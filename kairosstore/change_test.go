package kairosstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

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

// guardLog is an Options.Guard that records its calls, whether the samples
// of metric a were readable at each, and fails BeforeChange or AfterChange
// while told to.
type guardLog struct {
	s                     *ks.Store
	t                     *testing.T
	calls                 []string
	failBefore, failAfter error
}

func (g *guardLog) seen() int {
	return len(read(g.t, g.s, 0, math.MaxInt64, eq("__name__", "a")))
}

func (g *guardLog) BeforeChange(_ context.Context, cs []ks.Change) error {
	g.calls = append(g.calls, fmt.Sprintf("before %v, %d series readable", cs, g.seen()))
	return g.failBefore
}

func (g *guardLog) AfterChange(_ context.Context, cs []ks.Change, began time.Time) error {
	g.calls = append(g.calls, fmt.Sprintf("after %v, %d series readable, began %d", cs, g.seen(), began.UnixMilli()))
	return g.failAfter
}

// TestGuard: the store tells Options.Guard of a commit of received samples
// and of a delete before the engine writes (nothing of it readable yet)
// and after (readable), with the time of the first call; a BeforeChange
// error fails the commit with nothing stored, an AfterChange error fails it
// with the samples stored; commits of derived samples (rollups) are not
// told. The rollup job stores its recomputation marks there, so that a
// write acknowledged is a mark stored (rollupjob, dirty.go).
func TestGuard(t *testing.T) {
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { eng.Close() })
	g := &guardLog{t: t}
	now := int64(7 * hour)
	g.s = openStore(t, eng, ks.Options{Guard: g, Now: func() time.Time { return time.UnixMilli(now) }})
	s := g.s
	ls := parseLabels(t, lbl("__name__", "a", "k", "1"))
	commit := func(ts int64, derived bool) error {
		app := s.NewAppender()
		if derived {
			app.SetDerived(0)
		}
		_, err := app.Append(0, ls, ts, 1)
		require.NoError(t, err)
		return app.Commit(context.Background())
	}

	boom := errors.New("boom")
	g.failBefore = boom
	require.ErrorIs(t, commit(10, false), boom)
	require.Empty(t, read(t, s, 0, math.MaxInt64, eq("__name__", "a")), "nothing stored when BeforeChange fails")
	require.Equal(t, []string{"before [{a 10 10 false false}], 0 series readable"}, g.calls)

	g.failBefore, g.calls = nil, nil
	require.NoError(t, commit(10, false))
	require.Equal(t, []string{
		"before [{a 10 10 false false}], 0 series readable",
		"after [{a 10 10 false false}], 1 series readable, began 25200000",
	}, g.calls)

	g.failAfter, g.calls = boom, nil
	require.ErrorIs(t, commit(20, false), boom)
	require.Len(t, read(t, s, 0, math.MaxInt64, eq("__name__", "a"))[0].Samples, 2, "stored, though the commit failed")

	g.failAfter, g.calls = nil, nil
	require.NoError(t, commit(30, true))
	require.Empty(t, g.calls, "derived commits are not told")

	_, err = s.Delete(context.Background(), 0, 15, eq("__name__", "a"))
	require.NoError(t, err)
	require.Equal(t, []string{
		"before [{a 0 15 true false}], 1 series readable",
		"after [{a 0 15 true false}], 1 series readable, began 25200000",
	}, g.calls)
	g.failBefore, g.calls = boom, nil
	_, err = s.Delete(context.Background(), 0, math.MaxInt64, eq("__name__", "a"))
	require.ErrorIs(t, err, boom)
	require.Len(t, read(t, s, 0, math.MaxInt64, eq("__name__", "a"))[0].Samples, 2, "nothing deleted when BeforeChange fails")
}
