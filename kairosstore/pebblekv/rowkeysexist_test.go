package pebblekv

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// TestRowKeysExist: the one-iterator check of several row_keys entries
// answers what RowKeyExists answers for each: over hostile tags (none,
// empty values, NUL, non-ASCII, a tag set that is a prefix of another, the
// same entry twice, tags out of order), entries deleted or expired, an
// entry of the same tags in the neighbouring partition or of another data
// type, at the row times of Prometheus's minimum and maximum times.
func TestRowKeysExist(t *testing.T) {
	e := open(t, t.TempDir(), DefaultOptions())
	ctx := t.Context()
	clock := time.Unix(1_700_000_000, 0)
	e.now = func() time.Time { return clock }
	tg := func(kv ...string) []codec.Tag {
		var out []codec.Tag
		for i := 0; i < len(kv); i += 2 {
			out = append(out, codec.Tag{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	const metric = "rke"
	stored := [][]codec.Tag{nil, tg("a", ""), tg("a", "x\x00y", "b", "😀"), tg("a", "1"), tg("a", "1", "b", "2")}
	absent := [][]codec.Tag{tg("a", "x"), tg("a", "1", "b", "3"), tg("b", "2"), tg("a", "x\x00"), tg("a", "\xff\xff")}
	for i := range 300 {
		if i%2 == 0 {
			stored = append(stored, tg("n", strconv.Itoa(i)))
		} else {
			absent = append(absent, tg("n", strconv.Itoa(i)))
		}
	}
	deleted, expiring := tg("d", "1"), tg("e", "1")
	minRow, maxRow := int64(-9223309901257974)/1000*1000, int64(9223309901257974)/1000*1000
	for _, rt := range []int64{0, minRow, maxRow, math.MinInt64, math.MaxInt64} {
		wt := clock.UnixMilli()
		b := &engine.Batch{WriteTime: wt}
		for _, tags := range append(slicesOf(stored), deleted) {
			b.RowKeys = append(b.RowKeys, engine.IndexedRowKey{Metric: metric, RowTime: rt, DataType: codec.TypeDouble, Tags: tags})
		}
		b.RowKeys = append(b.RowKeys,
			engine.IndexedRowKey{Metric: metric, RowTime: rt, DataType: codec.TypeDouble, Tags: expiring, TTL: 10},
			engine.IndexedRowKey{Metric: metric, RowTime: rt, DataType: codec.TypeLong, Tags: tg("a", "x")},
		)
		if rt < math.MaxInt64 {
			b.RowKeys = append(b.RowKeys, engine.IndexedRowKey{Metric: metric, RowTime: rt + 1, DataType: codec.TypeDouble, Tags: tg("b", "2")})
		}
		require.NoError(t, e.Write(ctx, b))
		require.NoError(t, e.Delete(ctx, &engine.Deletes{WriteTime: wt + 1, RowKeys: []engine.IndexedRowKey{{Metric: metric, RowTime: rt, DataType: codec.TypeDouble, Tags: deleted}}}))

		ask := append(append(slicesOf(stored), absent...), deleted, expiring,
			tg("a", "1", "b", "2"), []codec.Tag{{Name: "b", Value: "2"}, {Name: "a", Value: "1"}})
		want := make([]bool, len(ask))
		for i := range stored {
			want[i] = true
		}
		want[len(ask)-2], want[len(ask)-1] = true, true
		for _, at := range []time.Time{clock, clock.Add(11 * time.Second)} {
			e.now = func() time.Time { return at }
			if at != clock {
				want[len(ask)-3] = false // expired
			} else {
				want[len(ask)-3] = true
			}
			got, err := e.RowKeysExist(ctx, metric, rt, codec.TypeDouble, ask)
			require.NoError(t, err)
			require.Equal(t, want, got, "row time %d at %s", rt, at)
			for i, tags := range ask {
				one, err := e.RowKeyExists(ctx, metric, rt, codec.TypeDouble, tags)
				require.NoError(t, err)
				require.Equal(t, one, got[i], "row time %d, %v", rt, tags)
			}
		}
		e.now = func() time.Time { return clock }
		got, err := e.RowKeysExist(ctx, metric, rt, codec.TypeLong, stored[:3])
		require.NoError(t, err)
		require.Equal(t, []bool{false, false, false}, got)
		got, err = e.RowKeysExist(ctx, metric, rt, codec.TypeDouble, nil)
		require.NoError(t, err)
		require.Empty(t, got)
	}
	require.NoError(t, e.Close())
	_, err := e.RowKeysExist(ctx, metric, 0, codec.TypeDouble, stored[:1])
	require.Error(t, err, "a closed engine answers an error, not absence")
}

func slicesOf(s [][]codec.Tag) [][]codec.Tag { return append([][]codec.Tag(nil), s...) }
