package pebblekv

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"math/bits"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cellblock"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// data_points cells are kept in blocks (package cellblock): one Pebble key
// per row key and window of columns (windowOf), whose value holds every
// cell of that window with its write time and expiry. A raw row's window is
// 2^windowShift columns: with the default MILLISECONDS columns 2^24 ms (4.7
// hours), 280 samples at one a minute, 1,118 at 15 s. A rollup row holds
// one cell per bucket, so in windows of 2^24 ms its blocks were a cell or
// a few (a 6h bucket's one, a 1h bucket's 4.66), and Pebble's cost per key
// was most of a rollup read. Its window is the power of two of columns
// that holds rollupBlockCells buckets of its resolution or fewer, up to the
// whole row: at 1h and 6h a three-week row is one block (504 and 84
// cells), at 5m a block of 2^28 ms holds 894, at 1m one of 2^25 ms 559, so
// a merge or a read materialises no more than a raw row's block at 15 s.
// Keys are row-major (the window after the row key),
// so that a read of a row is one iterator over adjacent keys; row keys begin
// with the metric and row time, so new rows still sort after old ones of the
// same metric.
//
// Writes stay blind: each write merges (pebble.Batch.Merge) a block of its
// own cells into the key, and the merge operator (blockMerger) keeps per
// column the cell Cassandra's reconciliation keeps (entry.supersedes), a
// rule that is associative and commutative, so the result does not depend on
// how flushes and compactions group the operands. Deletes and the purge,
// which run under Engine.mu, read the merged block and Set what remains,
// which replaces every operand below.
const (
	windowShift      = 24
	rollupBlockCells = 1024
)

// windowOf is the window of a cell of rowKey: every caller that makes or
// finds a block key goes through it, so a row's blocks never overlap.
func windowOf(rowKey []byte, column uint32) uint32 {
	return windowAt(column, windowShiftOf(rowKey))
}

// windowAt is windowOf for a row whose windowShiftOf is shift.
func windowAt(column uint32, shift uint) uint32 { return uint32(uint64(column) >> shift) }

// windowShiftOf tells a rollup row from its key alone, as the engine gets
// no labels: a metric name ending in rollup.NameSuffix, and a tag
// rollup.ResolutionTag whose value is a resolution rollup.ParseResolution
// takes. Its shift is then that of the largest power of two of
// milliseconds that holds rollupBlockCells buckets or fewer, 32 (the whole
// row) at most; any other row's is windowShift. A raw row that matches
// only gets larger blocks, which hold the same cells. With SECONDS columns
// a row is 1.8 M columns, so its rollup rows are one block each, as its raw
// rows already are at 2^24.
func windowShiftOf(rowKey []byte) uint {
	nul := bytes.IndexByte(rowKey, 0)
	if nul < 0 || !bytes.HasSuffix(rowKey[:nul], rollupSuffix) || len(rowKey) < nul+9 {
		return windowShift
	}
	tags := rowKey[nul+9:]
	if len(tags) >= 2 && tags[0] == 0 { // the type block (codec.AppendRowKey)
		tags = tags[min(2+int(tags[1]), len(tags)):]
	}
	for i := 0; i < len(tags); {
		j := bytes.Index(tags[i:], rollupResolutionTag)
		if j < 0 {
			break
		}
		at := i + j
		i = at + 1
		if at > 0 && tags[at-1] != ':' {
			continue // inside a name or value
		}
		v := tags[at+len(rollupResolutionTag):]
		end := bytes.IndexByte(v, ':')
		if end < 0 {
			continue
		}
		r, err := rollup.ParseResolution(string(v[:end]))
		if err != nil {
			continue
		}
		return min(uint(bits.Len64(uint64(r.Millis())*rollupBlockCells))-1, 32)
	}
	return windowShift
}

var (
	rollupSuffix        = []byte(rollup.NameSuffix)
	rollupResolutionTag = []byte(rollup.ResolutionTag + "=")
)

// mergerName is stored by Pebble in the OPTIONS file; a store opened with
// another merger is refused, which is how Open recognises a store of layout
// kairosdb-1 (Pebble's default merger) before opening it.
const mergerName = "kairos.cellblock.1"

// cellWins reports whether a is the cell Cassandra keeps of a and b.
func cellWins(a, b *cellblock.Cell) bool {
	return entry{writeTime: a.WriteTime, expiry: a.Expiry, value: a.Value}.
		supersedes(entry{writeTime: b.WriteTime, expiry: b.Expiry, value: b.Value})
}

// sortCells orders cells by column, the winner of each column first, and
// keeps only the winners.
func sortCells(cells []cellblock.Cell) []cellblock.Cell {
	// Blocks merged in order of their columns, and a scrape's samples, are
	// usually in order already, with no column twice.
	ascending := true
	for i := 1; i < len(cells) && ascending; i++ {
		ascending = cells[i-1].Column < cells[i].Column
	}
	if ascending {
		return cells
	}
	slices.SortStableFunc(cells, func(a, b cellblock.Cell) int {
		if c := cmp.Compare(a.Column, b.Column); c != 0 {
			return c
		}
		switch aw, bw := cellWins(&a, &b), cellWins(&b, &a); {
		case aw && !bw:
			return -1
		case bw && !aw:
			return 1
		}
		return 0
	})
	return slices.CompactFunc(cells, func(a, b cellblock.Cell) bool { return a.Column == b.Column })
}

