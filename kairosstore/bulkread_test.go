package kairosstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// The embedded engine hands rows of doubles over in bulk: a change of its
// signature would silently fall back to a call per cell.
var _ doubleCells = (*pebblekv.Engine)(nil)

// perCell is an engine without CellDoubles: the per-cell path.
type perCell struct{ engine.Engine }

// TestBulkReadMatchesPerCell holds the read of rows of doubles in bulk to
// the per-cell read of the same engine: two stores over one Pebble engine,
// one of which cannot see CellDoubles, read every series over random
// spans (one, or several, which filter inside a slice) and sample budgets,
// and must return the same samples bit for bit, histograms and all, and
// fail alike. The series mix doubles of every kind (NaN payloads, stale
// markers, ±Inf, 1e300: non-finite samples go to null rows), histograms in
// the same series, negative times, samples written again (last write
// wins), deleted ranges, and cells of other value lengths written behind
// the store's back into its rows (blocks of mixed lengths, and
// undecodable doubles), and a series at the ends of Prometheus's times.
func TestBulkReadMatchesPerCell(t *testing.T) {
	ctx := context.Background()
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	require.NoError(t, eng.Setup(ctx))
	const hour = int64(time.Hour / time.Millisecond)
	bulk, slow := bulkAndPerCell(t, eng)

	rng := rand.New(rand.NewPCG(5, 31))
	odd := []float64{math.NaN(), math.Float64frombits(value.StaleNaN), math.Float64frombits(0x7ff8dead00000001), math.Inf(1), math.Inf(-1), 1e300, -1e300, math.Copysign(0, -1)}
	const nSeries = 16
	for round := range 3 {
		app := bulk.NewAppender()
		for i := range nSeries {
			ls := labels.FromStrings("__name__", "bulk", "i", fmt.Sprint(i))
			n := rng.IntN(3) * rng.IntN(2000)
			t0 := rng.Int64N(6*hour) - 3*hour
			step := 1 + rng.Int64N(20_000)
			seen := map[int64]bool{}
			for k := range n {
				ts := t0 + int64(k)*step
				if round > 0 && rng.IntN(2) == 0 {
					ts = rng.Int64N(8*hour) - 3*hour
				}
				if seen[ts] {
					continue
				}
				seen[ts] = true
				switch r := rng.IntN(40); {
				case r == 0 && i%4 == 0:
					h := &histogram.Histogram{Count: uint64(k), Sum: float64(k), ZeroThreshold: 0.001, Schema: 1,
						PositiveSpans: []histogram.Span{{Offset: 0, Length: 1}}, PositiveBuckets: []int64{int64(k)}}
					_, err = app.AppendHistogram(0, ls, ts, h, nil)
				case r < 4:
					_, err = app.Append(0, ls, ts, odd[rng.IntN(len(odd))])
				default:
					_, err = app.Append(0, ls, ts, rng.NormFloat64()*1e6)
				}
				require.NoError(t, err)
			}
		}
		if round == 0 {
			// The ends of Prometheus's times, a step of 1 ms, and steps
			// of 300 years.
			ls := labels.FromStrings("__name__", "bulk", "i", "extremes")
			const minT, maxT, y300 = int64(-9223309901257974), int64(9223309901257974), int64(300 * 365.25 * 24 * hour)
			for _, ts := range []int64{minT, minT + 1, minT + 2, -2 * y300, -y300, -1, 0, 1, y300, 2 * y300, maxT - 2, maxT - 1, maxT} {
				_, err := app.Append(0, ls, ts, odd[rng.IntN(len(odd))])
				require.NoError(t, err, "time %d", ts)
			}
		}
		require.NoError(t, app.Commit(ctx))
		for range 3 {
			lo := rng.Int64N(8*hour) - 3*hour
			_, err := bulk.Delete(ctx, lo, lo+rng.Int64N(hour), labels.MustNewMatcher(labels.MatchEqual, "i", fmt.Sprint(rng.IntN(nSeries))))
			require.NoError(t, err)
		}
		sel, err := bulk.idx.Select(ctx, index.Query{Matchers: index.All, Start: math.MinInt64 + 1, End: math.MaxInt64})
		require.NoError(t, err)
		require.NotEmpty(t, sel.Series)
		// Cells of other lengths behind the store's back: a 4-byte value
		// (undecodable as a double) and a 9-byte one, in rows of doubles.
		b := &engine.Batch{WriteTime: time.Now().UnixMilli()}
		for _, ref := range sel.Series {
			for _, r := range ref.Rows {
				if r.DataType == codec.TypeDouble && rng.IntN(3) == 0 {
					col := uint32(rng.Int64N(hour))
					b.Cells = append(b.Cells, engine.Cell{Key: r.Key, Column: col, Value: make([]byte, 4+5*rng.IntN(2))})
				}
			}
		}
		require.NoError(t, eng.Write(ctx, b))

		for _, ref := range sel.Series {
			for k := range 10 {
				spans := randomSpans(rng, -4*hour, 6*hour)
				switch k {
				case 8:
					spans = []span{{-9223309901257974, -9223309901257973}, {-1, 1}, {9223309901257973, 9223309901257974}}
				case 9:
					spans = []span{{-9223309901257974, 9223309901257974}}
				}
				var limit int64
				if rng.IntN(3) == 0 {
					limit = rng.Int64N(3000)
				}
				budget := func() *sampleBudget {
					if limit == 0 {
						return nil
					}
					return &sampleBudget{limit: limit}
				}
				hint := rng.IntN(3000)
				want, wantErr := slow.readSeriesIn(ctx, ref, spans, hint, budget())
				got, gotErr := bulk.readSeriesIn(ctx, ref, spans, hint, budget())
				where := fmt.Sprintf("round %d, %s, spans %v, limit %d", round, ref.Labels, spans, limit)
				require.Equal(t, wantErr != nil, gotErr != nil, "%s: %v, %v", where, wantErr, gotErr)
				if wantErr != nil {
					require.True(t, errors.Is(gotErr, ErrTooManySamples), "%s: %v", where, gotErr)
					continue
				}
				requireSameSeries(t, want, got, where)
				if k == 9 && ref.Labels.Get("i") == "extremes" && limit == 0 {
					require.Len(t, got.ts, 13, where)
				}
				bulk.recycle(got)
			}
		}
	}
}

