package enginetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// testDelete checks every kind of delete of §8. Each removes exactly its
// target; afterwards a write with an older write time than the delete stays
// invisible (Cassandra's tombstone), while a newer one shows again. Data
// written before the delete but with a newer write time survives it.
func testDelete(t *testing.T, start opener) {
	const rt = 1358985600000
	t.Run("Row", func(t *testing.T) {
		e := start(t)
		wt := writeTime()
		a, b := []byte("row a"), []byte("row b")
		write(t, e, &engine.Batch{WriteTime: wt, Cells: []engine.Cell{
			{Key: a, Column: 1, Value: []byte("1")},
			{Key: a, Column: 2, Value: []byte("2")},
			{Key: a, Column: 0xd84b17fe, Value: []byte("3")},
			{Key: b, Column: 1, Value: []byte("b1")},
		}})
		write(t, e, &engine.Batch{WriteTime: wt + 200, Cells: []engine.Cell{{Key: a, Column: 4, Value: []byte("after")}}})

		del(t, e, &engine.Deletes{WriteTime: wt + 100, Rows: [][]byte{a}})
		require.Equal(t, []cell{{4, []byte("after")}}, cells(t, e, a, 0, 0xffffffff))
		require.Equal(t, []cell{{1, []byte("b1")}}, cells(t, e, b, 0, 0xffffffff))

		write(t, e, &engine.Batch{WriteTime: wt + 50, Cells: []engine.Cell{{Key: a, Column: 1, Value: []byte("older")}}})
		require.Equal(t, []cell{{4, []byte("after")}}, cells(t, e, a, 0, 0xffffffff))
		write(t, e, &engine.Batch{WriteTime: wt + 150, Cells: []engine.Cell{{Key: a, Column: 2, Value: []byte("newer")}}})
		require.Equal(t, []cell{{2, []byte("newer")}, {4, []byte("after")}}, cells(t, e, a, 0, 0xffffffff))
	})

	t.Run("CellRange", func(t *testing.T) {
		e := start(t)
		wt := writeTime()
		a, b := []byte("row a"), []byte("row b")
		batch := &engine.Batch{WriteTime: wt}
		for c := uint32(1); c <= 5; c++ {
			batch.Cells = append(batch.Cells,
				engine.Cell{Key: a, Column: c, Value: []byte{byte('0' + c)}},
				engine.Cell{Key: b, Column: c, Value: []byte{byte('0' + c)}},
			)
		}
		write(t, e, batch)

		// Both bounds are inclusive (§8 step 2).
		del(t, e, &engine.Deletes{WriteTime: wt + 100, CellRanges: []engine.CellRange{{Key: a, Lo: 2, Hi: 4}}})
		require.Equal(t, []cell{{1, []byte("1")}, {5, []byte("5")}}, cells(t, e, a, 0, 0xffffffff))
		require.Len(t, cells(t, e, b, 0, 0xffffffff), 5)

		// The tombstone covers 2..4 only.
		write(t, e, &engine.Batch{WriteTime: wt + 50, Cells: []engine.Cell{
			{Key: a, Column: 1, Value: []byte("below")},
			{Key: a, Column: 3, Value: []byte("older")},
			{Key: a, Column: 6, Value: []byte("above")},
		}})
		want := []cell{{1, []byte("below")}, {5, []byte("5")}, {6, []byte("above")}}
		require.Equal(t, want, cells(t, e, a, 0, 0xffffffff))
		write(t, e, &engine.Batch{WriteTime: wt + 150, Cells: []engine.Cell{{Key: a, Column: 3, Value: []byte("newer")}}})
		want = []cell{{1, []byte("below")}, {3, []byte("newer")}, {5, []byte("5")}, {6, []byte("above")}}
		require.Equal(t, want, cells(t, e, a, 0, 0xffffffff))
	})

	t.Run("RowKeys", func(t *testing.T) {
		e := start(t)
		wt := writeTime()
		row := func(rowTime int64, dataType string, kv ...string) engine.IndexedRowKey {
			return engine.IndexedRowKey{Metric: "m", RowTime: rowTime, DataType: dataType, Tags: tags(kv...)}
		}
		write(t, e, &engine.Batch{WriteTime: wt, RowKeys: []engine.IndexedRowKey{
			row(rt, "kairos_long", "host", "a", "dc", "x"),
			row(rt, "kairos_double", "host", "a", "dc", "x"),
			row(rt, "kairos_long", "host", "b"),
			row(rt, "kairos_long"),
			row(rt+rowWidth, "kairos_long", "host", "a", "dc", "x"),
		}})

		// The tags of the delete come in another order than written.
		del(t, e, &engine.Deletes{WriteTime: wt + 100, RowKeys: []engine.IndexedRowKey{
			row(rt, "kairos_long", "dc", "x", "host", "a"),
			row(rt, "kairos_long"),
		}})
		remaining := []indexEntry{entry("kairos_double", "host", "a", "dc", "x"), entry("kairos_long", "host", "b")}
		require.ElementsMatch(t, remaining, rowKeys(t, e, "m", rt))
		require.Equal(t, []indexEntry{entry("kairos_long", "host", "a", "dc", "x")}, rowKeys(t, e, "m", rt+rowWidth))

		write(t, e, &engine.Batch{WriteTime: wt + 50, RowKeys: []engine.IndexedRowKey{
			row(rt, "kairos_long", "host", "a", "dc", "x"),
			row(rt, "kairos_long"),
		}})
		require.ElementsMatch(t, remaining, rowKeys(t, e, "m", rt))
		write(t, e, &engine.Batch{WriteTime: wt + 150, RowKeys: []engine.IndexedRowKey{row(rt, "kairos_long", "host", "a", "dc", "x")}})
		require.ElementsMatch(t, append(remaining, entry("kairos_long", "host", "a", "dc", "x")), rowKeys(t, e, "m", rt))
	})

	t.Run("TagIndexed", func(t *testing.T) {
		e := start(t)
		wt := writeTime()
		ti := func(pair, dataType string, kv ...string) engine.TagIndexedRowKey {
			return engine.TagIndexedRowKey{
				IndexedRowKey: engine.IndexedRowKey{Metric: "m", RowTime: rt, DataType: dataType, Tags: tags(kv...)},
				Pair:          pair,
				Hash:          -934437578,
			}
		}
		target := ti("host=a", "kairos_long", "host", "a", "dc", "x")
		write(t, e, &engine.Batch{WriteTime: wt, TagIndexed: []engine.TagIndexedRowKey{
			target,
			ti("host=a", "kairos_double", "host", "a", "dc", "x"),
			ti("dc=x", "kairos_long", "host", "a", "dc", "x"),
		}})

		del(t, e, &engine.Deletes{WriteTime: wt + 100, TagIndexed: []engine.TagIndexedRowKey{target}})
		require.Equal(t, []indexEntry{entry("kairos_double", "host", "a", "dc", "x")}, tagIndexed(t, e, "m", rt, "host=a"))
		require.Equal(t, []indexEntry{entry("kairos_long", "host", "a", "dc", "x")}, tagIndexed(t, e, "m", rt, "dc=x"))

		write(t, e, &engine.Batch{WriteTime: wt + 50, TagIndexed: []engine.TagIndexedRowKey{target}})
		require.Equal(t, []indexEntry{entry("kairos_double", "host", "a", "dc", "x")}, tagIndexed(t, e, "m", rt, "host=a"))
		write(t, e, &engine.Batch{WriteTime: wt + 150, TagIndexed: []engine.TagIndexedRowKey{target}})
		require.ElementsMatch(t, []indexEntry{
			entry("kairos_double", "host", "a", "dc", "x"),
			entry("kairos_long", "host", "a", "dc", "x"),
		}, tagIndexed(t, e, "m", rt, "host=a"))
	})

	t.Run("RowTime", func(t *testing.T) {
		e := start(t)
		wt := writeTime()
		write(t, e, &engine.Batch{WriteTime: wt, RowTimes: []engine.RowTimeIndex{
			{Metric: "m", RowTime: 0},
			{Metric: "m", RowTime: rowWidth},
			{Metric: "m", RowTime: 2 * rowWidth},
			{Metric: "m2", RowTime: rowWidth},
		}})

		del(t, e, &engine.Deletes{WriteTime: wt + 100, RowTimes: []engine.RowTimeIndex{{Metric: "m", RowTime: rowWidth}}})
		require.Equal(t, []int64{0, 2 * rowWidth}, rowTimes(t, e, "m", 0, 3*rowWidth))
		require.Equal(t, []int64{rowWidth}, rowTimes(t, e, "m2", 0, 3*rowWidth))

		write(t, e, &engine.Batch{WriteTime: wt + 50, RowTimes: []engine.RowTimeIndex{{Metric: "m", RowTime: rowWidth}}})
		require.Equal(t, []int64{0, 2 * rowWidth}, rowTimes(t, e, "m", 0, 3*rowWidth))
		write(t, e, &engine.Batch{WriteTime: wt + 150, RowTimes: []engine.RowTimeIndex{{Metric: "m", RowTime: rowWidth}}})
		require.Equal(t, []int64{0, rowWidth, 2 * rowWidth}, rowTimes(t, e, "m", 0, 3*rowWidth))
	})

	t.Run("LegacyRowKey", func(t *testing.T) {
		e := start(t)
		wt := writeTime()
		lk := func(metric string, key byte) engine.LegacyRowKey {
			return engine.LegacyRowKey{Metric: metric, RowKey: []byte{key}}
		}
		seedLegacy(t, e, wt, lk("m", 1), lk("m", 2), lk("m", 3), lk("m2", 2))

		del(t, e, &engine.Deletes{WriteTime: wt + 100, LegacyRowKeys: []engine.LegacyRowKey{lk("m", 2)}})
		require.Equal(t, [][]byte{{1}, {3}}, legacyRowKeys(t, e, "m", []byte{0}, []byte{0xff}))
		require.Equal(t, [][]byte{{2}}, legacyRowKeys(t, e, "m2", []byte{0}, []byte{0xff}))

		seedLegacy(t, e, wt+50, lk("m", 2))
		require.Equal(t, [][]byte{{1}, {3}}, legacyRowKeys(t, e, "m", []byte{0}, []byte{0xff}))
		seedLegacy(t, e, wt+150, lk("m", 2))
		require.Equal(t, [][]byte{{1}, {2}, {3}}, legacyRowKeys(t, e, "m", []byte{0}, []byte{0xff}))
	})

	t.Run("LegacyPartition", func(t *testing.T) {
		e := start(t)
		wt := writeTime()
		lk := func(metric string, key byte) engine.LegacyRowKey {
			return engine.LegacyRowKey{Metric: metric, RowKey: []byte{key}}
		}
		seedLegacy(t, e, wt, lk("m", 1), lk("m", 2), lk("m2", 1))
		seedLegacy(t, e, wt+200, lk("m", 3))

		del(t, e, &engine.Deletes{WriteTime: wt + 100, LegacyMetrics: []string{"m"}})
		require.Equal(t, [][]byte{{3}}, legacyRowKeys(t, e, "m", []byte{0}, []byte{0xff}))
		require.Equal(t, [][]byte{{1}}, legacyRowKeys(t, e, "m2", []byte{0}, []byte{0xff}))

		seedLegacy(t, e, wt+50, lk("m", 1))
		require.Equal(t, [][]byte{{3}}, legacyRowKeys(t, e, "m", []byte{0}, []byte{0xff}))
		seedLegacy(t, e, wt+150, lk("m", 2))
		require.Equal(t, [][]byte{{2}, {3}}, legacyRowKeys(t, e, "m", []byte{0}, []byte{0xff}))
	})

	t.Run("MetricName", func(t *testing.T) {
		e := start(t)
		wt := writeTime()
		write(t, e, &engine.Batch{WriteTime: wt, MetricNames: []string{"a", "b", "c"}})

		del(t, e, &engine.Deletes{WriteTime: wt + 100, MetricNames: []string{"b"}})
		require.Equal(t, []string{"a", "c"}, metricNames(t, e))

		write(t, e, &engine.Batch{WriteTime: wt + 50, MetricNames: []string{"b"}})
		require.Equal(t, []string{"a", "c"}, metricNames(t, e))
		write(t, e, &engine.Batch{WriteTime: wt + 150, MetricNames: []string{"b"}})
		require.Equal(t, []string{"a", "b", "c"}, metricNames(t, e))
	})

	t.Run("Nothing", func(t *testing.T) {
		e := start(t)
		del(t, e, &engine.Deletes{WriteTime: writeTime()})
		del(t, e, &engine.Deletes{WriteTime: writeTime(), Rows: [][]byte{[]byte("absent")}, MetricNames: []string{"absent"}})
		require.Empty(t, metricNames(t, e))
	})
}
