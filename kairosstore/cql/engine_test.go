package cql_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// testConfig is the engine configuration for the test node: generous
// timeouts, since DDL is slow on a busy 2-core machine.
func testConfig(addr, keyspace string) cql.Config {
	return cql.Config{
		Hosts:            []string{addr},
		Keyspace:         keyspace,
		WriteConsistency: "ONE",
		ReadConsistency:  "ONE",
		Timeout:          30 * time.Second,
		ConnectTimeout:   15 * time.Second,
	}
}

// newEngine opens an engine on a fresh keyspace and runs Setup. It also
// returns a plain session on the keyspace for looking at the tables directly.
func newEngine(t *testing.T) (*cql.Engine, *gocql.Session) {
	t.Helper()
	addr, ks := cassandratest.Keyspace(t)
	e, err := cql.Open(t.Context(), testConfig(addr, ks), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	require.NoError(t, e.Setup(t.Context()))
	return e, cassandratest.Session(t, ks)
}

func TestOpenRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  cql.Config
		want string
	}{
		{"no hosts", cql.Config{}, "cassandra: no hosts configured"},
		{"write consistency", cql.Config{Hosts: []string{"h"}, WriteConsistency: "QUARUM"}, `invalid write consistency "QUARUM"`},
		{"read consistency", cql.Config{Hosts: []string{"h"}, ReadConsistency: "two_and_a_half"}, `invalid read consistency "two_and_a_half"`},
		{"keyspace quote", cql.Config{Hosts: []string{"h"}, Keyspace: `ks"; DROP`}, `invalid keyspace name "ks\"; DROP"`},
		{"keyspace too long", cql.Config{Hosts: []string{"h"}, Keyspace: strings.Repeat("k", 49)}, "invalid keyspace name"},
		{"table options", cql.Config{Hosts: []string{"h"}, TableOptions: map[string]string{"datapoints": "WITH x"}}, `table options for unknown table "datapoints"`},
		{"mixed ports", cql.Config{Hosts: []string{"a:9042", "b:9043"}}, "hosts use ports 9042 and 9043"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cql.Open(t.Context(), tc.cfg, nil)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestSetupCreatesKeyspaceAndTables(t *testing.T) {
	addr := cassandratest.Addr(t)
	ks := cassandratest.KeyspaceName(t.Name())
	cfg := testConfig(addr, strings.ToUpper(ks)) // folded to lower case
	cfg.Replication = "{'class': 'SimpleStrategy', 'replication_factor': 1}"
	cfg.TableOptions = map[string]string{"data_points": "WITH comment = 'points'"}

	e, err := cql.Open(t.Context(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, e.Close())
		admin := cassandratest.Session(t, "")
		cassandratest.Exec(t, admin, "DROP KEYSPACE IF EXISTS "+ks)
	})

	// Before Setup the keyspace is missing, and data methods say so.
	require.ErrorIs(t, e.Ready(t.Context()), cql.ErrNoKeyspace)
	require.ErrorIs(t, e.Write(t.Context(), &engine.Batch{MetricNames: []string{"m"}}), cql.ErrNoKeyspace)

	require.NoError(t, e.Setup(t.Context()))
	require.NoError(t, e.Setup(t.Context()), "Setup is idempotent")
	require.NoError(t, e.Ready(t.Context()))

	admin := cassandratest.Session(t, "")
	var tables []string
	sc := admin.Query(`SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?`, ks).Iter().Scanner()
	for sc.Next() {
		var name string
		require.NoError(t, sc.Scan(&name))
		tables = append(tables, name)
	}
	require.NoError(t, sc.Err())
	require.ElementsMatch(t, []string{
		"data_points", "row_key_index", "string_index", "row_keys",
		"tag_indexed_row_keys", "row_key_time_index", "spec", "service_index",
	}, tables)

	var comment string
	require.NoError(t, admin.Query(`SELECT comment FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`,
		ks, "data_points").Scan(&comment))
	require.Equal(t, "points", comment)

	// A second engine finds the existing keyspace at Open.
	e2, err := cql.Open(t.Context(), cfg, nil)
	require.NoError(t, err)
	require.NoError(t, e2.Ready(t.Context()))
	require.NoError(t, e2.Close())
}

// rowKey is what RowKeys and TagIndexedRowKeys report, with tags as a map
// because their order is unspecified.
type rowKey struct {
	DataType string
	Tags     map[string]string
}

func collectRowKeys(t *testing.T, list func(fn func(string, []codec.Tag) error) error) []rowKey {
	t.Helper()
	var out []rowKey
	require.NoError(t, list(func(dataType string, tags []codec.Tag) error {
		// The engine's strings are valid only during the callback.
		m := make(map[string]string, len(tags))
		for _, tag := range tags {
			m[strings.Clone(tag.Name)] = strings.Clone(tag.Value)
		}
		out = append(out, rowKey{strings.Clone(dataType), m})
		return nil
	}))
	return out
}

type cell struct {
	Column uint32
	Value  string // hex
}

func collectCells(t *testing.T, e *cql.Engine, key []byte, lo, hi uint32) []cell {
	t.Helper()
	var out []cell
	require.NoError(t, e.Cells(t.Context(), key, lo, hi, func(c uint32, v []byte) error {
		out = append(out, cell{c, hex.EncodeToString(v)})
		return nil
	}))
	return out
}

func collectRowTimes(t *testing.T, e *cql.Engine, metric string, lo, hi int64) []int64 {
	t.Helper()
	var out []int64
	require.NoError(t, e.RowTimes(t.Context(), metric, lo, hi, func(rt int64) error {
		out = append(out, rt)
		return nil
	}))
	return out
}

func collectStrings(t *testing.T, list func(fn func(string) error) error) []string {
	t.Helper()
	var out []string
	require.NoError(t, list(func(s string) error {
		out = append(out, s)
		return nil
	}))
	return out
}

func tags(kv ...string) []codec.Tag {
	var out []codec.Tag
	for i := 0; i < len(kv); i += 2 {
		out = append(out, codec.Tag{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

func col(c uint32) []byte { return binary.BigEndian.AppendUint32(nil, c) }

// sample is a small batch touching every table Write fills.
func sample(writeTime int64) *engine.Batch {
	const rt = 1358985600000
	keyA := []byte("sys.cpu\x00A")
	keyB := []byte("sys.cpu\x00B")
	host := tags("host", "server1", "dc", "x:y")
	return &engine.Batch{
		WriteTime: writeTime,
		Cells: []engine.Cell{
			{Key: keyA, Column: 0x2fd9c180, Value: []byte{0xf6, 0x01}},
			{Key: keyA, Column: 0x00000001, Value: []byte{0x02}},
			{Key: keyA, Column: 0xd84b17fe, Value: []byte{0x04}}, // sorts as unsigned
			{Key: keyB, Column: 7, Value: nil},                   // the `null` type's empty value (§4.6)
		},
		RowKeys: []engine.IndexedRowKey{
			{Metric: "sys.cpu", RowTime: rt, DataType: "kairos_long", Tags: host},
			{Metric: "sys.cpu", RowTime: rt, DataType: "kairos_double", Tags: host, TTL: 1814400},
		},
		TagIndexed: []engine.TagIndexedRowKey{
			{IndexedRowKey: engine.IndexedRowKey{Metric: "sys.cpu", RowTime: rt, DataType: "kairos_long", Tags: host}, Pair: "host=server1", Hash: -2125777964},
			{IndexedRowKey: engine.IndexedRowKey{Metric: "sys.cpu", RowTime: rt, DataType: "kairos_long", Tags: host}, Pair: "dc=x:y", Hash: -2125777964},
		},
		RowTimes: []engine.RowTimeIndex{
			{Metric: "sys.cpu", RowTime: rt},
			{Metric: "sys.cpu", RowTime: rt + 1814400000},
			{Metric: "sys.cpu", RowTime: -2}, // negative row times (§3.1)
		},
		MetricNames: []string{"sys.cpu", "été", "a.b"},
	}
}

func TestWriteAndRead(t *testing.T) {
	e, _ := newEngine(t)
	ctx := t.Context()
	const rt = 1358985600000
	require.NoError(t, e.Write(ctx, sample(time.Now().UnixMilli())))

	t.Run("cells", func(t *testing.T) {
		key := []byte("sys.cpu\x00A")
		require.Equal(t, []cell{{1, "02"}, {0x2fd9c180, "f601"}, {0xd84b17fe, "04"}},
			collectCells(t, e, key, 0, 0xffffffff))
		require.Equal(t, []cell{{0x2fd9c180, "f601"}}, collectCells(t, e, key, 2, 0xd84b17fe), "hi is exclusive")
		require.Equal(t, []cell{{1, "02"}}, collectCells(t, e, key, 1, 2))
		require.Empty(t, collectCells(t, e, key, 5, 5))
		require.Empty(t, collectCells(t, e, key, 6, 5))
		require.Empty(t, collectCells(t, e, []byte("nope"), 0, 0xffffffff))
		require.Equal(t, []cell{{7, ""}}, collectCells(t, e, []byte("sys.cpu\x00B"), 0, 100), "empty value")
	})
	t.Run("cells by name", func(t *testing.T) {
		keys := [][]byte{[]byte("sys.cpu\x00A"), []byte("sys.cpu\x00B"), []byte("nope")}
		var got []string
		read := func(keys [][]byte, cols []uint32) error {
			got = got[:0]
			return e.CellsOfColumns(ctx, keys, cols, func(row int, c uint32, v []byte) error {
				got = append(got, fmt.Sprintf("%d:%x=%x", row, c, v))
				return nil
			})
		}
		require.NoError(t, read(keys, []uint32{1, 7, 0xd84b17fe, 0xffffffff}))
		require.ElementsMatch(t, []string{"0:1=02", "0:d84b17fe=04", "1:7="}, got, "only the columns named, of each row")
		require.NoError(t, read(keys, nil))
		require.Empty(t, got)
		require.NoError(t, read(nil, []uint32{1}))
		require.Empty(t, got)
		// Bounded before anything is sent: a coordinator looks up each
		// row and column pair.
		require.ErrorContains(t, read(keys, make([]uint32, cql.MaxColumnsIn+1)), "at most")
		require.ErrorContains(t, read(make([][]byte, cql.MaxKeysIn+1), []uint32{1}), "at most")
	})
	t.Run("row times", func(t *testing.T) {
		require.Equal(t, []int64{-2, rt, rt + 1814400000}, collectRowTimes(t, e, "sys.cpu", -9223372035360000000, 1<<62))
		require.Equal(t, []int64{rt}, collectRowTimes(t, e, "sys.cpu", rt, rt+1814400000-1), "hi is inclusive")
		require.Empty(t, collectRowTimes(t, e, "other", 0, 1<<62))
	})
	t.Run("row keys", func(t *testing.T) {
		host := map[string]string{"host": "server1", "dc": "x:y"}
		got := collectRowKeys(t, func(fn func(string, []codec.Tag) error) error {
			return e.RowKeys(ctx, "sys.cpu", rt, fn)
		})
		require.ElementsMatch(t, []rowKey{{"kairos_long", host}, {"kairos_double", host}}, got)
		require.Empty(t, collectRowKeys(t, func(fn func(string, []codec.Tag) error) error {
			return e.RowKeys(ctx, "sys.cpu", rt+1, fn)
		}))
		got = collectRowKeys(t, func(fn func(string, []codec.Tag) error) error {
			return e.TagIndexedRowKeys(ctx, "sys.cpu", rt, "dc=x:y", fn)
		})
		require.Equal(t, []rowKey{{"kairos_long", host}}, got)
		require.Empty(t, collectRowKeys(t, func(fn func(string, []codec.Tag) error) error {
			return e.TagIndexedRowKeys(ctx, "sys.cpu", rt, "host=server2", fn)
		}))
	})
	t.Run("metric names", func(t *testing.T) {
		require.Equal(t, []string{"a.b", "sys.cpu", "été"}, collectStrings(t, func(fn func(string) error) error {
			return e.MetricNames(ctx, fn)
		}))
	})
	t.Run("callback error stops the scan", func(t *testing.T) {
		stop := errors.New("stop")
		n := 0
		err := e.MetricNames(ctx, func(string) error { n++; return stop })
		require.Equal(t, stop, err)
		require.Equal(t, 1, n)
		err = e.Cells(ctx, []byte("sys.cpu\x00A"), 0, 100, func(uint32, []byte) error { return stop })
		require.Equal(t, stop, err)
	})
}

func TestStoredBytes(t *testing.T) {
	e, s := newEngine(t)
	now := time.Now().UnixMilli()
	require.NoError(t, e.Write(t.Context(), sample(now)))

	// The string_index value is the single byte 0x00 and never expires (§5.3).
	var value []byte
	var ttl *int
	require.NoError(t, s.Query(`SELECT value, TTL(value) FROM string_index WHERE key = ? AND column1 = ?`,
		[]byte("metric_names"), "sys.cpu").Scan(&value, &ttl))
	require.Equal(t, []byte{0}, value)
	require.Nil(t, ttl)

	// An empty value is stored as 0 bytes, not null (§4.6).
	require.NoError(t, s.Query(`SELECT value FROM data_points WHERE key = ? AND column1 = ?`,
		[]byte("sys.cpu\x00B"), col(7)).Scan(&value))
	require.NotNil(t, value)
	require.Empty(t, value)

	// table_name is the literal 'data_points'; value columns are never written (§1.2).
	var tableName string
	var v *string
	require.NoError(t, s.Query(`SELECT table_name, value FROM row_key_time_index WHERE metric = ? LIMIT 1`,
		"sys.cpu").Scan(&tableName, &v))
	require.Equal(t, "data_points", tableName)
	require.Nil(t, v)

	// Index rows carry the TTL given (§5.3); mtime, the only non-key column
	// written, shows it.
	rk := engine.IndexedRowKey{Metric: "ttl.metric", RowTime: 0, DataType: "kairos_long", TTL: 1814400}
	require.NoError(t, e.Write(t.Context(), &engine.Batch{WriteTime: now, RowKeys: []engine.IndexedRowKey{rk}}))
	require.NoError(t, s.Query(`SELECT TTL(mtime) FROM row_keys WHERE metric = ? AND table_name = ? AND row_time = ?`,
		"ttl.metric", "data_points", int64(0)).Scan(&ttl))
	require.NotNil(t, ttl)
	require.InDelta(t, 1814400, *ttl, 60)
}

// TestWriteTimestampsAreMilliseconds checks §12 item 1: every statement carries
// a millisecond write timestamp, never the driver's microseconds.
func TestWriteTimestampsAreMilliseconds(t *testing.T) {
	e, s := newEngine(t)
	ctx := t.Context()
	now := time.Now().UnixMilli()
	require.NoError(t, e.Write(ctx, sample(now)))
	require.NoError(t, e.SetSpec(ctx, "row_width", "1814400000", now))
	require.NoError(t, e.SetServiceValue(ctx, "svc", "sk", "k", "v", now))

	for _, q := range []struct {
		stmt string
		args []any
	}{
		{`SELECT WRITETIME(value) FROM data_points WHERE key = ? AND column1 = ?`, []any{[]byte("sys.cpu\x00A"), col(1)}},
		{`SELECT WRITETIME(mtime) FROM row_keys WHERE metric = ? AND table_name = ? AND row_time = ?`, []any{"sys.cpu", "data_points", int64(1358985600000)}},
		{`SELECT WRITETIME(mtime) FROM tag_indexed_row_keys WHERE metric = ? AND table_name = ? AND row_time = ? AND single_tag_pair = ?`, []any{"sys.cpu", "data_points", int64(1358985600000), "dc=x:y"}},
		{`SELECT WRITETIME(value) FROM string_index WHERE key = ? AND column1 = ?`, []any{[]byte("metric_names"), "sys.cpu"}},
		{`SELECT WRITETIME(value) FROM spec WHERE spec_type = ? AND name = ?`, []any{"cluster_config", "row_width"}},
		{`SELECT WRITETIME(value) FROM service_index WHERE service = ? AND service_key = ? AND key = ?`, []any{"svc", "sk", "k"}},
	} {
		var wt int64
		require.NoError(t, s.Query(q.stmt, q.args...).Scan(&wt), q.stmt)
		require.Equal(t, now, wt, q.stmt)
		require.InDelta(t, time.Now().UnixMilli(), wt, 60_000, q.stmt)
	}

	// row_key_time_index has only key columns: its row marker carries the
	// timestamp, so a delete at now-1 must not remove it, and one at now must.
	require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: now - 1,
		RowTimes: []engine.RowTimeIndex{{Metric: "sys.cpu", RowTime: 1358985600000}}}))
	require.Contains(t, collectRowTimes(t, e, "sys.cpu", 0, 1<<62), int64(1358985600000))
	require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: now,
		RowTimes: []engine.RowTimeIndex{{Metric: "sys.cpu", RowTime: 1358985600000}}}))
	require.NotContains(t, collectRowTimes(t, e, "sys.cpu", 0, 1<<62), int64(1358985600000))
}