// randomSpans is one to four sorted, disjoint spans in [lo, hi), one of
// them at times at the ends of int64.
func randomSpans(rng *rand.Rand, lo, hi int64) []span {
	if rng.IntN(8) == 0 {
		return []span{{math.MinInt64, math.MaxInt64}}
	}
	var out []span
	t := lo + rng.Int64N(hi-lo)/4
	for range 1 + rng.IntN(4) {
		a := t + rng.Int64N((hi-lo)/8)
		b := a + rng.Int64N((hi-lo)/4)
		out = append(out, span{a, b})
		t = b + 1 + rng.Int64N(60_000)
	}
	return out
}

func requireSameSeries(t *testing.T, want, got *listSeries, where string) {
	t.Helper()
	require.Equal(t, want.ts, got.ts, where)
	bits := func(vs []float64) []uint64 {
		out := make([]uint64, len(vs))
		for i, v := range vs {
			out[i] = math.Float64bits(v)
		}
		return out
	}
	require.Equal(t, bits(want.vs), bits(got.vs), where)
	require.Equal(t, want.hs == nil, got.hs == nil, where)
	if want.hs != nil {
		require.Equal(t, len(want.ts), len(got.hs), where)
		require.Equal(t, len(want.ts), len(got.fhs), where)
		for i := range want.hs {
			require.True(t, slices.Equal([]bool{want.hs[i] == nil, want.fhs[i] == nil}, []bool{got.hs[i] == nil, got.fhs[i] == nil}), "%s: sample %d", where, i)
			if want.hs[i] != nil {
				require.Equal(t, want.hs[i].String(), got.hs[i].String(), where)
			}
		}
	}
}

// bulkAndPerCell opens two stores of hour-wide rows on eng: one as the
// adapter opens it, one that cannot see the engine's bulk read
// (CellDoubles) and so reads every cell on its own.
func bulkAndPerCell(t *testing.T, eng engine.Engine) (bulk, perCellStore *Store) {
	t.Helper()
	opts := Options{RowWidth: time.Hour}
	bulk, err := Open(context.Background(), eng, opts, nil, nil)
	require.NoError(t, err)
	perCellStore, err = Open(context.Background(), perCell{eng}, opts, nil, nil)
	require.NoError(t, err)
	_, isBulk := perCellStore.eng.(doubleCells)
	require.False(t, isBulk)
	return bulk, perCellStore
}
