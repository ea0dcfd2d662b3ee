package pebblekv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

func f64(v float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }

// cellsOf reads every live cell of rowKey as "column=value".
func cellsOf(t *testing.T, e *Engine, rowKey string) []string {
	t.Helper()
	var got []string
	require.NoError(t, e.Cells(t.Context(), []byte(rowKey), 0, math.MaxUint32, func(col uint32, v []byte) error {
		got = append(got, fmt.Sprintf("%d=%x", col, v))
		return nil
	}))
	return got
}

// rawCells reads every live cell of rowKey through ScanRaw, the last
// column included, as "column=value/ttl".
func rawCells(t *testing.T, e *Engine, rowKey string) []string {
	t.Helper()
	var got []string
	require.NoError(t, e.ScanRaw(t.Context(), engine.DataPoints, nil, func(r *engine.Row, _ []byte) error {
		if string(r.Cell.Key) == rowKey {
			got = append(got, fmt.Sprintf("%d=%x/%d", r.Cell.Column, r.Cell.Value, r.TTL))
		}
		return nil
	}))
	return got
}

// TestHeadDeleteSurvivesReplay: cells written to the head, then deleted,
// then a crash before any rotation removed the log that holds them. The
// replay must drop them as the write path drops a write a tombstone
// shadows, not put them back.
func TestHeadDeleteSurvivesReplay(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := DefaultOptions()
	opts.FS = fs
	e, err := Open("db", opts, nil)
	require.NoError(t, err)
	ctx := t.Context()
	wt := time.Now().UnixMilli()
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: wt, Cells: []engine.Cell{
		{Key: []byte("gone"), Column: 1, Value: f64(1)},
		{Key: []byte("gone"), Column: 2, Value: f64(2)},
		{Key: []byte("kept"), Column: 1, Value: f64(3)},
	}}))
	require.Positive(t, e.headRows.Load(), "the cells are in the head")
	require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: wt + 1, Rows: [][]byte{[]byte("gone")}}))
	require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: wt + 1, CellRanges: []engine.CellRange{{Key: []byte("kept"), Lo: 5, Hi: 9}}}))
	segs, err := walSegments(fs, "db")
	require.NoError(t, err)
	require.Len(t, segs, 1)
	st, err := fs.Stat(fs.PathJoin("db", walName(segs[0])))
	require.NoError(t, err)
	require.Positive(t, st.Size(), "the log still holds the deleted cells")

	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	_ = e.Close()
	opts.FS = crashed
	e = open(t, "db", opts)
	require.Empty(t, cellsOf(t, e, "gone"))
	require.Equal(t, []string{"1=" + fmt.Sprintf("%x", f64(3))}, cellsOf(t, e, "kept"))
}

// TestHeadTornRecord: a log whose last record is torn, or whose bytes
// changed, is replayed up to that record, with a warning naming the
// segment and offset; the records before it are all there.
func TestHeadTornRecord(t *testing.T) {
	for _, damage := range []string{"truncated", "flipped"} {
		t.Run(damage, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			opts := DefaultOptions()
			opts.FS = fs
			e, err := Open("db", opts, nil)
			require.NoError(t, err)
			ctx := t.Context()
			wt := time.Now().UnixMilli()
			for i := range 3 {
				require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: wt + int64(i), Cells: []engine.Cell{
					{Key: []byte("r"), Column: uint32(i), Value: f64(float64(i))},
				}}))
			}
			crashed := fs.CrashClone(vfs.CrashCloneCfg{})
			_ = e.Close()

			segs, err := walSegments(crashed, "db")
			require.NoError(t, err)
			name := crashed.PathJoin("db", walName(segs[len(segs)-1]))
			f, err := crashed.Open(name)
			require.NoError(t, err)
			log, err := io.ReadAll(f)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			// Three records of equal length.
			rec := len(log) / 3
			require.Equal(t, 3*rec, len(log))
			switch damage {
			case "truncated":
				log = log[:2*rec+rec/2]
			case "flipped":
				log[2*rec+12] ^= 0x40
			}
			w, err := crashed.Create(name, vfs.WriteCategoryUnspecified)
			require.NoError(t, err)
			_, err = w.Write(log)
			require.NoError(t, err)
			require.NoError(t, w.Sync())
			require.NoError(t, w.Close())

			var logged bytes.Buffer
			opts.FS = crashed
			e, err = Open("db", opts, slog.New(slog.NewTextHandler(&logged, nil)))
			require.NoError(t, err)
			t.Cleanup(func() { _ = e.Close() })
			require.Equal(t, []string{"0=" + fmt.Sprintf("%x", f64(0)), "1=" + fmt.Sprintf("%x", f64(1))}, cellsOf(t, e, "r"))
			require.Contains(t, logged.String(), "torn or corrupt record")
			require.Contains(t, logged.String(), fmt.Sprintf("offset=%d", 2*rec))
		})
	}
}

