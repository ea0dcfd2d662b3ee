package pebblekv

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// testdata/kairosdb-1.tar.gz is a store written by the engine of layout
// kairosdb-1 (commit 4f4fb57, one key per cell) with the program in
// testdata/kairosdb-1-writer.go.txt: 20 rows of 200 cells of every kind of
// value, one row with a TTL, one overwritten with an older write time, one
// partly and one wholly deleted, index rows, a service value, and its last
// write only in the WAL.
func extractOldStore(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "db")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	f, err := os.Open("testdata/kairosdb-1.tar.gz")
	require.NoError(t, err)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		require.NoError(t, err)
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(h.Name)), b, 0o644))
	}
}

// oldContents reads a kairosdb-1 store directly: its live cells as block
// cells by row key, and every other key but the cells' expiry index keys.
type oldContents struct {
	cells map[string][]cellblock.Cell
	other map[string][]byte
}

func readOldStore(t *testing.T, dir string) oldContents {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	it, err := db.NewIter(nil)
	require.NoError(t, err)
	defer it.Close()
	c := oldContents{cells: map[string][]cellblock.Cell{}, other: map[string][]byte{}}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		switch {
		case k[0] == tableData:
			row, rest, err := cutEscaped(k[1:])
			require.NoError(t, err)
			ent, err := decodeEntry(it.Value())
			require.NoError(t, err)
			c.cells[string(row)] = append(c.cells[string(row)], cellblock.Cell{
				Column:    uint32(rest[0])<<24 | uint32(rest[1])<<16 | uint32(rest[2])<<8 | uint32(rest[3]),
				WriteTime: ent.writeTime, Expiry: ent.expiry, Value: bytes.Clone(ent.value),
			})
		case k[0] == tableExpiry && k[9] == tableData, bytes.Equal(k, layoutKey):
		default:
			c.other[string(k)] = bytes.Clone(it.Value())
		}
	}
	return c
}

// checkConverted compares the converted store with what the old one held:
// every cell with its write time, expiry and value bytes, every other key
// byte for byte, and what the engine answers.
func checkConverted(t *testing.T, e *Engine, want oldContents) {
	t.Helper()
	ctx := t.Context()
	require.Len(t, want.cells, 19, "row 3 was deleted whole")
	for row, cells := range want.cells {
		var got []cellblock.Cell
		prefix := appendBlockPrefix(nil, []byte(row))
		it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		require.NoError(t, err)
		for ok := it.First(); ok; ok = it.Next() {
			var arena []byte
			bc, err := decodeBlock(nil, &arena, it.Value())
			require.NoError(t, err)
			for _, c := range bc {
				c.Value = bytes.Clone(c.Value)
				got = append(got, c)
			}
		}
		require.NoError(t, it.Close())
		require.Equal(t, cells, got, "row %q", row)

		var values [][]byte
		require.NoError(t, e.Cells(ctx, []byte(row), 0, math.MaxUint32, func(_ uint32, v []byte) error {
			values = append(values, bytes.Clone(v))
			return nil
		}))
		require.Len(t, values, len(cells))
		for i, v := range values {
			require.Equal(t, cells[i].Value, v)
			require.NotEqual(t, "older, loses", string(v))
		}
	}
	for k, v := range want.other {
		got, closer, err := e.db.Get([]byte(k))
		require.NoError(t, err, "key %x", k)
		require.Equal(t, v, got, "key %x", k)
		require.NoError(t, closer.Close())
	}
	layout, closer, err := e.db.Get(layoutKey)
	require.NoError(t, err)
	require.Equal(t, layoutVersion, layout)
	require.NoError(t, closer.Close())
	_, _, err = e.db.Get(convertProgressKey)
	require.ErrorIs(t, err, pebble.ErrNotFound)

	// The deletes still shadow older writes; the cell written last (in the
	// old store's WAL) is there; the TTL'd row kept its expiry.
	row := func(r int) []byte {
		return fmt.Appendf(nil, "metric\x00\x00\x00\x01\x9a\xb1\x2c\x00\x00\x00\x0ckairos_double%d=v:", r)
	}
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: 1_790_000_000_000, Cells: []engine.Cell{{Key: row(3), Column: 1, Value: []byte("x")}, {Key: row(2), Column: 1, Value: []byte("x")}}}))
	require.Empty(t, cellValues(t, e, string(row(3))))
	require.Contains(t, cellValues(t, e, string(row(2))), "7=in the WAL")
	require.NotContains(t, cellValues(t, e, string(row(2))), "1=x")
	require.Positive(t, want.cells[string(row(0))][0].Expiry)
	require.NotEmpty(t, readMetricNames(t, e))
}

func readMetricNames(t *testing.T, e *Engine) []string {
	var names []string
	require.NoError(t, e.MetricNames(t.Context(), func(n string) error {
		names = append(names, n)
		return nil
	}))
	return names
}

