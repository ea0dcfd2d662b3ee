package kairosstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/value"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// kairosDelete is KairosDB's delete-by-query of one whole row window of
// metric (docs/kairosdb-layout.md §8), done behind the store's back. It finds
// keys only in the metric's own row_keys, as KairosDB does, so rows indexed
// under the side metric <metric>#nonfinite are never touched. With tag set
// the query deletes only the series carrying that tag, and keeps
// row_key_time_index. With indexOnly it removes just the row_keys entries and
// leaves the cells, as an operator cleaning the index might.
type kairosDelete struct {
	tag       *codec.Tag
	indexOnly bool
}

// deleteFunc runs a kairosDelete of (metric, rowTime) on one engine.
type deleteFunc func(t *testing.T, metric string, rowTime int64, d kairosDelete)

// forEachEngineWithDelete is forEachEngine with a way to delete as KairosDB
// does: on Cassandra with KairosDB's own CQL statements, on the embedded
// engine, which has no CQL, with the same deletes through Engine.Delete.
func forEachEngineWithDelete(t *testing.T, fn func(t *testing.T, eng engine.Engine, del deleteFunc)) {
	t.Run("pebble", func(t *testing.T) {
		t.Parallel()
		eng := openPebble(t)
		fn(t, eng, func(t *testing.T, metric string, rt int64, d kairosDelete) {
			t.Helper()
			ctx := context.Background()
			dels := &engine.Deletes{WriteTime: time.Now().UnixMilli()}
			require.NoError(t, eng.RowKeys(ctx, metric, rt, func(dataType string, tags []codec.Tag) error {
				tags = append([]codec.Tag(nil), tags...)
				if !d.matches(tags) {
					return nil
				}
				codec.SortTags(tags)
				key := codec.AppendRowKey(nil, codec.RowKey{Metric: metric, RowTime: rt, DataType: dataType, Tags: tags})
				dels.RowKeys = append(dels.RowKeys, engine.IndexedRowKey{Metric: metric, RowTime: rt, DataType: dataType, Tags: tags})
				if !d.indexOnly {
					dels.Rows = append(dels.Rows, key)
					dels.LegacyRowKeys = append(dels.LegacyRowKeys, engine.LegacyRowKey{Metric: metric, RowKey: key})
				}
				return nil
			}))
			require.NotEmpty(t, dels.RowKeys, "nothing to delete")
			if d.tag == nil && !d.indexOnly {
				dels.RowTimes = []engine.RowTimeIndex{{Metric: metric, RowTime: rt}}
			}
			require.NoError(t, eng.Delete(ctx, dels))
		})
	})
	t.Run("cassandra", func(t *testing.T) {
		t.Parallel()
		eng, keyspace := openCassandraKeyspace(t)
		session := cassandratest.Session(t, keyspace)
		fn(t, eng, func(t *testing.T, metric string, rt int64, d kairosDelete) {
			t.Helper()
			ctx := context.Background()
			// KairosDB's tombstones carry millisecond timestamps (§8 step 5).
			ms := time.Now().UnixMilli()
			exec := func(stmt string, args ...any) {
				t.Helper()
				require.NoError(t, session.Query(stmt, args...).ExecContext(ctx), stmt)
			}
			iter := session.Query(`SELECT data_type, tags FROM row_keys WHERE metric = ? AND table_name = 'data_points' AND row_time = ?`, metric, rt).IterContext(ctx)
			var (
				dataType string
				tagMap   map[string]string
				n        int
			)
			for iter.Scan(&dataType, &tagMap) {
				var tags []codec.Tag
				for k, v := range tagMap {
					tags = append(tags, codec.Tag{Name: k, Value: v})
				}
				tagMap = nil
				if !d.matches(tags) {
					continue
				}
				n++
				codec.SortTags(tags)
				key := codec.AppendRowKey(nil, codec.RowKey{Metric: metric, RowTime: rt, DataType: dataType, Tags: tags})
				if !d.indexOnly {
					exec(`DELETE FROM data_points USING TIMESTAMP ? WHERE key = ?`, ms, key)
					exec(`DELETE FROM row_key_index USING TIMESTAMP ? WHERE key = ? AND column1 = ?`, ms, []byte(metric), key)
				}
				exec(`DELETE FROM row_keys USING TIMESTAMP ? WHERE metric = ? AND table_name = 'data_points' AND row_time = ? AND data_type = ? AND tags = ?`,
					ms, metric, rt, dataType, tagsMap(tags))
			}
			require.NoError(t, iter.Close())
			require.NotZero(t, n, "nothing to delete")
			if d.tag == nil && !d.indexOnly {
				exec(`DELETE FROM row_key_time_index USING TIMESTAMP ? WHERE metric = ? AND table_name = 'data_points' AND row_time = ?`, ms, metric, rt)
			}
		})
	})
}