// TestHeadExtremes: the cells at the ends of the column range, NaN, ±Inf
// and 1e300, TTLs of 1 s and 20 years, through the head, a crash and the
// replay, and a TTL of 1 s expiring after it.
func TestHeadExtremes(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := DefaultOptions()
	opts.FS = fs
	clock := time.Unix(1_800_000_000, 0)
	opts.clock = func() time.Time { return clock }
	e, err := Open("db", opts, nil)
	require.NoError(t, err)
	ctx := t.Context()
	nan := f64(math.NaN())
	cells := []engine.Cell{
		{Key: []byte("x"), Column: 0, Value: nan},
		{Key: []byte("x"), Column: 1, Value: f64(math.Inf(1)), TTL: 1},
		{Key: []byte("x"), Column: math.MaxUint32 - 1, Value: f64(math.Inf(-1)), TTL: maxTTL},
		{Key: []byte("x"), Column: math.MaxUint32, Value: f64(1e300)},
		// A long value goes beside the cell, not in it.
		{Key: []byte("y"), Column: 7, Value: bytes.Repeat([]byte{0xab}, 300)},
		{Key: []byte("y"), Column: 8, Value: nil},
	}
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: clock.UnixMilli(), Cells: cells}))
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	_ = e.Close()
	opts.FS = crashed
	e = open(t, "db", opts)
	want := []string{"0=" + fmt.Sprintf("%x", nan) + "/0", "1=7ff0000000000000/1", fmt.Sprintf("4294967294=fff0000000000000/%d", maxTTL), "4294967295=" + fmt.Sprintf("%x", f64(1e300)) + "/0"}
	require.Equal(t, want, rawCells(t, e, "x"))
	require.Equal(t, []string{"7=" + strings.Repeat("ab", 300) + "/0", "8=/0"}, rawCells(t, e, "y"))
	clock = clock.Add(time.Second)
	want[2] = fmt.Sprintf("4294967294=fff0000000000000/%d", maxTTL-1)
	require.Equal(t, []string{want[0], want[2], want[3]}, rawCells(t, e, "x"), "the TTL of 1 s has passed")
}