// TestTaglessSeries: an empty frozen map is a valid clustering value; a nil
// map would be sent as null and rejected (§4 of the issue).
func TestTaglessSeries(t *testing.T) {
	e, s := newEngine(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		tags []codec.Tag
	}{{"nil", nil}, {"empty", []codec.Tag{}}} {
		t.Run(tc.name, func(t *testing.T) {
			metric := "nt." + tc.name
			rk := engine.IndexedRowKey{Metric: metric, RowTime: 0, DataType: "kairos_long", Tags: tc.tags}
			require.NoError(t, e.Write(ctx, &engine.Batch{
				WriteTime:  time.Now().UnixMilli(),
				RowKeys:    []engine.IndexedRowKey{rk},
				TagIndexed: []engine.TagIndexedRowKey{{IndexedRowKey: rk, Pair: "", Hash: 0}},
			}))
			got := collectRowKeys(t, func(fn func(string, []codec.Tag) error) error {
				return e.RowKeys(ctx, metric, 0, fn)
			})
			require.Equal(t, []rowKey{{"kairos_long", map[string]string{}}}, got)

			// What the driver reads back directly: an empty, non-null map.
			var m map[string]string
			require.NoError(t, s.Query(`SELECT tags FROM row_keys WHERE metric = ? AND table_name = ? AND row_time = ?`,
				metric, "data_points", int64(0)).Scan(&m))
			require.Empty(t, m)

			require.NoError(t, e.Delete(ctx, &engine.Deletes{
				WriteTime: time.Now().UnixMilli(),
				RowKeys:   []engine.IndexedRowKey{rk},
			}))
			require.Empty(t, collectRowKeys(t, func(fn func(string, []codec.Tag) error) error {
				return e.RowKeys(ctx, metric, 0, fn)
			}))
		})
	}
}

