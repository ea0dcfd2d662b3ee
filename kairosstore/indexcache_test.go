package kairosstore_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/internal/testclock"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// foreignDelete removes everything of one series' row window, and the
// metric's name, the way another writer sharing the keyspace does: KairosDB
// deleting a metric, a second adapter, or an operator with cqlsh. writeTime
// is the deletes' timestamp in ms (§5.4).
type foreignDelete func(t *testing.T, rowKey []byte, metric string, rowTime int64, tags []codec.Tag, writeTime int64)

// TestIndexWrittenAgainAfterForeignDelete: after another writer deleted a
// series' row window with its index rows, samples the store writes reach
// data_points but no reader finds them until the index rows are written
// again. The store writes them again at most IndexCacheTTL after it last
// wrote them, so those samples become visible then.
func TestIndexWrittenAgainAfterForeignDelete(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (engine.Engine, foreignDelete)
	}{
		{"pebble", func(t *testing.T) (engine.Engine, foreignDelete) {
			eng := openPebble(t)
			// The embedded store has no second writer: the engine's
			// own delete, bypassing the Store, stands in for one.
			return eng, func(t *testing.T, key []byte, metric string, rowTime int64, tags []codec.Tag, writeTime int64) {
				irk := engine.IndexedRowKey{Metric: metric, RowTime: rowTime, DataType: codec.TypeDouble, Tags: tags}
				var tagged []engine.TagIndexedRowKey
				for _, tg := range tags {
					tagged = append(tagged, engine.TagIndexedRowKey{IndexedRowKey: irk, Pair: codec.SingleTagPair(tg), Hash: codec.TagCollectionHash(tags)})
				}
				require.NoError(t, eng.Delete(context.Background(), &engine.Deletes{
					WriteTime: writeTime, Rows: [][]byte{key}, RowKeys: []engine.IndexedRowKey{irk}, TagIndexed: tagged,
					RowTimes: []engine.RowTimeIndex{{Metric: metric, RowTime: rowTime}}, MetricNames: []string{metric},
				}))
			}
		}},
		{"cassandra", func(t *testing.T) (engine.Engine, foreignDelete) {
			eng, keyspace := openCassandraKeyspace(t)
			sess := cassandratest.Session(t, keyspace)
			return eng, func(t *testing.T, key []byte, metric string, rowTime int64, tags []codec.Tag, writeTime int64) {
				// Whole partitions, as an operator deletes them; with
				// millisecond timestamps, as everything in a KairosDB
				// keyspace is written.
				rt := time.UnixMilli(rowTime)
				stmts := []struct {
					cql  string
					args []any
				}{
					{`DELETE FROM data_points WHERE key = ?`, []any{key}},
					{`DELETE FROM row_keys WHERE metric = ? AND table_name = 'data_points' AND row_time = ?`, []any{metric, rt}},
					{`DELETE FROM row_key_time_index WHERE metric = ?`, []any{metric}},
					{`DELETE FROM string_index WHERE key = ? AND column1 = ?`, []any{[]byte("metric_names"), metric}},
				}
				for _, tg := range tags {
					stmts = append(stmts, struct {
						cql  string
						args []any
					}{`DELETE FROM tag_indexed_row_keys WHERE metric = ? AND table_name = 'data_points' AND row_time = ? AND single_tag_pair = ?`,
						[]any{metric, rt, codec.SingleTagPair(tg)}})
				}
				for _, st := range stmts {
					require.NoError(t, sess.Query(st.cql, st.args...).Consistency(gocql.One).WithTimestamp(writeTime).Exec(), st.cql)
				}
			}
		}},
	} {
		for _, viaRef := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ref=%v", tc.name, viaRef), func(t *testing.T) {
				t.Parallel()
				testForeignDelete(t, tc.open, viaRef)
			})
		}
	}
}