// TestHeadMemoryBound: 200,000 rows written one cell a request for five
// rounds keep the head within its bound after every write, and a request
// of a million cells, each its own row, larger than the bound, is stored
// whole.
func TestHeadMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 2 M cells")
	}
	opts := DefaultOptions()
	opts.HeadBytes = 16 << 20
	e := open(t, t.TempDir(), opts)
	ctx := t.Context()
	const rows = 200_000
	keys := make([][]byte, rows)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "load_metric_%d\x00\x00\x00\x01\x3c\x69\xda\x9c\x00\x00\x0dkairos_doublehost=server%d:job=node:", i%100, i)
	}
	wt := time.Now().UnixMilli()
	batch := &engine.Batch{Cells: make([]engine.Cell, 2000)}
	var peak uint64
	var ms runtime.MemStats
	for round := range 5 {
		for q := 0; q < rows; q += len(batch.Cells) {
			wt++
			batch.WriteTime = wt
			for j := range batch.Cells {
				batch.Cells[j] = engine.Cell{Key: keys[q+j], Column: uint32(round) * 15000, Value: f64(float64(q + j))}
			}
			require.NoError(t, e.Write(ctx, batch))
			e.mu.Lock()
			hb := e.head.bytes
			e.mu.Unlock()
			require.LessOrEqual(t, hb, opts.HeadBytes)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	t.Logf("heap in use after each round, at most %d MiB", peak>>20)
	require.Equal(t, []string{"0=" + fmt.Sprintf("%x", f64(7)), "15000=" + fmt.Sprintf("%x", f64(7)), "30000=" + fmt.Sprintf("%x", f64(7)), "45000=" + fmt.Sprintf("%x", f64(7)), "60000=" + fmt.Sprintf("%x", f64(7))}, cellsOf(t, e, string(keys[7])))

	big := &engine.Batch{WriteTime: wt + 1, Cells: make([]engine.Cell, 1_000_000)}
	for i := range big.Cells {
		big.Cells[i] = engine.Cell{Key: fmt.Appendf(nil, "big%07d", i), Column: 3, Value: f64(float64(i))}
	}
	require.NoError(t, e.Write(ctx, big))
	e.mu.Lock()
	hb := e.head.bytes
	e.mu.Unlock()
	require.LessOrEqual(t, hb, opts.HeadBytes, "a write past the bound rotates the head")
	require.Equal(t, []string{"3=" + fmt.Sprintf("%x", f64(999_999))}, cellsOf(t, e, "big0999999"))
}

// The kill -9 test: a child process (this test binary, re-run with
// headChildEnv set to the store's directory) writes and deletes from
// several goroutines, with drains, rotations, purges and Pebble flushes
// between, and prints each write and delete once it is acknowledged. The
// parent kills it at a random moment, opens the store and checks that
// every acknowledged cell is there and no acknowledged delete undone, for
// several rounds on the same store. Every eleventh write is large enough
// to go to Pebble directly. In periodic mode the period is longer than the
// test, so what survives is what the writes handed to the OS themselves.
const (
	headChildEnv     = "KAIROS_PEBBLEKV_HEAD_CHILD"
	headChildSyncEnv = "KAIROS_PEBBLEKV_HEAD_SYNC_PERIOD"
)

func TestHeadKill9(t *testing.T) {
	if dir := os.Getenv(headChildEnv); dir != "" {
		headChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("runs child processes for seconds")
	}
	t.Run("batch", func(t *testing.T) { headKill9(t, 0) })
	t.Run("periodic", func(t *testing.T) { headKill9(t, maxSyncPeriod) })
}

func headKill9(t *testing.T, syncPeriod time.Duration) {
	dir := t.TempDir()
	acked := map[int]bool{}    // batches acknowledged
	deleted := map[int]bool{}  // deletes acknowledged
	deleting := map[int]bool{} // deletes started
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	for round := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHeadKill9$")
		cmd.Env = append(os.Environ(), headChildEnv+"="+dir, fmt.Sprintf("KAIROS_PEBBLEKV_HEAD_SEED=%d", round*1_000_000),
			fmt.Sprintf("%s=%d", headChildSyncEnv, syncPeriod))
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		var mu sync.Mutex
		done := make(chan struct{})
		lines := 0
		// Half the rounds kill right after a large write is acknowledged
		// past the moment: a write left in a buffer of the process, not
		// yet in its log file, would be lost then (the other writes' syncs
		// and rotations soon write out what a write left buffered).
		killAt := time.Now().Add(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
		onLarge := round%2 == 0
		var kill sync.Once
		killIt := func() { kill.Do(func() { _ = cmd.Process.Signal(syscall.SIGKILL) }) }
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 2 {
					continue
				}
				n, err := strconv.Atoi(f[1])
				if err != nil {
					continue
				}
				mu.Lock()
				switch f[0] {
				case "W":
					acked[n] = true
					if onLarge && n%11 == 0 && time.Now().After(killAt) {
						killIt()
					}
				case "d":
					deleting[n] = true
				case "D":
					deleted[n] = true
				}
				lines++
				mu.Unlock()
			}
		}()
		time.Sleep(time.Until(killAt))
		if onLarge {
			time.Sleep(time.Second)
		}
		killIt()
		<-done
		_ = cmd.Wait()
		t.Logf("round %d: killed after %d acknowledgements", round, lines)

		e, err := Open(dir, DefaultOptions(), nil)
		require.NoError(t, err)
		ctx := context.Background()
		// One read per row: the child's rows are few, its writes many.
		stored := map[uint32][]byte{}
		for r := range 97 {
			require.NoError(t, e.Cells(ctx, headChildRow(r), 0, math.MaxUint32, func(c uint32, v []byte) error {
				stored[c] = bytes.Clone(v)
				return nil
			}))
		}
		missing, resurrected := 0, 0
		for n := range acked {
			want := !deleting[n]
			for k := range headChildCells(n) {
				v, found := stored[headChildColumn(n, k)]
				if found {
					require.Equal(t, f64(float64(n)), v)
				}
				if want && !found {
					missing++
				}
				if deleted[n] && found {
					resurrected++
				}
			}
		}
		require.NoError(t, e.Close())
		require.Zero(t, missing, "acknowledged cells lost in round %d", round)
		require.Zero(t, resurrected, "acknowledged deletes undone in round %d", round)
		require.NotEmpty(t, acked)
	}
}

