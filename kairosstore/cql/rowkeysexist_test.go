package cql_test

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// TestRowKeysExist: the one-statement check of several row_keys entries
// answers what RowKeyExists answers for each, over the hostile entries (no
// tags, empty values, NUL, non-ASCII, a tag set that is a prefix of
// another, the same entry twice, tags out of order), at the row times of
// Prometheus's minimum and maximum times, and past one statement's worth
// of entries.
func TestRowKeysExist(t *testing.T) {
	e, _ := newEngine(t)
	ctx := t.Context()
	const metric = "rke"
	stored := [][]codec.Tag{
		nil,
		tags("a", ""),
		tags("a", "x\x00y", "b", "😀"),
		tags("a", "1"),
		tags("a", "1", "b", "2"),
	}
	absent := [][]codec.Tag{
		tags("a", "x"),
		tags("a", "1", "b", "3"),
		tags("b", "2"),
		tags("a", "x\x00"),
	}
	for i := range 300 {
		tg := tags("n", strconv.Itoa(i))
		if i%2 == 0 {
			stored = append(stored, tg)
		} else {
			absent = append(absent, tg)
		}
	}
	minRow, maxRow := int64(math.MinInt64/1000*1000), int64(math.MaxInt64/1000*1000) // the rows of Prometheus's extremes, roughly
	for _, rt := range []int64{0, minRow, maxRow} {
		b := &engine.Batch{WriteTime: time.Now().UnixMilli()}
		for _, tg := range stored {
			b.RowKeys = append(b.RowKeys, engine.IndexedRowKey{Metric: metric, RowTime: rt, DataType: codec.TypeDouble, Tags: tg})
		}
		require.NoError(t, e.Write(ctx, b))

		var ask [][]codec.Tag
		var want []bool
		for _, tg := range stored {
			ask, want = append(ask, tg), append(want, true)
		}
		for _, tg := range absent {
			ask, want = append(ask, tg), append(want, false)
		}
		// The same entry again, and with its tags in the other order.
		ask, want = append(ask, tags("a", "1", "b", "2"), []codec.Tag{{Name: "b", Value: "2"}, {Name: "a", Value: "1"}}), append(want, true, true)
		got, err := e.RowKeysExist(ctx, metric, rt, codec.TypeDouble, ask)
		require.NoError(t, err)
		require.Equal(t, want, got, "row time %d", rt)
		for i, tg := range ask {
			one, err := e.RowKeyExists(ctx, metric, rt, codec.TypeDouble, tg)
			require.NoError(t, err)
			require.Equal(t, one, got[i], "row time %d, %v", rt, tg)
		}
		// Another type, and an empty question.
		got, err = e.RowKeysExist(ctx, metric, rt, codec.TypeLong, stored[:3])
		require.NoError(t, err)
		require.Equal(t, []bool{false, false, false}, got)
		got, err = e.RowKeysExist(ctx, metric, rt, codec.TypeDouble, nil)
		require.NoError(t, err)
		require.Empty(t, got)
	}
}
