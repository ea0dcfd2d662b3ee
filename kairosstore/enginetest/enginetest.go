// Package enginetest is the conformance suite every engine.Engine must
// pass, so that the Cassandra engine and the embedded engine keep exactly the
// same semantics (a test written once runs on both). Expected results follow Cassandra with
// KairosDB's tables (docs/kairosdb-layout.md §1, §5.3–5.5, §7, §8, §9).
package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// Run runs the suite. open must return a fresh, empty engine on every call
// and arrange its Close with t.Cleanup; Run calls Setup itself. Every case is
// a subtest with its own engine.
func Run(t *testing.T, open func(t *testing.T) engine.Engine) {
	start := func(t *testing.T) engine.Engine {
		t.Helper()
		e := open(t)
		require.NoError(t, e.Setup(t.Context()))
		return e
	}
	for _, c := range []struct {
		name string
		test func(t *testing.T, start opener)
	}{
		{"SetupIsIdempotent", testSetup},
		{"Spec", testSpec},
		{"Cells", testCells},
		{"Overwrite", testOverwrite},
		{"TTL", testTTL},
		{"RowKeys", testRowKeys},
		{"RowTimes", testRowTimes},
		{"TagIndexedRowKeys", testTagIndexed},
		{"LegacyRowKeys", testLegacyRowKeys},
		{"MetricNames", testMetricNames},
		{"Delete", testDelete},
		{"ServiceIndex", testServiceIndex},
		{"CallbackError", testCallbackError},
		{"Ready", testReady},
		{"CancelledWrite", testCancelledWrite},
		{"Raw", testRaw},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, start) })
	}
}

type opener = func(t *testing.T) engine.Engine

// rowWidth is KairosDB's default row width in ms (§3.1), used to make row
// times look real.
const rowWidth = 1814400000

// writeTime returns a realistic write timestamp in ms (§5.4): engines may
// treat timestamps far in the past differently once tombstones age out.
func writeTime() int64 { return time.Now().UnixMilli() }

func testSetup(t *testing.T, start opener) {
	e := start(t)
	require.NoError(t, e.Setup(t.Context()), "second Setup")
	require.NoError(t, e.Ready(t.Context()))
	_, ok := spec(t, e, "row_time_unit")
	require.False(t, ok)
	require.Empty(t, metricNames(t, e))
}

func testSpec(t *testing.T, start opener) {
	e := start(t)
	ctx := t.Context()
	wt := writeTime()
	require.NoError(t, e.SetSpec(ctx, "row_time_unit", "MILLISECONDS", wt))
	require.NoError(t, e.SetSpec(ctx, "row_width", "1814400000", wt))

	v, ok := spec(t, e, "row_time_unit")
	require.True(t, ok)
	require.Equal(t, "MILLISECONDS", v)
	v, ok = spec(t, e, "row_width")
	require.True(t, ok)
	require.Equal(t, "1814400000", v)
	_, ok = spec(t, e, "row_widt")
	require.False(t, ok)

	require.NoError(t, e.SetSpec(ctx, "row_time_unit", "LEGACY", wt-1))
	v, _ = spec(t, e, "row_time_unit")
	require.Equal(t, "MILLISECONDS", v, "an older write loses")

	require.NoError(t, e.SetSpec(ctx, "row_time_unit", "SECONDS", wt+1))
	v, _ = spec(t, e, "row_time_unit")
	require.Equal(t, "SECONDS", v, "a newer write wins")
}

// ex1Key is the row key of docs/kairosdb-layout.md Appendix A, EX1.
var ex1Key = []byte("sys.cpu\x00\x00\x00\x01\x3c\x69\xda\x9c\x00\x00\x0bkairos_longhost=server1:")