func headChildRow(n int) []byte { return fmt.Appendf(nil, "row%03d", n%97) }

func headChildCells(n int) int {
	if n%11 == 0 {
		return directCells + 16
	}
	return 1 + n%7
}

func headChildColumn(n, k int) uint32 { return uint32(n)*128 + uint32(k) }

// headChild is the child of TestHeadKill9; it runs until killed.
func headChild(dir string) {
	opts := DefaultOptions()
	opts.HeadBytes = 256 << 10 // rotations every few hundred writes
	period, _ := strconv.ParseInt(os.Getenv(headChildSyncEnv), 10, 64)
	opts.SyncPeriod = time.Duration(period)
	e, err := Open(dir, opts, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	seed, _ := strconv.Atoi(os.Getenv("KAIROS_PEBBLEKV_HEAD_SEED"))
	var outMu sync.Mutex
	say := func(op string, n int) {
		outMu.Lock()
		fmt.Printf("%s %d\n", op, n)
		outMu.Unlock()
	}
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	for g := range 4 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(seed+g), 1))
			for i := 0; ; i++ {
				n := seed + i*4 + g
				b := &engine.Batch{WriteTime: time.Now().UnixMilli()}
				for k := range headChildCells(n) {
					b.Cells = append(b.Cells, engine.Cell{Key: headChildRow(n), Column: headChildColumn(n, k), Value: f64(float64(n))})
				}
				if err := e.Write(ctx, b); err != nil {
					fail(err)
				}
				say("W", n)
				switch rng.IntN(40) {
				case 0:
					// A delete of a batch of this goroutine's, acknowledged.
					m := n - 4*rng.IntN(min(i+1, 50))
					say("d", m)
					lo := headChildColumn(m, 0)
					if err := e.Delete(ctx, &engine.Deletes{WriteTime: time.Now().UnixMilli() + 1, CellRanges: []engine.CellRange{{Key: headChildRow(m), Lo: lo, Hi: lo + 127}}}); err != nil {
						fail(err)
					}
					say("D", m)
				case 1:
					if err := e.drainHead(); err != nil {
						fail(err)
					}
				case 2:
					if err := e.rotateHead(); err != nil {
						fail(err)
					}
				case 3:
					if _, err := e.purge(); err != nil {
						fail(err)
					}
				case 4:
					if err := e.db.Flush(); err != nil {
						fail(err)
					}
				}
			}
		}()
	}
	select {}
}