func (d kairosDelete) matches(tags []codec.Tag) bool {
	if d.tag == nil {
		return true
	}
	for _, tg := range tags {
		if tg == *d.tag {
			return true
		}
	}
	return false
}

func tagsMap(tags []codec.Tag) map[string]string {
	m := make(map[string]string, len(tags))
	for _, tg := range tags {
		m[tg.Name] = tg.Value
	}
	return m
}

// TestKairosDBDeleteHidesNonFinite: when KairosDB (or an operator) deletes a
// series' row window through the metric's own index, the stale markers, NaNs
// and infinities of that window, which sit in rows indexed under the side
// metric that KairosDB never visits, are not read back either. Other windows
// and other series are untouched, and Store.Delete still removes the
// orphaned rows.
func TestKairosDBDeleteHidesNonFinite(t *testing.T) {
	forEachEngineWithDelete(t, func(t *testing.T, eng engine.Engine, del deleteFunc) {
		for _, tc := range []struct {
			name string
			del  kairosDelete
			// bGone: series b loses window 0 as well.
			bGone bool
		}{
			{name: "metric", del: kairosDelete{}, bGone: true},
			{name: "series by tag", del: kairosDelete{tag: &codec.Tag{Name: "k", Value: "a"}}},
			{name: "index entries only", del: kairosDelete{indexOnly: true}, bGone: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				s := openStore(t, eng, ks.Options{})
				metric := "orphan_" + map[string]string{"metric": "m", "series by tag": "t", "index entries only": "i"}[tc.name]
				const base = 100 * hour
				a := lbl("__name__", metric, "k", "a")
				b := lbl("__name__", metric, "k", "b")
				window1 := []sample{{base + hour + 10, bits(7)}, {base + hour + 20, value.StaleNaN}}
				bWindow0 := []sample{{base + 10, bits(1)}, {base + 20, value.StaleNaN}}
				write(t, s, map[string][]sample{
					a: append([]sample{
						{base + 10, bits(1)},
						{base + 20, value.StaleNaN},
						{base + 30, 0x7ff8_0000_0000_0bad}, // a NaN with a payload
						{base + 40, bits(math.Inf(1))},
						{base + 50, bits(math.Inf(-1))},
					}, window1...),
					b: bWindow0,
				})
				name := eq("__name__", metric)
				require.Len(t, read(t, s, base, base+hour-1, name), 2, "both series before the delete")

				del(t, metric, base, tc.del)

				require.Empty(t, read(t, s, base, base+hour-1, name, eq("k", "a")), "series a in the deleted window")
				want := []series{{a, window1}}
				if !tc.bGone {
					want = append(want, series{b, bWindow0})
				}
				require.Equal(t, want, read(t, s, base, base+2*hour, name))

				// The orphans are still found by Store.Delete, which
				// removes the side index's rows with the series.
				_, err := s.Delete(ctx, math.MinInt64, math.MaxInt64, name)
				require.NoError(t, err)
				require.NoError(t, eng.RowTimes(ctx, metric+ks.NonFiniteSuffix, math.MinInt64, math.MaxInt64, func(rt int64) error {
					t.Errorf("row_key_time_index of %s%s still has %d", metric, ks.NonFiniteSuffix, rt)
					return nil
				}))
				require.Empty(t, read(t, s, math.MinInt64, math.MaxInt64, name))
			})
		}
	})
}