func TestStaticOnlyPartitionsAreSkipped(t *testing.T) {
	e, s := newEngine(t)
	ctx := t.Context()
	// A partition with only its static mtime: KairosDB leaves these behind
	// after deleting the last row key (§7.4, §9.2).
	require.NoError(t, s.Query(`INSERT INTO row_keys (metric, table_name, row_time, mtime) VALUES (?, ?, ?, now())`,
		"m", "data_points", int64(0)).Exec())
	require.NoError(t, s.Query(`INSERT INTO tag_indexed_row_keys (metric, table_name, row_time, single_tag_pair, mtime) VALUES (?, ?, ?, ?, now())`,
		"m", "data_points", int64(0), "a=b").Exec())
	require.NoError(t, s.Query(`INSERT INTO service_index (service, service_key, mtime) VALUES (?, ?, now())`,
		"svc", "sk").Exec())
	require.Empty(t, collectRowKeys(t, func(fn func(string, []codec.Tag) error) error {
		return e.RowKeys(ctx, "m", 0, fn)
	}))
	require.Empty(t, collectRowKeys(t, func(fn func(string, []codec.Tag) error) error {
		return e.TagIndexedRowKeys(ctx, "m", 0, "a=b", fn)
	}))
	require.Empty(t, collectStrings(t, func(fn func(string) error) error {
		return e.ServiceKeys(ctx, "svc", "sk", "", fn)
	}))
}

