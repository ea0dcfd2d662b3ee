package pebblekv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

func TestWindowOf(t *testing.T) {
	key := func(metric, dataType string, tags ...codec.Tag) []byte {
		return codec.AppendRowKey(nil, codec.RowKey{Metric: metric, RowTime: -1, DataType: dataType, Tags: tags})
	}
	res := func(v string) codec.Tag { return codec.Tag{Name: "rollup_resolution", Value: v} }
	for _, c := range []struct {
		name  string
		key   []byte
		shift uint
	}{
		{"rollup at 1h", []byte(rollupRowKey("m", "1h", 0)), 31},
		{"rollup at 6h", []byte(rollupRowKey("m", "6h", 0)), 32},
		{"rollup at 1d", []byte(rollupRowKey("m", "1d", 0)), 32},
		{"rollup at 5m", []byte(rollupRowKey("m", "5m", 0)), 28},
		{"rollup at 1m", []byte(rollupRowKey("m", "1m", 0)), 25},
		{"rollup at Prometheus's minimum time", []byte(rollupRowKey("m", "6h", math.MinInt64)), 32},
		{"legacy type", key("m_rollup", codec.TypeLegacy, res("5m")), 28},
		{"only tag", key("m_rollup", codec.TypeDouble, res("5m")), 28},
		{"resolution not a rollup's", key("m_rollup", codec.TypeDouble, res("7m")), windowShift},
		{"resolution past a day", key("m_rollup", codec.TypeDouble, res("2d")), windowShift},
		{"resolution not a duration", key("m_rollup", codec.TypeDouble, res("x")), windowShift},
		{"resolution empty", key("m_rollup", codec.TypeDouble, codec.Tag{Name: "rollup_resolution", Value: ""}), windowShift},
		{"raw", key("m", codec.TypeDouble, codec.Tag{Name: "job", Value: "j"}), windowShift},
		{"suffix without the tag", key("m_rollup", codec.TypeDouble, codec.Tag{Name: "rollup_aggregate", Value: "max"}), windowShift},
		{"tag without the suffix", key("m", codec.TypeDouble, res("5m")), windowShift},
		{"suffix inside the name", key("m_rollup_x", codec.TypeDouble, res("5m")), windowShift},
		{"tag in a value", key("m_rollup", codec.TypeDouble, codec.Tag{Name: "a", Value: "x:rollup_resolution=5m:"}), windowShift},
		{"tag in a name", key("m_rollup", codec.TypeDouble, codec.Tag{Name: "xrollup_resolution", Value: "5m"}), windowShift},
		{"tag in a value, then the tag", key("m_rollup", codec.TypeDouble, codec.Tag{Name: "a", Value: "rollup_resolution=x"}, res("1h")), 31},
		{"tag in the row time", append([]byte("m_rollup\x00"), "rollup_r"...), windowShift},
		{"type block past the key", append([]byte("m_rollup\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x7f"), "rollup_resolution=5m:"...), windowShift},
		{"type block cut short", []byte("m_rollup\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), windowShift},
		{"no NUL", []byte("m_rollup"), windowShift},
		{"empty", nil, windowShift},
	} {
		require.Equal(t, c.shift, windowShiftOf(c.key), c.name)
		for _, col := range []uint32{0, 1, 1<<24 - 1, 1 << 24, 1_814_399_999, 1 << 31, math.MaxUint32} {
			require.Equal(t, uint32(uint64(col)>>c.shift), windowOf(c.key, col), "%s, column %d", c.name, col)
		}
	}
	// A three-week row of milliseconds is one window at 1h and 6h.
	for _, r := range []string{"1h", "6h"} {
		require.Zero(t, windowOf([]byte(rollupRowKey("m", r, 0)), 1_814_399_999), r)
	}
}

// windowedStore is what buildWindowedStore wrote: its rows, and the
// winning cell of each column of each row, in column order.
type windowedStore struct {
	rollupRows []string
	rawRows    []string
	cells      map[string][]cellblock.Cell
	expired    int64 // the expiry of the cells that have expired
}

// buildWindowedStore writes into dir a store of layout kairosdb-2 as the
// build before one block per rollup row wrote it: every row's blocks in
// windows of 2^24 columns, each of several merge operands that overlap
// (an older write, a newer one, ties broken by value), cells with and
// without a TTL, one already expired, with their expiry index keys.
func buildWindowedStore(t *testing.T, dir string, rows int) windowedStore {
	t.Helper()
	e, err := Open(dir, DefaultOptions(), nil)
	require.NoError(t, err)
	require.NoError(t, e.Setup(t.Context()))
	require.NoError(t, e.Close())

	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: formatVersion, Merger: merger})
	require.NoError(t, err)
	now := time.Now().Unix()
	// Expired two hours ago: the purge looks at a block an hour past its
	// cells' expiry at most (blockPurgeTime).
	s := windowedStore{cells: map[string][]cellblock.Cell{}, expired: now - 7200}
	columns := []uint32{0, 1, 1<<24 - 1, 1 << 24, 1<<24 + 3_600_000, 5<<24 + 7, 1_814_399_999, 1 << 31, math.MaxUint32}
	values := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, -0.0}
	for r := range rows {
		row := rollupRowKey(fmt.Sprint("m", r%3), []string{"1h", "5m", "6h"}[r%3], int64(r)*1_814_400_000-math.MaxInt64/2)
		raw := string(codec.AppendRowKey(nil, codec.RowKey{Metric: "m", RowTime: int64(r), DataType: codec.TypeDouble}))
		s.rollupRows, s.rawRows = append(s.rollupRows, row), append(s.rawRows, raw)
		for _, rowKey := range []string{row, raw} {
			var winners []cellblock.Cell
			for i, col := range columns {
				v := binary.BigEndian.AppendUint64(nil, math.Float64bits(values[(i+r)%len(values)]))
				wt := int64(1_000_000 + r)
				older := cellblock.Cell{Column: col, WriteTime: wt - 1, Value: []byte("older, loses")}
				win := cellblock.Cell{Column: col, WriteTime: wt, Value: v}
				switch i % 4 {
				case 1:
					win.Expiry = now + 86400*365
				case 2:
					win.Expiry = s.expired
				}
				tie := cellblock.Cell{Column: col, WriteTime: wt, Expiry: win.Expiry, Value: bytes.Repeat([]byte{0}, len(v))}
				require.True(t, cellWins(&win, &tie))
				for _, c := range []cellblock.Cell{win, older, tie} {
					key := appendBlockKey(nil, []byte(rowKey), col>>windowShift)
					b := db.NewBatch()
					require.NoError(t, b.Merge(key, cellblock.Append(nil, []cellblock.Cell{c}), nil))
					var xkey []byte
					require.NoError(t, indexBlock(b, key, []cellblock.Cell{c}, defaultBlockPurgeStep, &xkey))
					require.NoError(t, b.Commit(pebble.NoSync))
				}
				winners = append(winners, win)
			}
			s.cells[rowKey] = winners
		}
	}
	require.NoError(t, db.Set(layoutKey, layoutVersionWindows, pebble.Sync))
	require.NoError(t, db.Close())
	return s
}