// TestHeadHashCollision: rows whose keys share a hash are kept apart, also
// when one transaction adds several of them (touch finds none, then the
// adds make them) or adds to one that is not the first of its hash, and
// draining one of them leaves the other.
func TestHeadHashCollision(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e := open(t, "db", opts)
	e.mu.Lock()
	col := uint32(0) // 1, 2, ... in the order of the adds
	add := func(blocks ...pendingBlock) []*headRow {
		t.Helper()
		e.head.touch(blocks)
		var rows []*headRow
		for i := range blocks {
			col++
			r, _ := e.head.add(&blocks[i], []cellblock.Cell{{Column: col, WriteTime: 1, Value: f64(float64(col))}})
			rows = append(rows, r)
		}
		return rows
	}
	block := func(key string) pendingBlock { return pendingBlock{hash: 42, row: []byte(key)} }
	rows := add(block("one"), block("two"), block("three"), block("two"))
	two, three := rows[1], rows[2]
	require.Same(t, two, rows[3])
	require.Equal(t, 3, e.head.n)
	again := add(block("one"))
	require.Same(t, rows[0], again[0], "not the first row of its hash")
	require.Equal(t, 3, e.head.n)
	require.NoError(t, e.drainRows([]*headRow{two, two}))
	require.Equal(t, 2, e.head.n)
	require.NoError(t, e.drainRows([]*headRow{three}))
	require.Equal(t, 1, e.head.n)
	e.headRows.Store(1)
	e.mu.Unlock()
	// A read's drain finds its row along the chain and leaves the others.
	moved, err := e.drainRowHash(42, []byte("tw"))
	require.NoError(t, err)
	require.False(t, moved)
	moved, err = e.drainRowHash(42, []byte("one"))
	require.NoError(t, err)
	require.True(t, moved)
	require.Equal(t, []string{"2=" + fmt.Sprintf("%x", f64(2)), "4=" + fmt.Sprintf("%x", f64(4))}, cellsOf(t, e, "two"))
	require.Equal(t, []string{"3=" + fmt.Sprintf("%x", f64(3))}, cellsOf(t, e, "three"))
	require.Equal(t, []string{"1=" + fmt.Sprintf("%x", f64(1)), "5=" + fmt.Sprintf("%x", f64(5))}, cellsOf(t, e, "one"))
	e.mu.Lock()
	defer e.mu.Unlock()
	require.Zero(t, e.head.n)
	require.Zero(t, e.head.bytes)
}

// TestHeadLogFailures: a write whose log record cannot be written fails,
// is not in the head, and leaves the log usable (a new segment); an fsync
// that fails fails that write and every later one, since what it covered
// may be lost. What was acknowledged survives a crash either way.
func TestHeadLogFailures(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var failWrite, failSync atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.Contains(op.Path, walPrefix) {
			return nil
		}
		if op.Kind == errorfs.OpFileWrite && failWrite.Load() || op.Kind == errorfs.OpFileSyncData && failSync.Load() {
			return errors.New("injected")
		}
		return nil
	}))
	opts := DefaultOptions()
	opts.FS = fs
	e, err := Open("db", opts, nil)
	require.NoError(t, err)
	ctx := t.Context()
	wt := time.Now().UnixMilli()
	write := func(col uint32) error {
		wt++
		return e.Write(ctx, &engine.Batch{WriteTime: wt, Cells: []engine.Cell{{Key: []byte("r"), Column: col, Value: f64(float64(col))}}})
	}
	require.NoError(t, write(1))
	failWrite.Store(true)
	require.ErrorContains(t, write(2), "cannot write the head log")
	failWrite.Store(false)
	require.NoError(t, write(3))
	segs, err := walSegments(mem, "db")
	require.NoError(t, err)
	require.Len(t, segs, 2, "the write after the failed one starts a segment")
	require.Equal(t, []string{"1=" + fmt.Sprintf("%x", f64(1)), "3=" + fmt.Sprintf("%x", f64(3))}, cellsOf(t, e, "r"))
	require.NoError(t, write(4))

	failSync.Store(true)
	require.ErrorContains(t, write(5), "restart the adapter")
	failSync.Store(false)
	require.ErrorContains(t, write(6), "restart the adapter")

	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = e.Close()
	opts.FS = crashed
	e = open(t, "db", opts)
	got := cellsOf(t, e, "r")
	require.Subset(t, got, []string{"1=" + fmt.Sprintf("%x", f64(1)), "3=" + fmt.Sprintf("%x", f64(3)), "4=" + fmt.Sprintf("%x", f64(4))})
	require.NotContains(t, got, "2="+fmt.Sprintf("%x", f64(2)))
}

