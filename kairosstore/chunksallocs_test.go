package kairosstore

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// TestReadChunksAllocs bounds the allocations of the chunked read of one
// series of 20,000 doubles (about 3.5 days at 15 s, 84 rows of an hour) on
// the embedded engine: a chunk costs its buffer and the chunk, a row
// Pebble's iterator; nothing per sample. Scratch slices
// per flush, or samples kept whole, go over the bound.
func TestReadChunksAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	ctx := context.Background()
	opts := pebblekv.DefaultOptions()
	opts.FS = vfs.NewMem()
	eng, err := pebblekv.Open("db", opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	require.NoError(t, eng.Setup(ctx))
	s, err := Open(ctx, eng, Options{RowWidth: time.Hour}, nil, nil)
	require.NoError(t, err)
	const n = 20_000
	app := s.NewAppender()
	ls := labels.FromStrings("__name__", "allocs", "job", "node")
	for i := range n {
		_, err := app.Append(0, ls, int64(i)*15_000, math.Round(100*math.Sin(float64(i)/50))/4)
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit(ctx))
	sel, err := s.idx.Select(ctx, index.Query{Matchers: index.All, Start: 0, End: n * 15_000})
	require.NoError(t, err)
	require.Len(t, sel.Series, 1)
	ref := sel.Series[0]
	sortRows(ref)
	_, _, err = s.encodeCells(ctx, ref, 0, n*15_000, 0, nil)
	require.NoError(t, err, "the direct path")
	var got int
	read := func() {
		chks, k, err := s.readChunks(ctx, ref, 0, n*15_000, n, nil)
		require.NoError(t, err)
		got = len(chks)
		require.Equal(t, n, k)
	}
	read() // the block cache and the sample pool warm
	allocs := testing.AllocsPerRun(20, read)
	t.Logf("%.0f allocations per read of %d samples in %d chunks over %d rows", allocs, n, got, len(ref.Rows))
	require.Less(t, allocs, float64(3*got+20*len(ref.Rows)))
}