func TestLegacyRowKeys(t *testing.T) {
	e, s := newEngine(t)
	ctx := t.Context()
	keys := [][]byte{
		[]byte("m\x00\x00\x00\x00\x00\x00\x00\x00\x00host=a:"),
		[]byte("m\x00\x00\x00\x00\x00\x6c\x25\x8c\x00host=a:"),
		[]byte("m\x00\xff\xff\xff\xff\xff\xff\xff\xfehost=a:"), // negative row time sorts last
	}
	now := time.Now().UnixMilli()
	for _, k := range keys {
		// KairosDB's ms timestamp: the driver's default µs would outlive any delete (§12 item 1).
		require.NoError(t, s.Query(`INSERT INTO row_key_index (key, column1, value) VALUES (?, ?, 0x00)`, []byte("m"), k).
			WithTimestamp(now-1).Exec())
	}
	list := func(lo, hi []byte) [][]byte {
		var out [][]byte
		require.NoError(t, e.LegacyRowKeys(ctx, "m", lo, hi, func(k []byte) error {
			out = append(out, slices.Clone(k))
			return nil
		}))
		return out
	}
	// The §7.2 bounds: name 00 ts8 00 00 up to name 00 ts8 ff 00.
	lo := []byte("m\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	hi := []byte("m\x00\x00\x00\x00\x00\x6c\x25\x8c\x00\xff\x00")
	require.Equal(t, keys[:2], list(lo, hi))
	require.Equal(t, keys[:1], list(lo, []byte("m\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\x00")))
	require.Empty(t, list(hi, lo))
	require.Equal(t, keys, list([]byte("m"), []byte("n")))

	require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: now,
		LegacyRowKeys: []engine.LegacyRowKey{{Metric: "m", RowKey: keys[1]}}}))
	require.Equal(t, [][]byte{keys[0], keys[2]}, list([]byte("m"), []byte("n")))
	require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: now, LegacyMetrics: []string{"m"}}))
	require.Empty(t, list([]byte("m"), []byte("n")))
}