// expired reports whether a cell's TTL has passed at now (unix seconds).
func cellExpired(c *cellblock.Cell, now int64) bool { return c.Expiry != 0 && c.Expiry <= now }

// decodeBlock appends the cells of block to dst. Values alias block, except
// the 8-byte ones, which are copied into arena (which must have room, see
// fixed8Room).
func decodeBlock(dst []cellblock.Cell, arena *[]byte, block []byte) ([]cellblock.Cell, error) {
	r, err := cellblock.NewReader(block)
	if err != nil {
		return nil, err
	}
	return decodeCells(dst, arena, &r)
}

// decodeCells is decodeBlock from a reader.
func decodeCells(dst []cellblock.Cell, arena *[]byte, r *cellblock.Reader) ([]cellblock.Cell, error) {
	for r.Next() {
		c := r.Cell()
		if len(c.Value) == 8 {
			n := len(*arena)
			*arena = append(*arena, c.Value...)
			c.Value = (*arena)[n : n+8 : n+8]
		}
		dst = append(dst, c)
	}
	return dst, r.Err()
}

// blockMerger is the merge operator's state for one key: it keeps the
// operands and merges them all at once in Finish. It keeps expired cells:
// dropping them in a compaction that does not reach the oldest operand
// would let an older cell below show again; the purge drops them
// (purgeBlock), as it removes any expired entry. So a merge is a pure
// function of its operands, whatever the clock.
type blockMerger struct {
	// buf holds the key, for errors, then the operands, one after another:
	// operand i ends at ends[i]. One buffer instead of a copy of each
	// operand: a flush merges a few small operands into every key.
	buf    []byte
	keyLen int
	ends   []int
	endsA  [4]int
}

var merger = &pebble.Merger{
	Name: mergerName,
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		m := &blockMerger{keyLen: len(key)}
		m.buf = append(make([]byte, 0, len(key)+4*len(value)), key...)
		m.ends = m.endsA[:0]
		m.add(value)
		return m, nil
	},
}

// add keeps a copy of value: Pebble's operands are only valid during the
// call.
func (m *blockMerger) add(value []byte) {
	m.buf = append(m.buf, value...)
	m.ends = append(m.ends, len(m.buf))
}

func (m *blockMerger) MergeNewer(value []byte) error {
	m.add(value)
	return nil
}

func (m *blockMerger) MergeOlder(value []byte) error { return m.MergeNewer(value) }

func (m *blockMerger) Finish(bool) ([]byte, io.Closer, error) {
	ops := make([][]byte, len(m.ends))
	start := m.keyLen
	for i, end := range m.ends {
		ops[i] = m.buf[start:end:end]
		start = end
	}
	if len(ops) == 1 {
		return ops[0], nil, nil
	}
	cells, err := mergeBlocks(ops)
	if err != nil {
		// The error stops the read or compaction; the row is named so an
		// operator can find it.
		return nil, nil, fmt.Errorf("pebblekv: data_points block %s: %w", describeBlockKey(m.buf[:m.keyLen]), err)
	}
	// The merged block is rarely larger than its operands together.
	return cellblock.Append(make([]byte, 0, len(m.buf)-m.keyLen), cells), nil, nil
}

// mergeBlocks returns the winning cells of every block, by column.
func mergeBlocks(blocks [][]byte) ([]cellblock.Cell, error) {
	// Each block's checksum is checked once, by its one reader; its first
	// column is read to order the blocks.
	type source struct {
		r     cellblock.Reader
		first uint32
	}
	srcs := make([]source, len(blocks))
	n := 0
	for i, b := range blocks {
		r, err := cellblock.NewReader(b)
		if err != nil {
			return nil, err
		}
		n += r.Len()
		srcs[i].r = r
		if first := r; first.Next() {
			srcs[i].first = first.Column()
		}
	}
	// Blocks sorted by their first column usually concatenate into sorted
	// order (a new window's cells follow the old ones), which the sort then
	// only checks.
	slices.SortStableFunc(srcs, func(a, b source) int { return cmp.Compare(a.first, b.first) })
	cells := make([]cellblock.Cell, 0, n)
	arena := make([]byte, 0, 8*n)
	for i := range srcs {
		var err error
		if cells, err = decodeCells(cells, &arena, &srcs[i].r); err != nil {
			return nil, err
		}
	}
	return sortCells(cells), nil
}

// describeBlockKey names the row key and window of a block key for errors.
func describeBlockKey(key []byte) string {
	if len(key) < 1 || key[0] != tableBlock {
		return fmt.Sprintf("key %x", key)
	}
	rowKey, rest, err := cutEscaped(key[1:])
	if err != nil || len(rest) != 4 {
		return fmt.Sprintf("key %x", key)
	}
	return fmt.Sprintf("of row key %q, window %d", rowKey, uint32(rest[0])<<24|uint32(rest[1])<<16|uint32(rest[2])<<8|uint32(rest[3]))
}