func testCells(t *testing.T, start opener) {
	e := start(t)
	wt := writeTime()

	// Columns in unsigned order, including the LEGACY-mode column d84b17fe
	// (Appendix A), which is negative as an int32.
	columns := []uint32{0, 1, 0x2fd9c180, 0x7fffffff, 0x80000000, 0xd84b17fe, 0xfffffffe}
	all := make([]cell, len(columns))
	for i, c := range columns {
		all[i] = cell{Column: c, Value: []byte{byte(i), 0x00, 0xff}}
	}
	all[1].Value = []byte{} // an empty value is a value

	// Keys that are prefixes of one another must stay separate partitions.
	a, a0, a0ff := []byte("a"), []byte("a\x00"), []byte("a\x00\xff")
	b := &engine.Batch{WriteTime: wt}
	for i := len(all) - 1; i >= 0; i-- { // written out of order
		b.Cells = append(b.Cells, engine.Cell{Key: ex1Key, Column: all[i].Column, Value: all[i].Value})
	}
	b.Cells = append(b.Cells,
		engine.Cell{Key: a, Column: 0x2fd9c180, Value: []byte("a")},
		engine.Cell{Key: a0, Column: 0x2fd9c180, Value: []byte("a0")},
	)
	write(t, e, b)
	write(t, e, &engine.Batch{WriteTime: wt, Cells: []engine.Cell{{Key: a0ff, Column: 5, Value: []byte("a0ff")}}})

	for _, tc := range []struct {
		name   string
		lo, hi uint32
		want   []cell
	}{
		{"full row", 0, 0xffffffff, all},
		{"unsigned order above 0x80000000", 0x80000000, 0xffffffff, all[4:]},
		{"hi is exclusive", 1, 0x80000000, all[1:4]},
		{"one column", 0xd84b17fe, 0xd84b17ff, all[5:6]},
		{"empty range", 0xd84b17fe, 0xd84b17fe, []cell{}},
		{"lo above hi", 0xd84b17ff, 0xd84b17fe, []cell{}},
		{"gap", 2, 0x2fd9c180, []cell{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, cells(t, e, ex1Key, tc.lo, tc.hi))
			// FirstCell is the first of the same slice.
			col, ok, err := e.FirstCell(t.Context(), ex1Key, tc.lo, tc.hi)
			require.NoError(t, err)
			require.Equal(t, len(tc.want) > 0, ok)
			if ok {
				require.Equal(t, tc.want[0].Column, col)
			}
		})
	}
	col, ok, err := e.FirstCell(t.Context(), a0, 0, 0xffffffff)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint32(0x2fd9c180), col, "a0's own cell, not a0ff's at 5")
	_, ok, err = e.FirstCell(t.Context(), []byte("b"), 0, 0xffffffff)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, []cell{{0x2fd9c180, []byte("a")}}, cells(t, e, a, 0, 0xffffffff))
	require.Equal(t, []cell{{0x2fd9c180, []byte("a0")}}, cells(t, e, a0, 0, 0xffffffff))
	require.Equal(t, []cell{{5, []byte("a0ff")}}, cells(t, e, a0ff, 0, 0xffffffff))
	require.Empty(t, cells(t, e, []byte("b"), 0, 0xffffffff))
}

func testOverwrite(t *testing.T, start opener) {
	e := start(t)
	wt := writeTime()
	key := []byte("overwrite")
	put := func(writeTime int64, cs ...engine.Cell) {
		t.Helper()
		for i := range cs {
			cs[i].Key = key
		}
		write(t, e, &engine.Batch{WriteTime: writeTime, Cells: cs})
	}

	put(wt+10, engine.Cell{Column: 1, Value: []byte("new")}, engine.Cell{Column: 2, Value: []byte("x1")})
	put(wt+5, engine.Cell{Column: 1, Value: []byte("old")}, engine.Cell{Column: 3, Value: []byte("only")})
	require.Equal(t, []cell{{1, []byte("new")}, {2, []byte("x1")}, {3, []byte("only")}}, cells(t, e, key, 0, 0xffffffff),
		"the higher write time wins regardless of write order")

	put(wt+20, engine.Cell{Column: 2, Value: []byte("x2")}, engine.Cell{Column: 3, Value: []byte{}})
	want := []cell{{1, []byte("new")}, {2, []byte("x2")}, {3, []byte{}}}
	require.Equal(t, want, cells(t, e, key, 0, 0xffffffff))

	put(wt+20, engine.Cell{Column: 2, Value: []byte("x2")}, engine.Cell{Column: 3, Value: []byte{}})
	require.Equal(t, want, cells(t, e, key, 0, 0xffffffff), "re-writing identical data is idempotent")
}