// TestHeadMaxAge: the background loop rotates a head older than
// HeadMaxAge: its cells are in Pebble and the log is empty.
func TestHeadMaxAge(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	opts.HeadMaxAge = 50 * time.Millisecond
	e := open(t, "db", opts)
	require.NoError(t, e.Write(t.Context(), &engine.Batch{WriteTime: time.Now().UnixMilli(), Cells: []engine.Cell{{Key: []byte("r"), Column: 1, Value: f64(1)}}}))
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.head.n == 0 && e.wal.size == 0
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, countKeys(t, e, tableBlock, "r"))
}

// TestReadsSeeTheHead: each method that reads data_points sees a cell that
// is still in the head, not yet in Pebble; a read method added without
// its drain fails here (CellDoubles once did).
func TestReadsSeeTheHead(t *testing.T) {
	opts := DefaultOptions()
	opts.FS = vfs.NewMem()
	e := open(t, "db", opts)
	ctx := t.Context()
	val := binary.BigEndian.AppendUint64(nil, math.Float64bits(1.5))
	write := func(col uint32) {
		t.Helper()
		b := &engine.Batch{WriteTime: time.Now().UnixMilli(), Cells: []engine.Cell{{Key: []byte("r"), Column: col, Value: val}}}
		require.NoError(t, e.Write(ctx, b))
		require.NotZero(t, e.headRows.Load(), "a one-cell write goes to the head")
	}
	readers := rowReaders(t, e)
	readers["ScanRaw"] = func(string, uint32) (got []uint32) {
		require.NoError(t, e.ScanRaw(ctx, engine.DataPoints, nil, func(r *engine.Row, _ []byte) error {
			got = append(got, r.Cell.Column)
			return nil
		}))
		return got
	}
	col := uint32(1000)
	// From the new column: the cells written for the methods read before
	// come first, which FirstCell would answer.
	for name, read := range readers {
		col++
		write(col)
		require.Contains(t, read("r", col), col, "%s does not see the head's cell", name)
	}
}

// rotateHead rotates under mu, as a test's rotation at a chosen moment.
func (e *Engine) rotateHead() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return nil
	}
	return e.rotate()
}

// TestDrainParts: a rotation of a head with more rows than one part holds
// drains them in several batches at once, and every row's cells reach
// Pebble, as they read before and after a reopen (the rotation removed the
// log that held them).
func TestDrainParts(t *testing.T) {
	dir := t.TempDir()
	opts := DefaultOptions()
	opts.drainParts = 3
	e := open(t, dir, opts)
	rows := 3*drainPartRows + 5
	wt := time.Now().UnixMilli()
	for col := range uint32(2) {
		b := &engine.Batch{WriteTime: wt + int64(col), Cells: make([]engine.Cell, rows)}
		for i := range b.Cells {
			b.Cells[i] = engine.Cell{Key: fmt.Appendf(nil, "row%06d", i), Column: col, Value: f64(float64(i) + float64(col)/2)}
		}
		require.NoError(t, e.Write(t.Context(), b))
	}
	e.mu.Lock()
	require.Equal(t, rows, e.head.n)
	drains := e.head.drains.Load()
	err := e.rotate()
	n := e.head.n
	e.mu.Unlock()
	require.NoError(t, err)
	require.Zero(t, n)
	require.Greater(t, e.head.drains.Load(), drains)
	check := func(e *Engine) {
		for _, i := range []int{0, 1, drainPartRows - 1, drainPartRows, 2 * drainPartRows, rows / 2, rows - 1} {
			want := []string{fmt.Sprintf("0=%x", f64(float64(i))), fmt.Sprintf("1=%x", f64(float64(i)+0.5))}
			require.Equal(t, want, cellsOf(t, e, fmt.Sprintf("row%06d", i)), "row %d", i)
		}
		var got int
		require.NoError(t, e.ScanRaw(t.Context(), engine.DataPoints, nil, func(*engine.Row, []byte) error {
			got++
			return nil
		}))
		require.Equal(t, 2*rows, got)
	}
	check(e)
	require.NoError(t, e.Close())
	check(open(t, dir, opts))
}