// testForeignDelete writes through Append, or with viaRef through a handle
// kept across appenders, as the HTTP side does: the handle's series outlives
// the store's series cache, and its row's own mark must expire too.
func testForeignDelete(t *testing.T, open func(t *testing.T) (engine.Engine, foreignDelete), viaRef bool) {
	eng, foreign := open(t)
	const ttl = time.Minute
	clk := testclock.New(time.Now().Truncate(time.Millisecond))
	s := openStore(t, eng, ks.Options{IndexCacheTTL: ttl, Now: clk.Now, TagIndexed: map[string][]string{"foreign": nil}})
	ls := lbl("__name__", "foreign", "k", "a")
	tags := []codec.Tag{{Name: "k", Value: "a"}}
	key := codec.AppendRowKey(nil, codec.RowKey{Metric: "foreign", RowTime: 0, DataType: codec.TypeDouble, Tags: tags})
	readAll := func() []series { return read(t, s, 0, hour-1, eq("__name__", "foreign"), eq("k", "a")) }

	var ref storage.SeriesRef
	put := func(data map[string][]sample) {
		t.Helper()
		if !viaRef {
			write(t, s, data)
			return
		}
		app := s.NewAppender()
		for _, smp := range data[ls] {
			// The first sample names the series by its labels, the
			// others by the ref it returned, as the write handler does.
			lset := labels.EmptyLabels()
			if ref == 0 {
				lset = parseLabels(t, ls)
			}
			var err error
			ref, err = app.Append(ref, lset, smp.T, math.Float64frombits(smp.V))
			require.NoError(t, err)
		}
		require.NoError(t, app.Commit(context.Background()))
	}
	put(map[string][]sample{ls: {{10, bits(1)}}})
	require.Equal(t, []series{{ls, []sample{{10, bits(1)}}}}, readAll())

	clk.Advance(time.Millisecond)
	foreign(t, key, "foreign", 0, tags, clk.Now().UnixMilli())
	require.Empty(t, readAll(), "the foreign delete took the series")

	clk.Advance(time.Second)
	put(map[string][]sample{ls: {{20, bits(2)}}})
	require.Empty(t, readAll(), "within the TTL the store trusts its caches: the sample is stored but not indexed")

	// The first write more than the TTL after the index rows were
	// written writes them again.
	clk.Advance(ttl)
	put(map[string][]sample{ls: {{30, bits(3)}}})
	require.Equal(t, []series{{ls, []sample{{20, bits(2)}, {30, bits(3)}}}}, readAll(),
		"the sample written in between is visible again")
	requireIndexed(t, eng, "foreign", 0, tags)
}

// TestWriteAfterDeleteSameMillisecond: a write that starts after a delete
// through the store returned is kept and indexed at once, even in the
// delete's millisecond, where Cassandra gives the tie to the tombstone.
func TestWriteAfterDeleteSameMillisecond(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		frozen := time.Now().Truncate(time.Millisecond)
		s := openStore(t, eng, ks.Options{Now: func() time.Time { return frozen }, TagIndexed: map[string][]string{"tie": nil}})
		ls := lbl("__name__", "tie", "k", "a")
		write(t, s, map[string][]sample{ls: {{10, bits(1)}}})
		_, err := s.Delete(ctx, math.MinInt64, math.MaxInt64, eq("__name__", "tie"))
		require.NoError(t, err)
		require.Empty(t, read(t, s, 0, hour-1, eq("__name__", "tie")))
		write(t, s, map[string][]sample{ls: {{20, bits(2)}}})
		require.Equal(t, []series{{ls, []sample{{20, bits(2)}}}}, read(t, s, 0, hour-1, eq("__name__", "tie")))
		requireIndexed(t, eng, "tie", 0, []codec.Tag{{Name: "k", Value: "a"}})
	})
}

// requireIndexed checks that every index row of the series (metric, tags)
// in the row window rowTime exists.
func requireIndexed(t *testing.T, eng engine.Engine, metric string, rowTime int64, tags []codec.Tag) {
	t.Helper()
	ctx := context.Background()
	var rowKeys [][]codec.Tag
	require.NoError(t, eng.RowKeys(ctx, metric, rowTime, func(dataType string, tg []codec.Tag) error {
		rowKeys = append(rowKeys, cloneTags(tg)) // valid only during the callback
		return nil
	}))
	require.Equal(t, [][]codec.Tag{tags}, rowKeys, "row_keys")
	for _, tg := range tags {
		var tagged [][]codec.Tag
		require.NoError(t, eng.TagIndexedRowKeys(ctx, metric, rowTime, codec.SingleTagPair(tg), func(dataType string, tg []codec.Tag) error {
			tagged = append(tagged, cloneTags(tg))
			return nil
		}))
		require.Equal(t, [][]codec.Tag{tags}, tagged, "tag_indexed_row_keys")
	}
	var rowTimes []int64
	require.NoError(t, eng.RowTimes(ctx, metric, math.MinInt64, math.MaxInt64, func(rt int64) error {
		rowTimes = append(rowTimes, rt)
		return nil
	}))
	require.Equal(t, []int64{rowTime}, rowTimes, "row_key_time_index")
	var names []string
	require.NoError(t, eng.MetricNames(ctx, func(n string) error { names = append(names, n); return nil }))
	require.Contains(t, names, metric, "string_index")
}

func cloneTags(tags []codec.Tag) []codec.Tag {
	out := make([]codec.Tag, len(tags))
	for i, t := range tags {
		out[i] = codec.Tag{Name: strings.Clone(t.Name), Value: strings.Clone(t.Value)}
	}
	return out
}