// testTTL is the one slow case: it sleeps once, past a 1-second TTL.
func testTTL(t *testing.T, start opener) {
	e := start(t)
	wt := writeTime()
	key := []byte("ttl")
	const rt = 1358985600000
	write(t, e, &engine.Batch{
		WriteTime: wt,
		Cells: []engine.Cell{
			{Key: key, Column: 1, Value: []byte("ttl 1"), TTL: 1},
			{Key: key, Column: 2, Value: []byte("ttl 0")},
			{Key: key, Column: 3, Value: []byte("ttl 3600"), TTL: 3600},
		},
		RowKeys: []engine.IndexedRowKey{
			{Metric: "m", RowTime: rt, DataType: "kairos_long", Tags: tags("h", "a"), TTL: 1},
			{Metric: "m", RowTime: rt, DataType: "kairos_long", Tags: tags("h", "b")},
		},
		TagIndexed: []engine.TagIndexedRowKey{
			{IndexedRowKey: engine.IndexedRowKey{Metric: "m", RowTime: rt, DataType: "kairos_long", Tags: tags("h", "a"), TTL: 1}, Pair: "h=a", Hash: 1},
			{IndexedRowKey: engine.IndexedRowKey{Metric: "m", RowTime: rt, DataType: "kairos_long", Tags: tags("h", "b")}, Pair: "h=b", Hash: 2},
		},
		RowTimes: []engine.RowTimeIndex{
			{Metric: "m", RowTime: rt, TTL: 1},
			{Metric: "m", RowTime: rt + rowWidth},
		},
	})
	// TTL 1 may already be gone: expiry is counted in whole seconds.
	require.Equal(t, []cell{{2, []byte("ttl 0")}, {3, []byte("ttl 3600")}}, cells(t, e, key, 2, 4))

	time.Sleep(2500 * time.Millisecond)

	require.Equal(t, []cell{{2, []byte("ttl 0")}, {3, []byte("ttl 3600")}}, cells(t, e, key, 0, 0xffffffff))
	require.Equal(t, []indexEntry{entry("kairos_long", "h", "b")}, rowKeys(t, e, "m", rt))
	require.Empty(t, tagIndexed(t, e, "m", rt, "h=a"))
	require.Equal(t, []indexEntry{entry("kairos_long", "h", "b")}, tagIndexed(t, e, "m", rt, "h=b"))
	require.Equal(t, []int64{rt + rowWidth}, rowTimes(t, e, "m", 0, 1<<62))
}

func testRowKeys(t *testing.T, start opener) {
	e := start(t)
	wt := writeTime()
	const rt = 1358985600000
	// Tags with the characters the row-key tag string escapes (§2.2), NUL,
	// non-ASCII, an empty value, given out of order.
	odd := tags("dc", "x:y", "a:b", "c=d", "😀", "vé", "sp ace", "tab\there", "nul", "a\x00b", "empty", "")
	oddShuffled := tags("nul", "a\x00b", "empty", "", "😀", "vé", "a:b", "c=d", "sp ace", "tab\there", "dc", "x:y")
	row := func(metric string, rowTime int64, dataType string, ts ...string) engine.IndexedRowKey {
		return engine.IndexedRowKey{Metric: metric, RowTime: rowTime, DataType: dataType, Tags: tags(ts...)}
	}
	write(t, e, &engine.Batch{WriteTime: wt, RowKeys: []engine.IndexedRowKey{
		row("sys.cpu", rt, "kairos_long", "host", "server1"),
		row("sys.cpu", rt, "kairos_double", "host", "server1"),
		{Metric: "sys.cpu", RowTime: rt, DataType: "kairos_long", Tags: odd},
		row("sys.cpu", rt, "kairos_long"), // tagless
		{Metric: "sys.cpu", RowTime: rt, DataType: "kairos_string", Tags: nil},
		row("sys.cpu", rt+rowWidth, "kairos_long", "host", "server2"),
		row("sys.cp", rt, "kairos_long", "host", "server3"),
		row("sys.cpu2", rt, "kairos_long", "host", "server4"),
	}})
	// The same entries again, tags in another order: a frozen map is one
	// value whatever the order it was bound in.
	write(t, e, &engine.Batch{WriteTime: wt + 1, RowKeys: []engine.IndexedRowKey{
		row("sys.cpu", rt, "kairos_long", "host", "server1"),
		{Metric: "sys.cpu", RowTime: rt, DataType: "kairos_long", Tags: oddShuffled},
	}})

	require.ElementsMatch(t, []indexEntry{
		entry("kairos_long", "host", "server1"),
		entry("kairos_double", "host", "server1"),
		{DataType: "kairos_long", Tags: tagMap(odd)},
		entry("kairos_long"),
		entry("kairos_string"),
	}, rowKeys(t, e, "sys.cpu", rt))
	require.Equal(t, []indexEntry{entry("kairos_long", "host", "server2")}, rowKeys(t, e, "sys.cpu", rt+rowWidth))
	require.Equal(t, []indexEntry{entry("kairos_long", "host", "server3")}, rowKeys(t, e, "sys.cp", rt))
	require.Equal(t, []indexEntry{entry("kairos_long", "host", "server4")}, rowKeys(t, e, "sys.cpu2", rt))
	require.Empty(t, rowKeys(t, e, "sys.cpu", rt-rowWidth))
	require.Empty(t, rowKeys(t, e, "sys.mem", rt))

	// Point reads of single entries, tags in any order.
	exists := func(metric string, rowTime int64, dataType string, tags []codec.Tag) bool {
		t.Helper()
		ok, err := e.RowKeyExists(t.Context(), metric, rowTime, dataType, tags)
		require.NoError(t, err)
		return ok
	}
	require.True(t, exists("sys.cpu", rt, "kairos_long", oddShuffled))
	require.True(t, exists("sys.cpu", rt, "kairos_double", tags("host", "server1")))
	require.True(t, exists("sys.cpu", rt, "kairos_long", nil), "tagless")
	require.False(t, exists("sys.cpu", rt, "kairos_double", nil), "tagless of another type")
	require.False(t, exists("sys.cpu", rt, "kairos_long", tags("host", "server2")), "another row time's")
	require.False(t, exists("sys.cpu", rt, "kairos_long", tags("host", "server1", "dc", "x")), "a superset of an entry's tags")
}

