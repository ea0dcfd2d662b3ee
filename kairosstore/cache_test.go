package kairosstore

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// specEngine is the least engine.Engine Open needs: no spec rows, no metric names.
type specEngine struct{ engine.Engine }

func (specEngine) Spec(context.Context, string) (string, bool, error)         { return "", false, nil }
func (specEngine) SetSpec(context.Context, string, string, int64) error       { return nil }
func (specEngine) MetricNames(context.Context, func(name string) error) error { return nil }

// heapPerEntry fills n entries and returns the heap they hold per entry.
func heapPerEntry(n int, fill func()) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

// BenchmarkIndexCacheMemory reports the heap each cache of cache.go holds
// per entry (B/entry), for its table there: series of five labels as
// node_exporter sends them, 100,000 of each.
//
//	go test -run '^$' -bench IndexCacheMemory -benchtime 1x ./kairosstore/
func BenchmarkIndexCacheMemory(b *testing.B) {
	const n = 100_000
	lsets := make([]labels.Labels, n)
	for i := range lsets {
		lsets[i] = labels.FromStrings("__name__", "node_cpu_seconds_total", "cpu", fmt.Sprint(i%64),
			"instance", fmt.Sprintf("node-%d.example.com:9100", i/64), "job", "node", "mode", "user")
	}
	for _, tc := range []struct {
		name string
		fill func(s *Store)
	}{
		{"series", func(s *Store) { // the translated series with its current row and row key
			for _, ls := range lsets {
				sr, err := s.lookupSeries(ls)
				require.NoError(b, err)
				sr.doubleRow(0)
			}
		}},
		{"rowKeys", func(s *Store) {
			keys := make([]string, n)
			for i, ls := range lsets {
				metric, tags, err := s.mapper.Split(ls, nil)
				require.NoError(b, err)
				codec.SortTags(tags)
				keys[i] = string(codec.AppendRowKey(nil, codec.RowKey{Metric: metric, RowTime: 0, DataType: codec.TypeDouble, Tags: tags}))
			}
			s.rowKeys.AddAll(keys, 1)
		}},
		{"metricRows", func(s *Store) {
			for i := range n {
				s.metricRows.Add(metricRowKey(fmt.Sprintf("node_metric_%d_total", i), 0), 1)
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var perEntry float64
			for b.Loop() {
				s, err := Open(context.Background(), specEngine{}, Options{IndexCacheSize: n}, nil, nil)
				require.NoError(b, err)
				perEntry = heapPerEntry(n, func() { tc.fill(s) })
				runtime.KeepAlive(s)
			}
			b.ReportMetric(perEntry, "B/entry")
		})
	}
}

// A series that lost its slot in the ref table comes back with a new ref
// in the slot given out longest ago, not in its old one: two series written
// in turn keep refs that resolve, instead of taking each other's slot on
// every request.
func TestRefTableRing(t *testing.T) {
	tab := newRefTable(2)
	a, b, c := &series{}, &series{}, &series{}
	ref := func(s *series) storage.SeriesRef { return storage.SeriesRef(s.ref.Load()) }
	tab.put(a)
	tab.put(b)
	tab.put(c) // takes a's slot
	require.Nil(t, tab.get(ref(a)), "a's slot was taken")
	require.Same(t, b, tab.get(ref(b)))
	for range 3 {
		tab.put(a)
		tab.put(c)
		require.Same(t, a, tab.get(ref(a)))
		require.Same(t, c, tab.get(ref(c)))
	}
	require.Nil(t, tab.get(ref(c)+2), "a ref not given out yet")
}

// TestSeriesShareMetricName: series of one metric hold its name as one
// string, not each in its own labels, and it is the name of their labels.
func TestSeriesShareMetricName(t *testing.T) {
	s, err := Open(context.Background(), specEngine{}, Options{MetricPrefix: "p."}, nil, nil)
	require.NoError(t, err)
	a, err := s.lookupSeries(labels.FromStrings("__name__", "up", "job", "a"))
	require.NoError(t, err)
	b, err := s.lookupSeries(labels.FromStrings("__name__", "up", "job", "b"))
	require.NoError(t, err)
	c, err := s.lookupSeries(labels.FromStrings("__name__", "down", "job", "a"))
	require.NoError(t, err)
	require.Equal(t, "up", a.name)
	require.Equal(t, "down", c.name)
	require.True(t, unsafe.StringData(a.name) == unsafe.StringData(b.name), "one string for the metric")
	require.True(t, unsafe.StringData(a.ls.Get("__name__")) != unsafe.StringData(a.name), "not pinning a's labels")
}
