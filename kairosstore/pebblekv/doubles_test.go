package pebblekv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// cellDoubles reads [lo, hi) of row through CellDoubles as cellValues'
// strings, checking its contract: flush sees at most ctxCheckEvery new
// cells, other comes only after every appended cell was flushed, and the
// slices flush shortens are what the engine appends to next.
func cellDoubles(t *testing.T, e *Engine, row string, lo, hi uint32) []string {
	t.Helper()
	var (
		cols []int64
		vals []float64
		got  []string
	)
	flush := func() error {
		require.NotEmpty(t, cols, "flush without cells")
		require.LessOrEqual(t, len(cols), ctxCheckEvery)
		require.Len(t, vals, len(cols))
		for i := range cols {
			got = append(got, fmt.Sprintf("%d=%x", cols[i], binary.BigEndian.AppendUint64(nil, math.Float64bits(vals[i]))))
		}
		// Kept empty, as a caller that drops every cell would: what the
		// engine appends next must start again from here.
		cols, vals = cols[:0], vals[:0]
		return nil
	}
	other := func(col uint32, v []byte) error {
		require.Empty(t, cols, "a cell handed over before the appended ones were flushed")
		got = append(got, fmt.Sprintf("%d=%x", col, v))
		return nil
	}
	require.NoError(t, e.CellDoubles(t.Context(), []byte(row), lo, hi, &cols, &vals, flush, other))
	require.Empty(t, cols, "cells appended and never flushed")
	return got
}

// TestCellDoublesMatchesCells: CellDoubles gives exactly the cells Cells
// gives (which TestModel holds to its model), in the same order, over
// random rows of several blocks: 8-byte values of every kind (NaN
// payloads, ±Inf, 1e300, -0) and now and then another length, overwrites
// with older and newer write times, TTLs that expire as the clock moves,
// deletes of rows and ranges, the purge, merge operands left unflushed,
// flushed or compacted, and reopenings.
func TestCellDoublesMatchesCells(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCellDoubles(t, seed, 120) })
	}
}

