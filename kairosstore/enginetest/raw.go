package enginetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// rawRow is a row of ScanRaw in a form to compare: its text, write time and
// TTL. Remaining TTLs shrink while a test runs, so they are compared apart.
type rawRow struct {
	Text      string
	WriteTime int64
	TTL       int32
}

// RawText renders a row of ScanRaw, TTL and write time left out, the same for
// every engine: tags sorted, bytes quoted.
func RawText(r *engine.Row) string {
	tagText := func() string {
		m := tagMap(r.Index.Tags)
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, "%q=%q,", k, m[k])
		}
		return b.String()
	}
	switch r.Table {
	case engine.DataPoints:
		return fmt.Sprintf("%q %d %q", r.Cell.Key, r.Cell.Column, r.Cell.Value)
	case engine.RowKeyIndex:
		return fmt.Sprintf("%q %q", r.Legacy.Metric, r.Legacy.RowKey)
	case engine.RowKeys:
		return fmt.Sprintf("%q %d %q {%s}", r.Index.Metric, r.Index.RowTime, r.Index.DataType, tagText())
	case engine.TagIndexedRowKeys:
		return fmt.Sprintf("%q %d %q %q %d {%s}", r.Index.Metric, r.Index.RowTime, r.Index.Pair, r.Index.DataType, r.Index.Hash, tagText())
	case engine.RowKeyTimeIndex:
		return fmt.Sprintf("%q %d", r.Index.Metric, r.Index.RowTime)
	case engine.StringIndex:
		return fmt.Sprintf("%q", r.Name)
	case engine.Spec:
		return fmt.Sprintf("%q %q", r.Name, r.Value)
	case engine.ServiceIndex:
		return fmt.Sprintf("%q %q %q %q", r.Service, r.ServiceKey, r.Name, r.Value)
	}
	return "?"
}

// rawListing scans table whole and returns its rows sorted by text.
func rawListing(t *testing.T, e engine.Engine, table engine.Table) []rawRow {
	t.Helper()
	var out []rawRow
	require.NoError(t, e.(engine.Raw).ScanRaw(t.Context(), table, nil, func(r *engine.Row, _ []byte) error {
		out = append(out, rawRow{RawText(r), r.WriteTime, r.TTL})
		return nil
	}))
	slices.SortFunc(out, func(a, b rawRow) int { return strings.Compare(a.Text, b.Text) })
	return out
}

// rawRows collects every row of every table, copied.
func rawRows(t *testing.T, e engine.Engine) []engine.Row {
	t.Helper()
	var rows []engine.Row
	for _, table := range engine.Tables {
		require.NoError(t, e.(engine.Raw).ScanRaw(t.Context(), table, nil, func(r *engine.Row, _ []byte) error {
			rows = append(rows, CloneRow(r))
			return nil
		}))
	}
	return rows
}

// CloneRow copies r deeply: ScanRaw's rows are valid only during the call.
func CloneRow(r *engine.Row) engine.Row {
	c := *r
	c.Cell.Key = slices.Clone(r.Cell.Key)
	c.Cell.Value = slices.Clone(r.Cell.Value)
	c.Legacy.Metric = strings.Clone(r.Legacy.Metric)
	c.Legacy.RowKey = slices.Clone(r.Legacy.RowKey)
	c.Index.Metric, c.Index.DataType, c.Index.Pair = strings.Clone(r.Index.Metric), strings.Clone(r.Index.DataType), strings.Clone(r.Index.Pair)
	c.Index.Tags = tags()
	for _, tg := range r.Index.Tags {
		c.Index.Tags = append(c.Index.Tags, tags(strings.Clone(tg.Name), strings.Clone(tg.Value))...)
	}
	c.Service, c.ServiceKey, c.Name = strings.Clone(r.Service), strings.Clone(r.ServiceKey), strings.Clone(r.Name)
	c.Value = slices.Clone(r.Value)
	return c
}