func testRowTimes(t *testing.T, start opener) {
	e := start(t)
	wt := writeTime()
	// -9223372035360000000 is rowTime(Long.MIN_VALUE), the lower bound of
	// delete-metric (§12 item 12).
	const minRow = -9223372035360000000
	times := []int64{0, -2, 3 * rowWidth, minRow, -rowWidth, rowWidth, -2 * rowWidth}
	b := &engine.Batch{WriteTime: wt}
	for _, rt := range times {
		b.RowTimes = append(b.RowTimes, engine.RowTimeIndex{Metric: "m", RowTime: rt})
	}
	b.RowTimes = append(b.RowTimes,
		engine.RowTimeIndex{Metric: "m2", RowTime: rowWidth},
		engine.RowTimeIndex{Metric: "n", RowTime: -rowWidth},
	)
	write(t, e, b)

	const minInt64, maxInt64 = -1 << 63, 1<<63 - 1
	for _, tc := range []struct {
		name   string
		lo, hi int64
		want   []int64
	}{
		{"all, signed order", minInt64, maxInt64, []int64{minRow, -2 * rowWidth, -rowWidth, -2, 0, rowWidth, 3 * rowWidth}},
		{"inclusive both ends", -rowWidth, rowWidth, []int64{-rowWidth, -2, 0, rowWidth}},
		{"one", 0, 0, []int64{0}},
		{"across zero", -1, 1, []int64{0}},
		{"empty", 1, rowWidth - 1, []int64{}},
		{"lo above hi", rowWidth, 0, []int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, rowTimes(t, e, "m", tc.lo, tc.hi))
		})
	}
	require.Equal(t, []int64{rowWidth}, rowTimes(t, e, "m2", minInt64, maxInt64))
	require.Equal(t, []int64{-rowWidth}, rowTimes(t, e, "n", minInt64, maxInt64))
	require.Empty(t, rowTimes(t, e, "m3", minInt64, maxInt64))
}