// checkDensified checks that every rollup row of s is one block at window
// 0, every raw row still in its windows, and every cell there with its
// value, write time and expiry, and read back alive or not by its TTL.
func checkDensified(t *testing.T, e *Engine, s windowedStore) {
	t.Helper()
	layout, closer, err := e.db.Get(layoutKey)
	require.NoError(t, err)
	require.Equal(t, string(layoutVersion), string(layout))
	require.NoError(t, closer.Close())
	blocks := func(row string) (keys []string, cells []cellblock.Cell) {
		prefix := appendBlockPrefix(nil, []byte(row))
		it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		require.NoError(t, err)
		for ok := it.First(); ok; ok = it.Next() {
			keys = append(keys, string(it.Key()))
			var arena []byte
			bc, err := decodeBlock(nil, &arena, it.Value())
			require.NoError(t, err)
			for _, c := range bc {
				c.Value = bytes.Clone(c.Value)
				cells = append(cells, c)
			}
		}
		require.NoError(t, it.Close())
		return keys, cells
	}
	for _, row := range s.rollupRows {
		keys, cells := blocks(row)
		var want []string
		for _, c := range s.cells[row] {
			if k := string(appendBlockKey(nil, []byte(row), windowOf([]byte(row), c.Column))); !slices.Contains(want, k) {
				want = append(want, k)
			}
		}
		require.Less(t, len(want), 6, "rollup row %q has fewer windows than a raw one", row)
		require.Equal(t, want, keys, "rollup row %q is in its windows", row)
		require.Equal(t, s.cells[row], cells, "rollup row %q", row)
	}
	for _, row := range s.rawRows {
		keys, cells := blocks(row)
		require.Len(t, keys, 6, "raw row %q keeps its windows", row)
		require.Equal(t, s.cells[row], cells, "raw row %q", row)
	}
	for _, row := range append(s.rollupRows[:len(s.rollupRows):len(s.rollupRows)], s.rawRows...) {
		var want, got []string
		for _, c := range s.cells[row] {
			if c.Expiry != s.expired && c.Column >= 1<<24 && c.Column < 1<<31 {
				want = append(want, fmt.Sprintf("%d=%x", c.Column, c.Value))
			}
		}
		require.NoError(t, e.Cells(t.Context(), []byte(row), 1<<24, 1<<31, func(col uint32, v []byte) error {
			got = append(got, fmt.Sprintf("%d=%x", col, v))
			return nil
		}))
		require.Equal(t, want, got, "row %q read from the middle of the row", row)
	}
}