// testRaw holds an engine's raw scan and load (engine.Raw) to the rows its
// writes and deletes leave, write times and TTLs included, and checks that
// a load into another engine reproduces them and that a second load changes
// nothing. Index rows of one partition are written at one write time: the
// Cassandra engine reads theirs from the partition's static column.
func testRaw(t *testing.T, start opener) {
	src := start(t)
	if _, ok := src.(engine.Raw); !ok {
		t.Fatalf("%T does not implement engine.Raw", src)
	}
	ctx := t.Context()
	wt := writeTime()
	const rt = 1358985600000
	write(t, src, &engine.Batch{
		WriteTime: wt,
		Cells: []engine.Cell{
			{Key: []byte("k\x00a"), Column: 1, Value: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
			{Key: []byte("k\x00a"), Column: 2, Value: []byte("two")},
			{Key: []byte("k\x00a"), Column: 0xfffffffe, Value: []byte{}},
			{Key: []byte("k\x00b"), Column: 1 << 30, Value: []byte("ttl"), TTL: 3600},
			{Key: []byte("gone"), Column: 7, Value: []byte("deleted")},
		},
		RowKeys: []engine.IndexedRowKey{
			{Metric: "m", RowTime: rt, DataType: "kairos_double", Tags: tags("h", "a", "j", "x")},
			{Metric: "m", RowTime: rt, DataType: "kairos_long", Tags: tags()},
			{Metric: "m", RowTime: -rowWidth, DataType: "kairos_long", Tags: tags("h", "b"), TTL: 7200},
			{Metric: "del", RowTime: rt, DataType: "kairos_long", Tags: tags("h", "c")},
		},
		TagIndexed: []engine.TagIndexedRowKey{
			{IndexedRowKey: engine.IndexedRowKey{Metric: "m", RowTime: rt, DataType: "kairos_double", Tags: tags("h", "a", "j", "x")}, Pair: "h=a", Hash: -5},
		},
		RowTimes: []engine.RowTimeIndex{
			{Metric: "m", RowTime: rt},
			{Metric: "m", RowTime: -rowWidth, TTL: 7200},
		},
		MetricNames:   []string{"m", "del", "ünï"},
		LegacyRowKeys: []engine.LegacyRowKey{{Metric: "old", RowKey: []byte("old\x00row")}},
	})
	write(t, src, &engine.Batch{WriteTime: wt + 5, Cells: []engine.Cell{{Key: []byte("k\x00a"), Column: 2, Value: []byte("newer")}}})
	require.NoError(t, src.SetSpec(ctx, "row_width", "1814400000", wt))
	require.NoError(t, src.SetServiceValue(ctx, "svc", "sk", "key", "value", wt+1))
	require.NoError(t, src.SetServiceValue(ctx, "svc", "sk", "dropped", "value", wt+1))
	require.NoError(t, src.DeleteServiceValue(ctx, "svc", "sk", "dropped", wt+2))
	require.NoError(t, src.Delete(ctx, &engine.Deletes{
		WriteTime: wt + 10,
		Rows:      [][]byte{[]byte("gone")},
		RowKeys:   []engine.IndexedRowKey{{Metric: "del", RowTime: rt, DataType: "kairos_long", Tags: tags("h", "c")}},
	}))

	want := map[engine.Table][]rawRow{
		engine.DataPoints: {
			{`"k\x00a" 1 "\x01\x02\x03\x04\x05\x06\a\b"`, wt, 0},
			{`"k\x00a" 2 "newer"`, wt + 5, 0},
			{`"k\x00a" 4294967294 ""`, wt, 0},
			{`"k\x00b" 1073741824 "ttl"`, wt, 3600},
		},
		engine.RowKeyIndex: {{`"old" "old\x00row"`, wt, 0}},
		engine.RowKeys: {
			{`"m" -1814400000 "kairos_long" {"h"="b",}`, wt, 7200},
			{`"m" 1358985600000 "kairos_double" {"h"="a","j"="x",}`, wt, 0},
			{`"m" 1358985600000 "kairos_long" {}`, wt, 0},
		},
		engine.TagIndexedRowKeys: {{`"m" 1358985600000 "h=a" "kairos_double" -5 {"h"="a","j"="x",}`, wt, 0}},
		engine.RowKeyTimeIndex: {
			{`"m" -1814400000`, wt, 7200},
			{`"m" 1358985600000`, wt, 0},
		},
		engine.StringIndex:  {{`"del"`, wt, 0}, {`"m"`, wt, 0}, {`"ünï"`, wt, 0}},
		engine.Spec:         {{`"row_width" "1814400000"`, wt, 0}},
		engine.ServiceIndex: {{`"svc" "sk" "key" "value"`, wt + 1, 0}},
	}
	// check compares a listing with want, TTLs within the seconds a slow
	// machine may take between the write and the scan.
	check := func(e engine.Engine, what string) {
		t.Helper()
		for _, table := range engine.Tables {
			got := rawListing(t, e, table)
			require.Len(t, got, len(want[table]), "%s: %s: %v", what, table, got)
			for i, w := range want[table] {
				g := got[i]
				require.Equal(t, w.Text, g.Text, "%s: %s row %d", what, table, i)
				require.Equal(t, w.WriteTime, g.WriteTime, "%s: %s row %s", what, table, w.Text)
				if w.TTL == 0 {
					require.Zero(t, g.TTL, "%s: %s row %s", what, table, w.Text)
				} else {
					require.InDelta(t, w.TTL-15, g.TTL, 15, "%s: %s row %s: TTL", what, table, w.Text)
				}
			}
		}
	}
	check(src, "source")

	rows := rawRows(t, src)
	dst := start(t)
	raw := dst.(engine.Raw)
	// In two loads, the second first: order must not matter.
	require.NoError(t, raw.LoadRaw(ctx, rows[len(rows)/2:]))
	require.NoError(t, raw.LoadRaw(ctx, rows[:len(rows)/2]))
	check(dst, "copy")
	require.NoError(t, raw.LoadRaw(ctx, rows), "second load")
	check(dst, "copy loaded twice")

	// A copy does not bring back what the source deleted, and an older
	// load does not override a newer write at the destination.
	write(t, dst, &engine.Batch{WriteTime: wt + 100, Cells: []engine.Cell{{Key: []byte("k\x00a"), Column: 1, Value: []byte("dst newer")}}})
	require.NoError(t, raw.LoadRaw(ctx, rows))
	require.Equal(t, []cell{{1, []byte("dst newer")}}, cells(t, dst, []byte("k\x00a"), 1, 2))
	require.Empty(t, cells(t, dst, []byte("gone"), 0, 0xffffffff))

	// Resuming at any position handed out yields the rest of the scan.
	var all []string
	var resumes []int
	var positions [][]byte
	require.NoError(t, src.(engine.Raw).ScanRaw(ctx, engine.DataPoints, nil, func(r *engine.Row, resume []byte) error {
		if resume != nil {
			resumes = append(resumes, len(all))
			positions = append(positions, slices.Clone(resume))
		}
		all = append(all, RawText(r))
		return nil
	}))
	require.NotEmpty(t, positions)
	require.Equal(t, 0, resumes[0], "the first row carries a position")
	for i, pos := range positions {
		var rest []string
		require.NoError(t, src.(engine.Raw).ScanRaw(ctx, engine.DataPoints, pos, func(r *engine.Row, _ []byte) error {
			rest = append(rest, RawText(r))
			return nil
		}))
		require.Equal(t, all[resumes[i]:], rest, "resumed at position %d", i)
	}

	// Hostile TTLs are refused before anything is stored.
	bad := []engine.Row{{Table: engine.StringIndex, Name: "x", WriteTime: wt}, {Table: engine.StringIndex, Name: "y", WriteTime: wt, TTL: -1}}
	require.Error(t, raw.LoadRaw(ctx, bad))
	bad[1].TTL = 630720001
	require.Error(t, raw.LoadRaw(ctx, bad))
	require.NotContains(t, metricNames(t, dst), "x")
}