func TestDelete(t *testing.T) {
	e, _ := newEngine(t)
	ctx := t.Context()
	const rt = 1358985600000
	now := time.Now().UnixMilli()
	b := sample(now)
	// A third row for the range delete.
	keyC := []byte("sys.cpu\x00C")
	for c := uint32(1); c <= 5; c++ {
		b.Cells = append(b.Cells, engine.Cell{Key: keyC, Column: c, Value: []byte{byte(c)}})
	}
	require.NoError(t, e.Write(ctx, b))

	host := tags("host", "server1", "dc", "x:y")
	require.NoError(t, e.Delete(ctx, &engine.Deletes{
		WriteTime:  now + 1,
		Rows:       [][]byte{[]byte("sys.cpu\x00A")},
		CellRanges: []engine.CellRange{{Key: keyC, Lo: 2, Hi: 4}},
		RowKeys:    []engine.IndexedRowKey{{Metric: "sys.cpu", RowTime: rt, DataType: "kairos_long", Tags: tags("dc", "x:y", "host", "server1")}},
		TagIndexed: []engine.TagIndexedRowKey{{IndexedRowKey: engine.IndexedRowKey{
			Metric: "sys.cpu", RowTime: rt, DataType: "kairos_long", Tags: host}, Pair: "dc=x:y", Hash: -2125777964}},
		RowTimes:    []engine.RowTimeIndex{{Metric: "sys.cpu", RowTime: -2}},
		MetricNames: []string{"été"},
	}))

	require.Empty(t, collectCells(t, e, []byte("sys.cpu\x00A"), 0, 0xffffffff), "partition delete")
	require.Equal(t, []cell{{1, "01"}, {5, "05"}}, collectCells(t, e, keyC, 0, 0xffffffff), "inclusive range delete")
	require.Equal(t, []cell{{7, ""}}, collectCells(t, e, []byte("sys.cpu\x00B"), 0, 100), "untouched row")
	require.Equal(t, []rowKey{{"kairos_double", map[string]string{"host": "server1", "dc": "x:y"}}},
		collectRowKeys(t, func(fn func(string, []codec.Tag) error) error { return e.RowKeys(ctx, "sys.cpu", rt, fn) }))
	require.Empty(t, collectRowKeys(t, func(fn func(string, []codec.Tag) error) error {
		return e.TagIndexedRowKeys(ctx, "sys.cpu", rt, "dc=x:y", fn)
	}))
	require.Len(t, collectRowKeys(t, func(fn func(string, []codec.Tag) error) error {
		return e.TagIndexedRowKeys(ctx, "sys.cpu", rt, "host=server1", fn)
	}), 1)
	require.Equal(t, []int64{rt, rt + 1814400000}, collectRowTimes(t, e, "sys.cpu", -1<<62, 1<<62))
	require.Equal(t, []string{"a.b", "sys.cpu"}, collectStrings(t, func(fn func(string) error) error { return e.MetricNames(ctx, fn) }))

	// Deletes shadow only older writes: a write at the delete's time or
	// later comes back (ms timestamps on both sides, §5.4).
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: now + 2,
		Cells: []engine.Cell{{Key: []byte("sys.cpu\x00A"), Column: 9, Value: []byte{9}}}}))
	require.Equal(t, []cell{{9, "09"}}, collectCells(t, e, []byte("sys.cpu\x00A"), 0, 100))
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: now,
		Cells: []engine.Cell{{Key: keyC, Column: 3, Value: []byte{3}}}}))
	require.Equal(t, []cell{{1, "01"}, {5, "05"}}, collectCells(t, e, keyC, 0, 100), "older write stays deleted")

	require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: now}), "empty delete")
}