func runCellDoubles(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 77))
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	opts.PurgeInterval = time.Hour
	opts.TombstoneGrace = 30 * time.Second
	clock := time.Unix(1_700_000_000, 0)
	openEngine := func() *Engine {
		e, err := Open("db", opts, nil)
		require.NoError(t, err)
		e.now = func() time.Time { return clock }
		return e
	}
	e := openEngine()
	defer func() { _ = e.Close() }()
	ctx := t.Context()
	rows := []string{"a", "b\x00row", "c"}
	// Columns in several windows: runs of a minute apart, and the ends.
	column := func() uint32 {
		switch rng.IntN(6) {
		case 0:
			return []uint32{0, 1, 1<<24 - 1, 1 << 24, 1 << 31, math.MaxUint32 - 1, math.MaxUint32}[rng.IntN(7)]
		default:
			return uint32(rng.IntN(4))<<24 + uint32(rng.IntN(300))*60_000
		}
	}
	odd := []float64{math.NaN(), math.Float64frombits(0x7ff8dead00000001), math.Inf(1), math.Inf(-1), 1e300, -1e300, math.Copysign(0, -1)}
	// Batches of other lengths and of TTLs are few, so that most blocks
	// hold only 8-byte values and no expiry, as the adapter writes them.
	otherLen := false
	counter := 0.0
	val := func() []byte {
		if otherLen && rng.IntN(30) == 0 {
			return make([]byte, rng.IntN(3)*5)
		}
		counter += float64(rng.IntN(3))
		v := counter // mostly a counter: values that reuse the XOR window
		if rng.IntN(4) == 0 {
			v = rng.NormFloat64()
		}
		if rng.IntN(10) == 0 {
			v = odd[rng.IntN(len(odd))]
		}
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(v))
	}
	base := clock.UnixMilli()
	for step := range steps {
		switch op := rng.IntN(20); {
		case op < 11:
			b := &engine.Batch{WriteTime: base + int64(rng.IntN(40))}
			otherLen = rng.IntN(10) == 0
			ttl := rng.IntN(6) == 0
			start, step := column(), []uint32{1000, 15_000, 60_000}[rng.IntN(3)]
			for k := range 1 + rng.IntN(1500) {
				col := start + uint32(k)*step
				if col < start || rng.IntN(8) == 0 {
					col = column()
				}
				c := engine.Cell{Key: []byte(rows[rng.IntN(len(rows))]), Column: col, Value: val()}
				if ttl && rng.IntN(2) == 0 {
					c.TTL = int32(1 + rng.IntN(20))
				}
				b.Cells = append(b.Cells, c)
			}
			require.NoError(t, e.Write(ctx, b))
		case op < 13:
			d := &engine.Deletes{WriteTime: base + int64(rng.IntN(40))}
			row := []byte(rows[rng.IntN(len(rows))])
			if rng.IntN(3) == 0 {
				d.Rows = [][]byte{row}
			} else {
				lo := column()
				d.CellRanges = []engine.CellRange{{Key: row, Lo: lo, Hi: lo + min(uint32(rng.IntN(1<<25)), math.MaxUint32-lo)}}
			}
			require.NoError(t, e.Delete(ctx, d))
		case op < 15:
			clock = clock.Add(time.Duration(1+rng.IntN(15)) * time.Second)
		case op < 16:
			_, err := e.purge()
			require.NoError(t, err)
		case op < 17:
			require.NoError(t, e.db.Flush())
		case op < 18:
			require.NoError(t, e.db.Compact(ctx, []byte{0}, []byte{0xff}, false))
		case op < 19:
			require.NoError(t, e.Close())
			e = openEngine()
		default:
			base += 50
		}
		for _, row := range rows {
			lo, hi := uint32(0), uint32(math.MaxUint32)
			if rng.IntN(2) == 0 {
				lo, hi = column(), column()
			}
			want := cellValues2(t, e, row, lo, hi)
			require.Equal(t, want, cellDoubles(t, e, row, lo, hi), "seed %d step %d, row %q [%d, %d)", seed, step, row, lo, hi)
		}
		// The rows again through one reader of several rows, with a write
		// to the last row now and then after the first row is read: the
		// reader must see it (a new iterator after the head's drain).
		var late *engine.Batch
		if rng.IntN(3) == 0 {
			late = &engine.Batch{WriteTime: base + 40}
			for range 1 + rng.IntN(20) {
				late.Cells = append(late.Cells, engine.Cell{Key: []byte(rows[len(rows)-1]), Column: column(), Value: val()})
			}
		}
		got := cellDoublesOfRows(t, e, rows, func(i int) {
			if i == 1 && late != nil {
				require.NoError(t, e.Write(ctx, late))
			}
		})
		for i, row := range rows {
			require.Equal(t, cellValues2(t, e, row, 0, math.MaxUint32), got[i], "seed %d step %d, row %q of several", seed, step, row)
		}
	}
}

// cellDoublesOfRows reads every row whole through one CellDoublesOfRows,
// as cellDoubles reads one, calling before(i) before row i.
func cellDoublesOfRows(t *testing.T, e *Engine, rows []string, before func(i int)) [][]string {
	t.Helper()
	out := make([][]string, len(rows))
	var (
		cols []int64
		vals []float64
		i    int
	)
	flush := func() error {
		require.NotEmpty(t, cols, "flush without cells")
		require.LessOrEqual(t, len(cols), ctxCheckEvery)
		for k := range cols {
			out[i] = append(out[i], fmt.Sprintf("%d=%x", cols[k], binary.BigEndian.AppendUint64(nil, math.Float64bits(vals[k]))))
		}
		cols, vals = cols[:0], vals[:0]
		return nil
	}
	other := func(col uint32, v []byte) error {
		require.Empty(t, cols, "a cell handed over before the appended ones were flushed")
		out[i] = append(out[i], fmt.Sprintf("%d=%x", col, v))
		return nil
	}
	require.NoError(t, e.CellDoublesOfRows(t.Context(), func(doubles func([]byte, uint32, uint32, *[]int64, *[]float64, func() error, func(uint32, []byte) error) error) error {
		for i = range rows {
			before(i)
			if err := doubles([]byte(rows[i]), 0, math.MaxUint32, &cols, &vals, flush, other); err != nil {
				return err
			}
		}
		return nil
	}))
	require.Empty(t, cols, "cells appended and never flushed")
	return out
}