func TestDensifyWindowedStore(t *testing.T) {
	dir := t.TempDir()
	s := buildWindowedStore(t, dir, 3)
	var log bytes.Buffer
	e, err := Open(dir, DefaultOptions(), slog.New(slog.NewTextHandler(&log, nil)))
	require.NoError(t, err)
	require.Contains(t, log.String(), "rows=3 rows_converted=3")
	checkDensified(t, e, s)

	// The purge finds the old blocks' expiry keys without their blocks and
	// drops the expired cells of the new ones.
	n, err := e.purge()
	require.NoError(t, err)
	require.Equal(t, 2*2*3, n, "the expired cells of every row, raw and rollup")
	for _, row := range s.rollupRows {
		s.cells[row] = deleteExpired(s.cells[row], s.expired)
	}
	for _, row := range s.rawRows {
		s.cells[row] = deleteExpired(s.cells[row], s.expired)
	}
	_, err = e.purge()
	require.NoError(t, err)
	require.NoError(t, e.Close())

	log.Reset()
	e = open(t, dir, DefaultOptions())
	require.NotContains(t, log.String(), "Convert")
	rs := s
	rs.rawRows = nil // their window count was checked; the purge dropped a block of some
	checkDensified(t, e, rs)
}

func deleteExpired(cells []cellblock.Cell, expired int64) []cellblock.Cell {
	var out []cellblock.Cell
	for _, c := range cells {
		if c.Expiry != expired {
			out = append(out, c)
		}
	}
	return out
}

// TestDensifyResumesAfterKill kills the conversion of rollup rows (this
// test binary as the child, TestMain) with SIGKILL midway, then opens the
// store, which converts the rows left and keeps every cell.
func TestDensifyResumesAfterKill(t *testing.T) {
	dir := t.TempDir()
	s := buildWindowedStore(t, dir, 60)
	killChildAfter(t, "KAIROS_DENSIFY_CHILD", dir, "rows_done=", 5)

	var log bytes.Buffer
	e, err := Open(dir, DefaultOptions(), slog.New(slog.NewTextHandler(&log, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	var rows, converted int
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "Converted the embedded store's rollup rows") {
			_, err := fmt.Sscanf(line[strings.Index(line, "rows="):], "rows=%d rows_converted=%d", &rows, &converted)
			require.NoError(t, err)
		}
	}
	require.Equal(t, 60, rows)
	require.Less(t, converted, 60-4, "the rows the child converted are skipped")
	require.Positive(t, converted, "the child was killed before the end")
	checkDensified(t, e, s)
}

// FuzzWindowShiftOf: any row key, a raw or hostile one included, gets a
// shift between the raw one and the whole row, without a panic.
func FuzzWindowShiftOf(f *testing.F) {
	f.Add([]byte(rollupRowKey("m", "5m", 0)))
	f.Add([]byte(rollupRowKey("m", "6h", math.MinInt64)))
	f.Add([]byte("m_rollup\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x7frollup_resolution=5m:"))
	f.Add(codec.AppendRowKey(nil, codec.RowKey{Metric: "m", DataType: codec.TypeDouble, Tags: []codec.Tag{{Name: "job", Value: "j"}}}))
	f.Fuzz(func(t *testing.T, key []byte) {
		s := windowShiftOf(key)
		if s != windowShift && (s < 25 || s > 32) {
			t.Fatalf("shift %d of %q", s, key)
		}
		if s != windowShift && !bytes.Contains(key, []byte("_rollup\x00")) {
			t.Fatalf("shift %d of %q, not a rollup's key", s, key)
		}
	})
}