func TestTTLExpires(t *testing.T) {
	e, _ := newEngine(t)
	ctx := t.Context()
	rk := engine.IndexedRowKey{Metric: "ttl", RowTime: 0, DataType: "kairos_long", Tags: tags("a", "b"), TTL: 2}
	require.NoError(t, e.Write(ctx, &engine.Batch{
		WriteTime: time.Now().UnixMilli(),
		Cells: []engine.Cell{
			{Key: []byte("ttl"), Column: 1, Value: []byte{1}, TTL: 2},
			{Key: []byte("ttl"), Column: 2, Value: []byte{2}}, // 0: never expires
		},
		RowKeys:    []engine.IndexedRowKey{rk},
		TagIndexed: []engine.TagIndexedRowKey{{IndexedRowKey: rk, Pair: "a=b"}},
		RowTimes:   []engine.RowTimeIndex{{Metric: "ttl", RowTime: 0, TTL: 2}},
	}))
	require.Len(t, collectCells(t, e, []byte("ttl"), 0, 10), 2)
	time.Sleep(3 * time.Second)
	require.Equal(t, []cell{{2, "02"}}, collectCells(t, e, []byte("ttl"), 0, 10))
	require.Empty(t, collectRowTimes(t, e, "ttl", -1<<62, 1<<62))
	require.Empty(t, collectRowKeys(t, func(fn func(string, []codec.Tag) error) error { return e.RowKeys(ctx, "ttl", 0, fn) }))
	require.Empty(t, collectRowKeys(t, func(fn func(string, []codec.Tag) error) error {
		return e.TagIndexedRowKeys(ctx, "ttl", 0, "a=b", fn)
	}))
}