func testTagIndexed(t *testing.T, start opener) {
	e := start(t)
	wt := writeTime()
	const rt = 1358985600000
	ti := func(pair string, hash int32, dataType string, ts ...string) engine.TagIndexedRowKey {
		return engine.TagIndexedRowKey{
			IndexedRowKey: engine.IndexedRowKey{Metric: "sys.cpu", RowTime: rt, DataType: dataType, Tags: tags(ts...)},
			Pair:          pair,
			Hash:          hash,
		}
	}
	// Hashes of §6.2.
	write(t, e, &engine.Batch{WriteTime: wt, TagIndexed: []engine.TagIndexedRowKey{
		ti("host=server1", -2125777964, "kairos_long", "host", "server1"),
		ti("host=server1", -934437578, "kairos_long", "host", "server1", "data_center", "DC1"),
		ti("data_center=DC1", -934437578, "kairos_long", "host", "server1", "data_center", "DC1"),
		ti("host=server1", -2125777964, "kairos_double", "host", "server1"),
		ti("host=server", 7, "kairos_long", "host", "server"),
	}})

	require.ElementsMatch(t, []indexEntry{
		entry("kairos_long", "host", "server1"),
		entry("kairos_long", "host", "server1", "data_center", "DC1"),
		entry("kairos_double", "host", "server1"),
	}, tagIndexed(t, e, "sys.cpu", rt, "host=server1"))
	require.Equal(t, []indexEntry{entry("kairos_long", "host", "server1", "data_center", "DC1")},
		tagIndexed(t, e, "sys.cpu", rt, "data_center=DC1"))
	require.Equal(t, []indexEntry{entry("kairos_long", "host", "server")}, tagIndexed(t, e, "sys.cpu", rt, "host=server"))
	require.Empty(t, tagIndexed(t, e, "sys.cpu", rt, "host=server2"))
	require.Empty(t, tagIndexed(t, e, "sys.cpu", rt+rowWidth, "host=server1"))
	require.Empty(t, tagIndexed(t, e, "sys.cp", rt, "host=server1"))
	require.Empty(t, rowKeys(t, e, "sys.cpu", rt), "tag_indexed_row_keys is its own table")
}

func testLegacyRowKeys(t *testing.T, start opener) {
	e := start(t)
	wt := writeTime()
	// The legacy (typeless) EX1 key of Appendix A.
	legacyEX1 := []byte("sys.cpu\x00\x00\x00\x01\x3c\x69\xda\x9c\x00host=server1:")
	keys := [][]byte{{0xff, 0x00}, {0x00}, {0x80}, legacyEX1, {0x00, 0x00}, {0xff}, {0x01}, {0x7f, 0xff}}
	var seed []engine.LegacyRowKey
	for _, k := range keys {
		seed = append(seed, engine.LegacyRowKey{Metric: "sys.cpu", RowKey: k})
	}
	seed = append(seed,
		engine.LegacyRowKey{Metric: "sys.cp", RowKey: []byte{0x01}},
		engine.LegacyRowKey{Metric: "sys.cpu\x00", RowKey: []byte{0x02}},
	)
	seedLegacy(t, e, wt, seed...)

	for _, tc := range []struct {
		name   string
		lo, hi []byte
		want   [][]byte
	}{
		{"all, unsigned order", []byte{0x00}, []byte{0xff, 0xff}, [][]byte{{0x00}, {0x00, 0x00}, {0x01}, legacyEX1, {0x7f, 0xff}, {0x80}, {0xff}, {0xff, 0x00}}},
		{"hi is exclusive", []byte{0x00, 0x00}, []byte{0x80}, [][]byte{{0x00, 0x00}, {0x01}, legacyEX1, {0x7f, 0xff}}},
		{"high bytes", []byte{0x80}, []byte{0xff, 0x00, 0x00}, [][]byte{{0x80}, {0xff}, {0xff, 0x00}}},
		// The §7.2 bounds of row time 1358985600000 select the legacy key.
		{"query bounds", []byte("sys.cpu\x00\x00\x00\x01\x3c\x69\xda\x9c\x00\x00\x00"), []byte("sys.cpu\x00\x00\x00\x01\x3c\x69\xda\x9c\x00\xff\x00"), [][]byte{legacyEX1}},
		{"empty", []byte{0x02}, []byte{0x03}, [][]byte{}},
		{"lo above hi", []byte{0x80}, []byte{0x01}, [][]byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, legacyRowKeys(t, e, "sys.cpu", tc.lo, tc.hi))
		})
	}
	require.Equal(t, [][]byte{{0x01}}, legacyRowKeys(t, e, "sys.cp", []byte{0x00}, []byte{0xff}))
	require.Equal(t, [][]byte{{0x02}}, legacyRowKeys(t, e, "sys.cpu\x00", []byte{0x00}, []byte{0xff}))
	require.Empty(t, legacyRowKeys(t, e, "sys.mem", []byte{0x00}, []byte{0xff}))
}

func testMetricNames(t *testing.T, start opener) {
	e := start(t)
	wt := writeTime()
	write(t, e, &engine.Batch{WriteTime: wt, MetricNames: []string{"sys.cpu", "a", "B", "😀"}})
	write(t, e, &engine.Batch{WriteTime: wt, MetricNames: []string{"a", "é", "a b", "Ab", "\uffff"}})
	// UTF-8 byte order: U+FFFF sorts before U+1F600 here, unlike Java's
	// UTF-16 order.
	require.Equal(t, []string{"Ab", "B", "a", "a b", "sys.cpu", "é", "\uffff", "😀"}, metricNames(t, e))
}

