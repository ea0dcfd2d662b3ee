package kairosstore

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// TestInlineReadsMatchReadAhead: with fewer evaluations reading than
// cores, an embedded store's series are read ahead on reader goroutines;
// with as many as cores, on the consumer's goroutine, nothing launched
// ahead; both read the same samples (NaN, ±Inf, 1e300, Prometheus's
// extreme times, steps of 1 ms and of 300 years), and a closed querier no
// longer counts.
func TestInlineReadsMatchReadAhead(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	ctx := context.Background()
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	require.NoError(t, eng.Setup(ctx))
	s, err := Open(ctx, eng, Options{}, nil, nil)
	require.NoError(t, err)
	const minT, maxT, y300 = int64(-9223309901257974), int64(9223309901257974), int64(300 * 365 * 24 * 3600 * 1000)
	values := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, -1e300, 0.5}
	app := s.NewAppender()
	for i := range 40 {
		ls := labels.FromStrings("__name__", "inline", "i", fmt.Sprint(i))
		for k := range 300 + i {
			_, err := app.Append(0, ls, 1_000_000+int64(k), values[(i+k)%len(values)]) // 1 ms apart
			require.NoError(t, err)
		}
		for _, ts := range []int64{minT, minT + 1, -y300, y300, maxT - 1, maxT} {
			_, err := app.Append(0, ls, ts, values[i%len(values)])
			require.NoError(t, err)
		}
	}
	require.NoError(t, app.Commit(ctx))

	all := labels.MustNewMatcher(labels.MatchEqual, "__name__", "inline")
	drain := func(set *seriesSet) []string {
		var got []string
		var it chunkenc.Iterator
		for set.Next() {
			it = set.At().Iterator(it)
			for it.Next() != chunkenc.ValNone {
				ts, v := it.At()
				got = append(got, fmt.Sprint(set.At().Labels(), ts, math.Float64bits(v)))
			}
			require.NoError(t, it.Err())
		}
		return got
	}
	q1, err := s.Querier(minT, maxT)
	require.NoError(t, err)
	ahead := q1.Select(ctx, false, nil, all).(*seriesSet)
	require.EqualValues(t, 1, s.readers.evaluating.Load())
	want := drain(ahead)
	require.Len(t, want, 40*300+40*39/2+40*6)
	require.Positive(t, ahead.launched, "one evaluation of two cores reads ahead")

	q2, err := s.Querier(minT, maxT)
	require.NoError(t, err)
	inline := q2.Select(ctx, false, nil, all).(*seriesSet)
	require.EqualValues(t, 2, s.readers.evaluating.Load())
	require.Equal(t, want, drain(inline))
	require.Zero(t, inline.launched, "two evaluations on two cores read inline")

	require.NoError(t, q1.Close())
	require.NoError(t, q2.Close())
	require.NoError(t, q2.Close())
	require.Zero(t, s.readers.evaluating.Load())
	q2.Select(ctx, false, nil, all)
	require.Zero(t, s.readers.evaluating.Load(), "a closed querier is not counted again")
}