func TestSpecAndService(t *testing.T) {
	e, _ := newEngine(t)
	ctx := t.Context()
	now := time.Now().UnixMilli()

	_, ok, err := e.Spec(ctx, "row_time_unit")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, e.SetSpec(ctx, "row_time_unit", "MILLISECONDS", now))
	v, ok, err := e.Spec(ctx, "row_time_unit")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "MILLISECONDS", v)
	require.NoError(t, e.SetSpec(ctx, "row_time_unit", "older", now-1))
	v, _, err = e.Spec(ctx, "row_time_unit")
	require.NoError(t, err)
	require.Equal(t, "MILLISECONDS", v, "the newer write wins")

	for _, k := range []string{"b", "a", "ab", "abc", "b\uffff", "c", "a\U0001F600"} {
		require.NoError(t, e.SetServiceValue(ctx, "svc", "sk", k, "v-"+k, now))
	}
	require.NoError(t, e.SetServiceValue(ctx, "svc", "other", "x", "y", now))
	v, ok, err = e.ServiceValue(ctx, "svc", "sk", "ab")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "v-ab", v)
	_, ok, err = e.ServiceValue(ctx, "svc", "sk", "zz")
	require.NoError(t, err)
	require.False(t, ok)

	keys := func(prefix string) []string {
		return collectStrings(t, func(fn func(string) error) error { return e.ServiceKeys(ctx, "svc", "sk", prefix, fn) })
	}
	require.Equal(t, []string{"a", "ab", "abc", "a\U0001F600", "b", "b\uffff", "c"}, keys(""))
	// KairosDB's bound prefix+U+FFFF stops before supplementary characters.
	require.Equal(t, []string{"a", "ab", "abc"}, keys("a"))
	require.Equal(t, []string{"ab", "abc"}, keys("ab"))
	require.Equal(t, []string{"b"}, keys("b"))
	require.Empty(t, keys("d"))
}

func TestFailedWritesReturnErrors(t *testing.T) {
	e, _ := newEngine(t)
	b := sample(time.Now().UnixMilli())

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, g := range []cql.Grouping{cql.GroupSingles, cql.GroupPartitions, cql.GroupReplicas} {
		cql.SetGrouping(e, g)
		err := e.Write(ctx, b)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "statements failed")
		require.ErrorIs(t, e.Delete(ctx, &engine.Deletes{WriteTime: 1, Rows: [][]byte{[]byte("x")}}), context.Canceled)
		require.Error(t, e.MetricNames(ctx, func(string) error { return nil }))
	}

	// A statement the server rejects: a TTL above Cassandra's maximum.
	cql.SetGrouping(e, cql.GroupSingles)
	bad := sample(time.Now().UnixMilli())
	bad.Cells[0].TTL = 630720001
	err := e.Write(t.Context(), bad)
	require.ErrorContains(t, err, "1 of 14 statements failed")
	var re gocql.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, gocql.ErrCodeInvalid, re.Code())

	// Across partitions, the server rejects the whole batch holding it.
	cql.SetGrouping(e, cql.GroupReplicas)
	err = e.Write(t.Context(), bad)
	require.ErrorContains(t, err, "statements failed")
	require.ErrorAs(t, err, &re)
	require.Equal(t, gocql.ErrCodeInvalid, re.Code())

	require.NoError(t, e.Close())
	err = e.Write(t.Context(), b)
	require.ErrorIs(t, err, gocql.ErrSessionClosed)
	require.Error(t, e.Ready(t.Context()))
}