func testServiceIndex(t *testing.T, start opener) {
	e := start(t)
	ctx := t.Context()
	wt := writeTime()
	for _, s := range []struct{ service, serviceKey, key, value string }{
		{"svc", "sk", "k1", "v1"},
		{"svc", "sk", "k2", "v2"},
		{"svc", "sk", "ka", "va"},
		{"svc", "sk", "k", "vk"},
		{"svc", "sk", "b", "vb"},
		{"svc", "sk2", "k1", "other"},
		{"svc", "s", "k1", "s"},
		{"svc2", "sk", "k1", "x"},
		{"_Hosts", "Active", "host-1", "1700000000000"},
	} {
		require.NoError(t, e.SetServiceValue(ctx, s.service, s.serviceKey, s.key, s.value, wt))
	}

	v, ok := serviceValue(t, e, "svc", "sk", "k1")
	require.True(t, ok)
	require.Equal(t, "v1", v)
	v, ok = serviceValue(t, e, "svc", "sk2", "k1")
	require.True(t, ok)
	require.Equal(t, "other", v)
	v, ok = serviceValue(t, e, "_Hosts", "Active", "host-1")
	require.True(t, ok)
	require.Equal(t, "1700000000000", v)
	_, ok = serviceValue(t, e, "svc", "sk", "k3")
	require.False(t, ok)
	_, ok = serviceValue(t, e, "svc", "sk3", "k1")
	require.False(t, ok)

	require.NoError(t, e.SetServiceValue(ctx, "svc", "sk", "k1", "older", wt-1))
	v, _ = serviceValue(t, e, "svc", "sk", "k1")
	require.Equal(t, "v1", v, "an older write loses")
	require.NoError(t, e.SetServiceValue(ctx, "svc", "sk", "k1", "newer", wt+1))
	v, _ = serviceValue(t, e, "svc", "sk", "k1")
	require.Equal(t, "newer", v, "a newer write wins")

	require.Equal(t, []string{"b", "k", "k1", "k2", "ka"}, serviceKeys(t, e, "svc", "sk", ""))
	require.Equal(t, []string{"k", "k1", "k2", "ka"}, serviceKeys(t, e, "svc", "sk", "k"))
	require.Equal(t, []string{"k1"}, serviceKeys(t, e, "svc", "sk", "k1"))
	require.Empty(t, serviceKeys(t, e, "svc", "sk", "z"))
	require.Equal(t, []string{"k1"}, serviceKeys(t, e, "svc", "sk2", ""))
	require.Equal(t, []string{"k1"}, serviceKeys(t, e, "svc", "s", ""))
	require.Empty(t, serviceKeys(t, e, "svc", "sk3", ""))

	// A delete shadows older writes and loses to newer ones.
	require.NoError(t, e.DeleteServiceValue(ctx, "svc", "sk", "k2", wt+1))
	_, ok = serviceValue(t, e, "svc", "sk", "k2")
	require.False(t, ok, "deleted")
	require.Equal(t, []string{"b", "k", "k1", "ka"}, serviceKeys(t, e, "svc", "sk", ""))
	require.NoError(t, e.SetServiceValue(ctx, "svc", "sk", "k2", "stale", wt))
	_, ok = serviceValue(t, e, "svc", "sk", "k2")
	require.False(t, ok, "a write older than the delete stays shadowed")
	require.NoError(t, e.DeleteServiceValue(ctx, "svc", "sk", "k1", wt))
	v, _ = serviceValue(t, e, "svc", "sk", "k1")
	require.Equal(t, "newer", v, "a delete older than the write loses")
	require.NoError(t, e.SetServiceValue(ctx, "svc", "sk", "k2", "again", wt+2))
	v, ok = serviceValue(t, e, "svc", "sk", "k2")
	require.True(t, ok)
	require.Equal(t, "again", v, "a write newer than the delete wins")
}

func testReady(t *testing.T, start opener) {
	e := start(t)
	require.NoError(t, e.Ready(t.Context()))
}

func testCancelledWrite(t *testing.T, start opener) {
	e := start(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := e.Write(ctx, &engine.Batch{
		WriteTime: writeTime(),
		Cells:     []engine.Cell{{Key: []byte("k"), Column: 1, Value: []byte("v")}},
	})
	require.ErrorIs(t, err, context.Canceled)
}
