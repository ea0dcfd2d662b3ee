package pebblekv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// modelCell is what the reference model keeps of a data_points cell: the
// winner of every write, as Cassandra reconciles them.
type modelCell struct {
	writeTime, expiry int64
	value             []byte
}

type modelTomb struct {
	row       string
	lo, hi    uint32
	writeTime int64
	expiry    int64
}

// model is the reference for data_points: last write wins per cell by
// write time (ties as entry.supersedes), a TTL'd cell is invisible once
// expired and gone at the next purge, deletes remove older-or-equal cells
// and shadow such writes until their grace ends.
type model struct {
	cells map[string]map[uint32]modelCell
	tombs map[[3]string]modelTomb // by row, lo, hi: one tombstone key each
	grace int64
	// due holds the expiry index keys of blocks: the purge drops the
	// expired cells of a block when one of its keys is due.
	due map[modelDue]bool
}

type modelDue struct {
	row    string
	window uint32
	at     int64
}

func (m *model) write(now, writeTime, purgeStep int64, cells []engine.Cell) {
	// A cell that loses to another of its batch is never stored, and notes
	// nothing in the expiry index.
	type rc struct {
		row string
		col uint32
	}
	winner := map[rc]int{}
	for i, c := range cells {
		k := rc{string(c.Key), c.Column}
		j, ok := winner[k]
		if !ok || m.entryOf(now, writeTime, &c).supersedes(m.entryOf(now, writeTime, &cells[j])) {
			winner[k] = i
		}
	}
	for i, c := range cells {
		if m.shadowed(now, string(c.Key), c.Column, writeTime) {
			continue
		}
		var exp int64
		if c.TTL != 0 {
			exp = now + int64(c.TTL)
			if winner[rc{string(c.Key), c.Column}] == i {
				m.due[modelDue{string(c.Key), windowOf(c.Key, c.Column), blockPurgeTime(exp, purgeStep)}] = true
			}
		}
		nc := modelCell{writeTime: writeTime, expiry: exp, value: bytes.Clone(c.Value)}
		row := m.cells[string(c.Key)]
		if row == nil {
			row = map[uint32]modelCell{}
			m.cells[string(c.Key)] = row
		}
		old, ok := row[c.Column]
		if !ok || (entry{writeTime: nc.writeTime, expiry: nc.expiry, value: nc.value}).supersedes(entry{writeTime: old.writeTime, expiry: old.expiry, value: old.value}) {
			row[c.Column] = nc
		}
	}
}

func (m *model) entryOf(now, writeTime int64, c *engine.Cell) entry {
	var exp int64
	if c.TTL != 0 {
		exp = now + int64(c.TTL)
	}
	return entry{writeTime: writeTime, expiry: exp, value: c.Value}
}

func (m *model) shadowed(now int64, row string, col uint32, writeTime int64) bool {
	for _, tb := range m.tombs {
		if tb.row == row && tb.lo <= col && col <= tb.hi && tb.writeTime >= writeTime && tb.expiry > now {
			return true
		}
	}
	return false
}

func (m *model) delete(now, writeTime int64, row string, lo, hi uint32) {
	for col, c := range m.cells[row] {
		if lo <= col && col <= hi && c.writeTime <= writeTime {
			delete(m.cells[row], col)
		}
	}
	// The tombstone key keeps the winner, or the new one if the old one's
	// grace has ended.
	k := [3]string{row, fmt.Sprint(lo), fmt.Sprint(hi)}
	nt := modelTomb{row: row, lo: lo, hi: hi, writeTime: writeTime, expiry: now + m.grace}
	if old, ok := m.tombs[k]; ok && old.expiry > now && (old.writeTime > nt.writeTime || old.writeTime == nt.writeTime && old.expiry > nt.expiry) {
		return
	}
	m.tombs[k] = nt
}

func (m *model) purge(now int64) {
	for d := range m.due {
		if d.at > now {
			continue
		}
		delete(m.due, d)
		for col, c := range m.cells[d.row] {
			if windowOf([]byte(d.row), col) == d.window && c.expiry != 0 && c.expiry <= now {
				delete(m.cells[d.row], col)
			}
		}
	}
}

func (m *model) visible(now int64, row string, lo, hi uint32) []string {
	var out []string
	cols := slices.Sorted(func(yield func(uint32) bool) {
		for col := range m.cells[row] {
			if !yield(col) {
				return
			}
		}
	})
	for _, col := range cols {
		c := m.cells[row][col]
		if col >= lo && col < hi && (c.expiry == 0 || c.expiry > now) {
			out = append(out, fmt.Sprintf("%d=%x", col, c.value))
		}
	}
	return out
}