// TestGroupingsStoreTheSame writes one workload with each grouping into its
// own keyspace and compares every table, write times and TTLs included.
func TestGroupingsStoreTheSame(t *testing.T) {
	now := time.Now().UnixMilli()
	b := workload(now, 50, 7)
	b.RowKeys[0].Tags = nil // a tagless series too
	b.TagIndexed = append(b.TagIndexed, engine.TagIndexedRowKey{IndexedRowKey: b.RowKeys[1], Pair: "host=h1", Hash: 42})
	var dumps []map[string][]string
	for _, g := range []cql.Grouping{cql.GroupSingles, cql.GroupPartitions, cql.GroupReplicas} {
		e, s := newEngine(t)
		cql.SetGrouping(e, g)
		require.NoError(t, e.Write(t.Context(), b))
		dumps = append(dumps, dump(t, s))
	}
	require.Equal(t, dumps[0], dumps[1])
	require.Equal(t, dumps[0], dumps[2])
	require.Len(t, dumps[0]["data_points"], len(b.Cells))
	require.Len(t, dumps[0]["row_keys"], len(b.RowKeys))
}

// dump lists every table's rows as strings, with write times and whether a
// TTL is set (its remaining seconds drift between the two writes).
func dump(t *testing.T, s *gocql.Session) map[string][]string {
	t.Helper()
	queries := map[string]string{
		"data_points":          `SELECT key, column1, value, WRITETIME(value), TTL(value) FROM data_points`,
		"row_keys":             `SELECT metric, table_name, row_time, data_type, tags, WRITETIME(mtime), TTL(mtime) FROM row_keys`,
		"tag_indexed_row_keys": `SELECT metric, table_name, row_time, single_tag_pair, data_type, tag_collection_hash, tags, WRITETIME(mtime), TTL(mtime) FROM tag_indexed_row_keys`,
		"row_key_time_index":   `SELECT metric, table_name, row_time, value FROM row_key_time_index`,
		"string_index":         `SELECT key, column1, value, WRITETIME(value), TTL(value) FROM string_index`,
	}
	out := make(map[string][]string)
	for _, name := range slices.Sorted(maps.Keys(queries)) {
		iter := s.Query(queries[name]).Iter()
		rows, err := iter.SliceMap()
		require.NoError(t, err)
		require.NoError(t, iter.Close())
		for _, r := range rows {
			for k, v := range r {
				if strings.HasPrefix(k, "ttl") {
					r[k] = v != nil && v.(int) > 0
				}
			}
			out[name] = append(out[name], fmt.Sprint(r))
		}
		sort.Strings(out[name])
	}
	return out
}

// workload is series×samples cells in one row each, with the index rows a
// writer sends for them: 10 metrics, series spread over them.
func workload(writeTime int64, series, samples int) *engine.Batch {
	const rt = 1358985600000
	b := &engine.Batch{WriteTime: writeTime}
	for m := range 10 {
		metric := fmt.Sprintf("bench.metric%d", m)
		b.RowTimes = append(b.RowTimes, engine.RowTimeIndex{Metric: metric, RowTime: rt, TTL: 1814400 + 86400})
		b.MetricNames = append(b.MetricNames, metric)
	}
	for i := range series {
		metric := fmt.Sprintf("bench.metric%d", i%10)
		tg := tags("host", fmt.Sprintf("h%d", i), "job", "node", "instance", fmt.Sprintf("10.0.%d.%d:9100", i/256, i%256))
		key := fmt.Appendf(nil, "%s\x00\x00\x00\x01\x3c\x69\xda\x9c\x00\x00\x0bkairos_long%s", metric, tg)
		b.RowKeys = append(b.RowKeys, engine.IndexedRowKey{Metric: metric, RowTime: rt, DataType: "kairos_double", Tags: tg, TTL: 1814400 + 86400})
		for j := range samples {
			b.Cells = append(b.Cells, engine.Cell{
				Key:    key,
				Column: uint32(j * 15000),
				Value:  binary.BigEndian.AppendUint64(nil, uint64(i*samples+j)),
				TTL:    86400,
			})
		}
	}
	return b
}

// TestReplicaOfNamesAHost checks that groupReplicas finds a real host for a
// data_points key, the same one each time (§5.6), not an empty fallback.
func TestReplicaOfNamesAHost(t *testing.T) {
	e, s := newEngine(t)
	var ids []string
	for _, h := range s.GetHosts() {
		ids = append(ids, h.HostID())
	}
	for i := range 20 {
		key := fmt.Appendf(nil, "m\x00\x00\x00\x01\x3c\x69\xda\x9c\x00\x00\x0bkairos_longhost=h%d:", i)
		id := cql.ReplicaOf(e, key)
		require.Contains(t, ids, id)
		require.Equal(t, id, cql.ReplicaOf(e, key))
		// The route cache answers the same, on a miss and on a hit.
		require.Equal(t, id, cql.CachedReplicaOf(e, key))
		require.Equal(t, id, cql.CachedReplicaOf(e, key))
	}
}