// TestNonFiniteOnlyRowWindow: a series whose only samples in a row window are
// non-finite (a stale marker after the series ended, a NaN-only gauge) is
// read back, whether or not the series had finite samples elsewhere, in the
// same request or an earlier one, for tag-indexed metrics too, and after
// Store.Delete removed the window's index rows.
func TestNonFiniteOnlyRowWindow(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		for _, opts := range []struct {
			name string
			opts ks.Options
		}{
			{"plain", ks.Options{}},
			{"tag-indexed", ks.Options{TagIndexed: map[string][]string{"*": nil}}},
		} {
			t.Run(opts.name, func(t *testing.T) {
				ctx := context.Background()
				s := openStore(t, eng, opts.opts)
				metric := "nonfinite_only_" + map[string]string{"plain": "p", "tag-indexed": "t"}[opts.name]
				ls := func(k string) string { return lbl("__name__", metric, "k", k) }
				check := func(k string, want ...sample) {
					t.Helper()
					// Pinning k reads tag_indexed_row_keys for a
					// tag-indexed metric (§6.3).
					require.Equal(t, []series{{ls(k), want}}, read(t, s, 0, 10*hour, eq("__name__", metric), eq("k", k)), "series k=%s", k)
				}

				// Stale marker alone in a new window, a request after the
				// finite samples of the window before.
				write(t, s, map[string][]sample{ls("later"): {{10, bits(1)}, {20, bits(2)}}})
				write(t, s, map[string][]sample{ls("later"): {{hour + 5, value.StaleNaN}}})
				check("later", sample{10, bits(1)}, sample{20, bits(2)}, sample{hour + 5, value.StaleNaN})

				// In the same request as the finite samples.
				write(t, s, map[string][]sample{ls("same"): {{10, bits(1)}, {2*hour + 5, value.StaleNaN}}})
				check("same", sample{10, bits(1)}, sample{2*hour + 5, value.StaleNaN})

				// A series that never had a finite sample.
				write(t, s, map[string][]sample{ls("never"): {{3*hour + 1, value.NormalNaN}, {3*hour + 2, bits(math.Inf(1))}}})
				check("never", sample{3*hour + 1, value.NormalNaN}, sample{3*hour + 2, bits(math.Inf(1))})

				// After Store.Delete removed window 0's index rows, the
				// next write there is a stale marker alone.
				_, err := s.Delete(ctx, 0, hour-1, eq("__name__", metric), eq("k", "later"))
				require.NoError(t, err)
				check("later", sample{hour + 5, value.StaleNaN})
				write(t, s, map[string][]sample{ls("later"): {{30, value.StaleNaN}}})
				check("later", sample{30, value.StaleNaN}, sample{hour + 5, value.StaleNaN})
			})
		}
	})
}

// BenchmarkAppendNonFinite is BenchmarkAppend for a request of non-finite
// samples only (summary quantiles without observations are NaN on every
// scrape), with the commit, so it counts the index rows they queue.
func BenchmarkAppendNonFinite(b *testing.B) {
	s, err := ks.Open(context.Background(), openPebble(b), ks.Options{}, nil, nil)
	require.NoError(b, err)
	series := benchSeries(1000)
	b.ReportAllocs()
	ts := int64(0)
	for b.Loop() {
		app := s.NewAppender()
		for _, ls := range series {
			for k := range int64(10) {
				if err := errOf(app.Append(0, ls, ts+k*15000, math.NaN())); err != nil {
					b.Fatal(err)
				}
			}
		}
		require.NoError(b, app.Commit(context.Background()))
		ts += 10 * 15000
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(series)*10), "ns/sample")
}