// TestModel runs random writes (older, newer and equal write times, TTLs,
// both kinds of value), deletes of rows and ranges, clock steps, purges,
// flushes, compactions and reopenings against the engine and the model, and
// compares every row after each step.
// TestModel runs the model with the head off, with its default bound
// (drained by reads, deletes, purges and reopenings), and with a bound so
// small that most writes drain it.
func TestModel(t *testing.T) {
	for _, hb := range []int64{-1, 0, 2 << 10} {
		for seed := range uint64(8) {
			t.Run(fmt.Sprintf("head %d/%d", hb, seed), func(t *testing.T) { runModel(t, seed, 300, hb) })
		}
	}
}

func runModel(t *testing.T, seed uint64, steps int, headBytes int64) {
	rng := rand.New(rand.NewPCG(seed, 31))
	fs := vfs.NewCrashableMem()
	opts := DefaultOptions()
	opts.FS = fs
	opts.HeadBytes = headBytes
	opts.PurgeInterval = time.Hour // by hand below
	opts.TombstoneGrace = 30 * time.Second
	clock := time.Unix(1_700_000_000, 0)
	opts.clock = func() time.Time { return clock }
	// One step for the run: the head's cells get their expiry index keys
	// when they drain, which may be after a reopening.
	opts.blockPurgeStep = 1 + int64(rng.IntN(3))*5
	openEngine := func() *Engine {
		e, err := Open("db", opts, nil)
		require.NoError(t, err)
		e.now = func() time.Time { return clock }
		return e
	}
	e := openEngine()
	defer func() { _ = e.Close() }()
	ctx := t.Context()
	m := &model{cells: map[string]map[uint32]modelCell{}, tombs: map[[3]string]modelTomb{}, grace: 30, due: map[modelDue]bool{}}

	// The last row is a rollup's, in windows of 2^28 columns (windowOf).
	rows := []string{"a", "b\x00row", "c", rollupRowKey("m", "5m", 0)}
	columns := []uint32{0, 1, 2, 60_000, 120_000, 1<<24 - 1, 1 << 24, 1<<24 + 60_000, 5<<24 + 7, 1 << 31, math.MaxUint32 - 1, math.MaxUint32}
	value := func() []byte {
		switch rng.IntN(4) {
		case 0:
			return []byte{byte(rng.IntN(3))}
		case 1:
			return nil
		default:
			return binary.BigEndian.AppendUint64(nil, math.Float64bits([]float64{math.NaN(), math.Inf(1), 1e300, 1.5, 0}[rng.IntN(5)]))
		}
	}
	base := clock.UnixMilli()
	for step := range steps {
		now := clock.Unix()
		switch op := rng.IntN(23); {
		case op < 11:
			wt := base + int64(rng.IntN(40))
			b := &engine.Batch{WriteTime: wt}
			for range 1 + rng.IntN(12) {
				c := engine.Cell{Key: []byte(rows[rng.IntN(len(rows))]), Column: columns[rng.IntN(len(columns))], Value: value()}
				if rng.IntN(3) == 0 {
					c.TTL = int32(1 + rng.IntN(20))
				}
				b.Cells = append(b.Cells, c)
			}
			require.NoError(t, e.Write(ctx, b))
			if testing.Verbose() {
				for _, c := range b.Cells {
					t.Logf("step %d now %d write wt %d %q %d=%x ttl %d", step, now, wt, c.Key, c.Column, c.Value, c.TTL)
				}
			}
			// The engine reconciles cells of one batch as it would across
			// batches; so does the model, cell by cell.
			m.write(now, wt, e.blockPurgeStep, b.Cells)
		case op < 13:
			wt := base + int64(rng.IntN(40))
			row := rows[rng.IntN(len(rows))]
			d := &engine.Deletes{WriteTime: wt}
			lo, hi := uint32(0), uint32(math.MaxUint32)
			if rng.IntN(2) == 0 {
				d.Rows = [][]byte{[]byte(row)}
			} else {
				lo, hi = columns[rng.IntN(len(columns))], columns[rng.IntN(len(columns))]
				d.CellRanges = []engine.CellRange{{Key: []byte(row), Lo: lo, Hi: hi}}
				if lo > hi {
					lo, hi = 1, 0 // deletes nothing, records nothing
				}
			}
			require.NoError(t, e.Delete(ctx, d))
			if testing.Verbose() {
				t.Logf("step %d now %d delete wt %d %q [%d, %d]", step, now, wt, row, lo, hi)
			}
			if lo <= hi {
				m.delete(now, wt, row, lo, hi)
			}
		case op < 15:
			if testing.Verbose() {
				t.Logf("step %d clock", step)
			}
			clock = clock.Add(time.Duration(1+rng.IntN(15)) * time.Second)
		case op < 16:
			if testing.Verbose() {
				t.Logf("step %d purge", step)
			}
			_, err := e.purge()
			require.NoError(t, err)
			// The purge commits without fsync (purge.go); one lost in a
			// crash brings back expired cells, which still win over older
			// writes until purged again, and the model does not know that.
			require.NoError(t, e.db.LogData(nil, pebble.Sync))
			m.purge(now)
		case op < 17:
			require.NoError(t, e.db.Flush())
		case op < 18:
			require.NoError(t, e.db.Compact(ctx, []byte{0}, []byte{0xff}, false))
		case op < 19:
			require.NoError(t, e.Close())
			e = openEngine()
		case op < 20:
			// A crash: the store as the disk may hold it, every synced
			// write and any part of what was not synced. Every write and
			// delete was acknowledged, so the model holds.
			if testing.Verbose() {
				t.Logf("step %d crash", step)
			}
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(seed, uint64(step)))})
			_ = e.Close()
			fs = crashed
			opts.FS = fs
			e = openEngine()
		case op < 21:
			require.NoError(t, e.drainHead())
		case op < 22:
			require.NoError(t, e.rotateHead())
		default:
			base += 50 // later writes all newer: the blind path
		}
		now = clock.Unix()
		// Reads drain the head, so they are left out of most steps, for
		// the head to gather cells across writes, deletes and crashes.
		if rng.IntN(4) != 0 {
			continue
		}
		for _, row := range rows {
			lo, hi := uint32(0), uint32(math.MaxUint32)
			if rng.IntN(2) == 0 {
				lo, hi = columns[rng.IntN(len(columns))], columns[rng.IntN(len(columns))]
			}
			want := m.visible(now, row, lo, hi)
			var got []string
			require.NoError(t, e.Cells(ctx, []byte(row), lo, hi, func(col uint32, v []byte) error {
				got = append(got, fmt.Sprintf("%d=%x", col, v))
				return nil
			}))
			require.Equal(t, want, got, "step %d, row %q [%d, %d)", step, row, lo, hi)
			first, ok, err := e.FirstCell(ctx, []byte(row), lo, hi)
			require.NoError(t, err)
			require.Equal(t, len(want) > 0, ok)
			if ok {
				require.Truef(t, strings.HasPrefix(want[0], fmt.Sprintf("%d=", first)), "FirstCell %d, want %s", first, want[0])
			}
		}
		// Several rows through one iterator, in any order, a row twice,
		// and empty ranges between: each as Cells reads it alone.
		require.NoError(t, e.CellsOfRows(ctx, func(cells func([]byte, uint32, uint32, func(uint32, []byte) error) error) error {
			for range 1 + rng.IntN(6) {
				row := rows[rng.IntN(len(rows))]
				lo, hi := columns[rng.IntN(len(columns))], columns[rng.IntN(len(columns))]
				if rng.IntN(3) == 0 {
					lo, hi = 0, math.MaxUint32
				}
				want := m.visible(now, row, lo, hi)
				var got []string
				require.NoError(t, cells([]byte(row), lo, hi, func(col uint32, v []byte) error {
					got = append(got, fmt.Sprintf("%d=%x", col, v))
					return nil
				}))
				require.Equal(t, want, got, "step %d, CellsOfRows row %q [%d, %d)", step, row, lo, hi)
			}
			return nil
		}))
	}
}