// cellValues2 is what Cells lists of row in [lo, hi).
func cellValues2(t *testing.T, e *Engine, row string, lo, hi uint32) []string {
	var got []string
	require.NoError(t, e.Cells(t.Context(), []byte(row), lo, hi, func(col uint32, v []byte) error {
		got = append(got, fmt.Sprintf("%d=%x", col, v))
		return nil
	}))
	return got
}

// TestCellDoublesStops: an error of flush or other stops the read and is
// returned; a cancelled context stops it within ctxCheckEvery cells.
func TestCellDoublesStops(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e := open(t, "db", opts)
	ctx := t.Context()
	b := &engine.Batch{WriteTime: time.Now().UnixMilli()}
	for i := range 5000 {
		b.Cells = append(b.Cells, engine.Cell{Key: []byte("r"), Column: uint32(i) * 1000, Value: binary.BigEndian.AppendUint64(nil, uint64(i))})
		b.Cells = append(b.Cells, engine.Cell{Key: []byte("s"), Column: uint32(i) * 1000, Value: []byte{byte(i)}})
	}
	require.NoError(t, e.Write(ctx, b))
	stop := errors.New("stop")
	var cols []int64
	var vals []float64
	flushes := 0
	err := e.CellDoubles(ctx, []byte("r"), 0, math.MaxUint32, &cols, &vals, func() error { flushes++; return stop }, nil)
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, flushes)
	require.Len(t, cols, ctxCheckEvery)
	err = e.CellDoubles(ctx, []byte("s"), 0, math.MaxUint32, &cols, &vals, nil, func(uint32, []byte) error { return stop })
	require.ErrorIs(t, err, stop)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err = e.CellDoubles(cancelled, []byte("r"), 0, math.MaxUint32, &cols, &vals, func() error { return nil }, nil)
	require.ErrorIs(t, err, context.Canceled)
}

// TestCellDoublesAllocs bounds the allocations of reading a row of 20,000
// doubles (18 windows' blocks) into slices with room for them: Pebble's
// iterator allocates a few per block it reads, CellDoubles none per cell.
func TestCellDoublesAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e := open(t, "db", opts)
	const n = 20_000
	b := &engine.Batch{WriteTime: time.Now().UnixMilli()}
	for i := range n {
		b.Cells = append(b.Cells, engine.Cell{Key: []byte("row\x00key"), Column: uint32(i) * 15_000, Value: binary.BigEndian.AppendUint64(nil, math.Float64bits(float64(i/4)))})
	}
	require.NoError(t, e.Write(t.Context(), b))
	require.NoError(t, e.db.Flush())
	cols, vals := make([]int64, 0, n), make([]float64, 0, n)
	flush := func() error { return nil }
	read := func() {
		cols, vals = cols[:0], vals[:0]
		require.NoError(t, e.CellDoubles(t.Context(), []byte("row\x00key"), 0, math.MaxUint32, &cols, &vals, flush, nil))
	}
	allocs := testing.AllocsPerRun(20, read)
	require.Len(t, cols, n)
	t.Logf("%.0f allocations per read of %d cells", allocs, n)
	require.Less(t, allocs/n, 0.01)
}
