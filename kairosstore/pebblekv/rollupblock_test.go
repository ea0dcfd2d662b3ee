package pebblekv

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// rollupRowKey is the row key of a rollup series of metric, as the rollup
// job writes it (package rollup's name and tags).
func rollupRowKey(metric, resolution string, rowTime int64) string {
	return string(codec.AppendRowKey(nil, codec.RowKey{Metric: metric + "_rollup", RowTime: rowTime, DataType: codec.TypeDouble, Tags: []codec.Tag{
		{Name: "instance", Value: "i:0"}, {Name: "rollup_aggregate", Value: "max"}, {Name: "rollup_resolution", Value: resolution}, {Name: "saved_from", Value: metric},
	}}))
}

// TestRollupRowOneBlock writes a rollup row of three weeks at 1h as the
// job does (a few buckets a write, through the head, and a backfill's
// whole row at once) beside a raw row, and checks that the rollup row is
// one Pebble key and the raw row a key per 2^24 ms, with every guarantee
// of the cells kept: the older write of a bucket loses, a deleted range
// is gone and stays gone for an older write, an expired TTL hides its
// cell, and a read from the middle of the row starts there.
func TestRollupRowOneBlock(t *testing.T) {
	opts := DefaultOptions()
	var clock int64 = 1_800_000_000
	opts.clock = func() time.Time { return time.Unix(clock, 0) }
	e := open(t, t.TempDir(), opts)
	ctx := t.Context()
	rollupRow := []byte(rollupRowKey("m", "1h", 0))
	rawRow := codec.AppendRowKey(nil, codec.RowKey{Metric: "m", RowTime: 0, DataType: codec.TypeDouble})
	const hour = 3_600_000
	value := func(i int) []byte {
		return binary.BigEndian.AppendUint64(nil, math.Float64bits([]float64{math.NaN(), math.Inf(1), 1e300, float64(i)}[i%4]))
	}
	wt := int64(1_000_000)
	for _, row := range [][]byte{rollupRow, rawRow} {
		// Half the row in writes of three buckets, the rest at once.
		for i := 0; i < 252; i += 3 {
			b := &engine.Batch{WriteTime: wt}
			for j := i; j < i+3; j++ {
				b.Cells = append(b.Cells, engine.Cell{Key: row, Column: uint32(j * hour), Value: value(j)})
			}
			require.NoError(t, e.Write(ctx, b))
		}
		b := &engine.Batch{WriteTime: wt}
		for j := 252; j < 504; j++ {
			c := engine.Cell{Key: row, Column: uint32(j * hour), Value: value(j)}
			if j == 503 {
				c.TTL = 10
			}
			b.Cells = append(b.Cells, c)
		}
		require.NoError(t, e.Write(ctx, b))
		// An older write of every bucket loses.
		old := &engine.Batch{WriteTime: wt - 1}
		for j := range 504 {
			old.Cells = append(old.Cells, engine.Cell{Key: row, Column: uint32(j * hour), Value: []byte("older, loses")})
		}
		require.NoError(t, e.Write(ctx, old))
	}
	require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: wt + 1, CellRanges: []engine.CellRange{
		{Key: rollupRow, Lo: 100 * hour, Hi: 199 * hour}, {Key: rawRow, Lo: 100 * hour, Hi: 199 * hour},
	}}))
	require.NoError(t, e.Write(ctx, &engine.Batch{WriteTime: wt + 1, Cells: []engine.Cell{{Key: rollupRow, Column: 150 * hour, Value: []byte("shadowed")}}}))
	_, err := e.Compact(ctx)
	require.NoError(t, err)

	keys := func(row []byte) int { return countKeys(t, e, tableBlock, string(row)) }
	require.Equal(t, 1, keys(rollupRow), "a rollup row is one block")
	windows := map[int]bool{}
	for j := range 504 {
		if j < 100 || j > 199 {
			windows[j*hour>>24] = true
		}
	}
	require.Equal(t, len(windows), keys(rawRow), "a raw row is a block per 2^24 ms")

	clock += 20 // past the TTL of the last bucket
	for _, row := range [][]byte{rollupRow, rawRow} {
		var want, got []string
		for j := 50; j < 503; j++ {
			if j < 100 || j > 199 {
				want = append(want, fmt.Sprintf("%d=%x", j*hour, value(j)))
			}
		}
		require.NoError(t, e.Cells(ctx, row, 50*hour, math.MaxUint32, func(col uint32, v []byte) error {
			got = append(got, fmt.Sprintf("%d=%x", col, v))
			return nil
		}))
		require.Equal(t, want, got, "row %q", row)
	}
}