// TestCorruptBlock: a block whose bytes changed on disk is reported with
// its row key, by reads, and never returned as cells.
func TestCorruptBlock(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e := open(t, "db", opts)
	ctx := t.Context()
	var cells []engine.Cell
	for i := range 100 {
		cells = append(cells, engine.Cell{Key: []byte("row\x00key"), Column: uint32(i) * 60_000, Value: binary.BigEndian.AppendUint64(nil, uint64(i))})
	}
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: time.Now().UnixMilli(), Cells: cells}))
	key := appendBlockKey(nil, []byte("row\x00key"), 0)
	v, closer, err := e.db.Get(key)
	require.NoError(t, err)
	bad := bytes.Clone(v)
	require.NoError(t, closer.Close())
	bad[len(bad)/2] ^= 0x10
	require.NoError(t, e.db.Set(key, bad, nil))

	n := 0
	err = e.Cells(ctx, []byte("row\x00key"), 0, math.MaxUint32, func(uint32, []byte) error {
		n++
		return nil
	})
	require.ErrorIs(t, err, cellblock.ErrCorrupt)
	require.ErrorContains(t, err, `data_points block of row key "row\x00key", window 0: corrupt cell block: checksum mismatch`)
	require.Zero(t, n)
	_, _, err = e.FirstCell(ctx, []byte("row\x00key"), 0, math.MaxUint32)
	require.ErrorIs(t, err, cellblock.ErrCorrupt)

	// A merge over the corrupt block fails the same way instead of
	// dropping it.
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: time.Now().UnixMilli(), Cells: cells[:1]}))
	err = e.Cells(ctx, []byte("row\x00key"), 0, math.MaxUint32, func(uint32, []byte) error { return nil })
	require.ErrorIs(t, err, cellblock.ErrCorrupt)
	require.ErrorContains(t, err, `row key "row\x00key"`)
}