func TestConvertOldStore(t *testing.T) {
	dir := extractOldStore(t)
	want := readOldStore(t, dir)
	// A snapshot (or anything an operator keeps in the directory) outlives
	// the removal of the old copy.
	kept := filepath.Join(dir, "snapshots", "x", "file")
	require.NoError(t, os.MkdirAll(filepath.Dir(kept), 0o755))
	require.NoError(t, os.WriteFile(kept, []byte("kept"), 0o644))
	var log bytes.Buffer
	e, err := Open(dir, DefaultOptions(), slog.New(slog.NewTextHandler(&log, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	checkConverted(t, e, want)
	require.Contains(t, log.String(), "Converting the embedded store to data_points blocks")
	require.Contains(t, log.String(), "Converted the embedded store's cells")
	for _, leftover := range []string{dir + convertingSuffix, dir + oldLayoutSuffix} {
		_, err := os.Stat(leftover)
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	b, err := os.ReadFile(kept)
	require.NoError(t, err)
	require.Equal(t, "kept", string(b))

	// Reopening finds nothing to convert.
	require.NoError(t, e.Close())
	log.Reset()
	e = open(t, dir, DefaultOptions())
	checkConverted(t, e, want)
	require.NotContains(t, log.String(), "Convert")
}

// lowDisk is a disk with little room left.
type lowDisk struct{ vfs.FS }

func (lowDisk) GetDiskUsage(string) (vfs.DiskUsage, error) {
	return vfs.DiskUsage{AvailBytes: 10 << 20, TotalBytes: 100 << 30}, nil
}

func TestConvertRefusedWithoutRoom(t *testing.T) {
	dir := extractOldStore(t)
	want := readOldStore(t, dir)
	opts := DefaultOptions()
	opts.FS = lowDisk{vfs.Default}
	_, err := Open(dir, opts, nil)
	require.ErrorContains(t, err, fmt.Sprintf("cannot convert the pebble store in %q to layout kairosdb-3: it needs about 64 MiB free on its disk and 10 MiB are: free some space and start again (the store is unchanged)", dir))
	old, err := isOldLayout(vfs.Default, dir)
	require.NoError(t, err)
	require.True(t, old)
	require.Equal(t, want, readOldStore(t, dir))

	e := open(t, dir, DefaultOptions())
	checkConverted(t, e, want)
}

// TestConvertResumesAfterKill kills a conversion (another process: this
// test binary as the child, TestMain) with SIGKILL midway, then opens
// the store, which resumes the conversion where the last synced batch
// left it.
func TestConvertResumesAfterKill(t *testing.T) {
	dir := extractOldStore(t)
	want := readOldStore(t, dir)
	killChildAfter(t, "KAIROS_CONVERT_CHILD", dir, "cells_done=", 3)
	old, err := isOldLayout(vfs.Default, dir)
	require.NoError(t, err)
	require.True(t, old, "the old store is untouched until the copy is complete")
	_, err = os.Stat(dir + convertingSuffix)
	require.NoError(t, err)

	var log bytes.Buffer
	e, err := Open(dir, DefaultOptions(), slog.New(slog.NewTextHandler(&log, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	require.Contains(t, log.String(), "resuming=true")
	checkConverted(t, e, want)
}

// TestMain runs this binary as the conversion TestConvertResumesAfterKill
// (or TestDensifyResumesAfterKill) kills, when that test sets
// KAIROS_CONVERT_CHILD (KAIROS_DENSIFY_CHILD), rather than as a test
// that would skip everywhere else: a slow conversion in small batches that
// logs every one.
func TestMain(m *testing.M) {
	dir := os.Getenv("KAIROS_CONVERT_CHILD")
	if d := os.Getenv("KAIROS_DENSIFY_CHILD"); d != "" {
		dir = d
		densifyLogEvery, densifyBatchRows, densifyRowPause = 0, 1, 100*time.Millisecond
	}
	if dir == "" {
		os.Exit(m.Run())
	}
	convertBatchCells, convertLogEvery, convertBatchPause = 100, 0, 100*time.Millisecond
	e, err := Open(dir, DefaultOptions(), slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err == nil {
		err = e.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// killChildAfter runs this test binary as a child with env=dir, which
// converts the store in dir, and kills it (SIGKILL) once it has logged n
// lines of progress holding marker.
func killChildAfter(t *testing.T, env, dir, marker string, n int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env+"="+dir)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	cmd.Stdout = cmd.Stderr
	require.NoError(t, cmd.Start())
	progress := 0
	sc := bufio.NewScanner(stderr)
	for progress < n && sc.Scan() {
		if strings.Contains(sc.Text(), marker) {
			progress++
		}
	}
	require.Equal(t, n, progress, "the child logs its progress")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
}
