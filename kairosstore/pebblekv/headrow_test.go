package pebblekv

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// inHead reports whether rowKey has cells in the head.
func inHead(e *Engine, rowKey string) bool {
	e.head.mu.Lock()
	defer e.head.mu.Unlock()
	for r := e.head.rows[e.marks.hash([]byte(rowKey))]; r != nil; r = r.next {
		if r.key == rowKey {
			return true
		}
	}
	return false
}

// rowReaders are the engine's methods that read one data_points row, each
// listing the columns of row from lo on.
func rowReaders(t *testing.T, e *Engine) map[string]func(row string, lo uint32) []uint32 {
	ctx := t.Context()
	return map[string]func(row string, lo uint32) []uint32{
		"Cells": func(row string, lo uint32) (got []uint32) {
			require.NoError(t, e.Cells(ctx, []byte(row), lo, math.MaxUint32, func(c uint32, _ []byte) error { got = append(got, c); return nil }))
			return got
		},
		"CellsOfRows": func(row string, lo uint32) (got []uint32) {
			require.NoError(t, e.CellsOfRows(ctx, func(cells func([]byte, uint32, uint32, func(uint32, []byte) error) error) error {
				return cells([]byte(row), lo, math.MaxUint32, func(c uint32, _ []byte) error { got = append(got, c); return nil })
			}))
			return got
		},
		"CellDoubles": func(row string, lo uint32) (got []uint32) {
			var cols []int64
			var vals []float64
			flush := func() error {
				for _, c := range cols {
					got = append(got, uint32(c))
				}
				cols, vals = cols[:0], vals[:0]
				return nil
			}
			require.NoError(t, e.CellDoubles(ctx, []byte(row), lo, math.MaxUint32, &cols, &vals, flush, func(c uint32, _ []byte) error { got = append(got, c); return nil }))
			return got
		},
		"FirstCell": func(row string, lo uint32) []uint32 {
			c, ok, err := e.FirstCell(ctx, []byte(row), lo, math.MaxUint32)
			require.NoError(t, err)
			if !ok {
				return nil
			}
			return []uint32{c}
		},
	}
}

// TestReadLeavesOtherRows: a read drains the rows it reads, and leaves
// every other row's cells in the head.
func TestReadLeavesOtherRows(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e := open(t, "db", opts)
	ctx := t.Context()
	for name, read := range rowReaders(t, e) {
		read := func(row string) []uint32 { return read(row, 0) }
		a, b := "a-"+name, "b-"+name
		for _, row := range []string{a, b} {
			require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: time.Now().UnixMilli(), Cells: []engine.Cell{{Key: []byte(row), Column: 7, Value: f64(7)}}}))
			require.True(t, inHead(e, row), "a one-cell write goes to the head")
		}
		require.Equal(t, []uint32{7}, read(a), name)
		require.False(t, inHead(e, a), "%s leaves the row it read in the head", name)
		require.True(t, inHead(e, b), "%s drained a row it did not read", name)
		require.Equal(t, []uint32{7}, read(b), name)
		require.False(t, inHead(e, b), name)
	}
}

// TestHeadConcurrentReads: writers of one cell per write and readers of
// the same rows and of others, with windows filling and the head rotating
// meanwhile: every read sees every cell acknowledged before it began.
func TestHeadConcurrentReads(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	// Rotations (whole drains) while readers drain rows.
	opts.HeadBytes = 64 << 10
	e := open(t, "db", opts)
	ctx := t.Context()
	const rows, writers, readers = 8, 4, 4
	perRow := 2000
	if raceEnabled {
		perRow = 700
	}
	rowKey := func(r int) []byte { return fmt.Appendf(nil, "row%d", r) }
	var acked [rows]atomic.Int64 // columns 0..acked-1 of each row are acknowledged
	var wg sync.WaitGroup
	var stop atomic.Bool
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each writer owns rows w and w+writers, one writer per row, so
			// that the acknowledged columns of a row have no gaps.
			for col := range perRow {
				for _, r := range []int{w, w + writers} {
					c := engine.Cell{Key: rowKey(r), Column: uint32(col), Value: f64(float64(col))}
					if err := e.Write(ctx, &engine.Batch{WriteTime: time.Now().UnixMilli(), Cells: []engine.Cell{c}}); err != nil {
						t.Error(err)
						return
					}
					acked[r].Store(int64(col + 1))
				}
			}
		}()
	}
	check := func(method string, r int, want int64, got map[uint32]float64) {
		for col := range uint32(want) {
			v, ok := got[col]
			if !ok || v != float64(col) {
				t.Errorf("%s of row %d: column %d (acknowledged: %d) is %v, present %v", method, r, col, want, v, ok)
				stop.Store(true)
				return
			}
		}
	}
	var reads atomic.Int64
	var rwg sync.WaitGroup
	for rd := range readers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			rng := rand.New(rand.NewPCG(uint64(rd), 1))
			for !stop.Load() {
				r := rng.IntN(rows)
				want := acked[r].Load()
				got := map[uint32]float64{}
				var err error
				switch m := rd % 3; m {
				case 0:
					err = e.Cells(ctx, rowKey(r), 0, math.MaxUint32, func(c uint32, v []byte) error {
						got[c] = math.Float64frombits(binary.BigEndian.Uint64(v))
						return nil
					})
					check("Cells", r, want, got)
				case 1:
					var cols []int64
					var vals []float64
					err = e.CellDoubles(ctx, rowKey(r), 0, math.MaxUint32, &cols, &vals, func() error {
						for i := range cols {
							got[uint32(cols[i])] = vals[i]
						}
						cols, vals = cols[:0], vals[:0]
						return nil
					}, func(uint32, []byte) error { return fmt.Errorf("not a double") })
					check("CellDoubles", r, want, got)
				case 2:
					// Several rows through one iterator, each snapshot taken
					// before the call.
					var wants [rows]int64
					for i := range rows {
						wants[i] = acked[i].Load()
					}
					gots := make([]map[uint32]float64, rows)
					err = e.CellsOfRows(ctx, func(cells func([]byte, uint32, uint32, func(uint32, []byte) error) error) error {
						for i := range rows {
							gots[i] = map[uint32]float64{}
							if err := cells(rowKey(i), 0, math.MaxUint32, func(c uint32, v []byte) error {
								gots[i][c] = math.Float64frombits(binary.BigEndian.Uint64(v))
								return nil
							}); err != nil {
								return err
							}
						}
						return nil
					})
					for i := range rows {
						check("CellsOfRows", i, wants[i], gots[i])
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	rwg.Wait()
	require.Positive(t, reads.Load())
	t.Logf("%d reads", reads.Load())
	for r := range rows {
		got := cellsOf(t, e, string(rowKey(r)))
		require.Len(t, got, perRow, "row %d", r)
	}
}
