package kairosstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
)

// TestRawReadsMatchModel holds the raw read path, whose series reuse the
// sample slices of series iterated before, to a model of what was written:
// random series of random lengths (so that reused slices are too short,
// too long or just right), values of every kind (NaN payloads, stale
// markers, ±Inf, 1e300, -0), samples written again later (the last write
// wins), deleted ranges, negative times (rows whose cells come out of
// order). Several readers query at once, each reusing one iterator across
// series and queries, as PromQL's evaluator does; a slice handed to two
// series at once, or reused while its series is still iterated, gives a
// sample of another series.
func TestRawReadsMatchModel(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, openPebble(t), ks.Options{ReadConcurrency: 3})
	rng := rand.New(rand.NewPCG(31, 7))
	values := []float64{math.NaN(), math.Float64frombits(value.StaleNaN), math.Inf(1), math.Inf(-1), 1e300, -1e300, math.Copysign(0, -1), 0}
	model := map[string]map[int64]uint64{} // series labels → time → value bits
	const nSeries = 24
	for round := range 3 {
		data := map[string][]sample{}
		for i := range nSeries {
			ls := lbl("__name__", "raw_model", "i", fmt.Sprint(i))
			if model[canonical(ls)] == nil {
				model[canonical(ls)] = map[int64]uint64{}
			}
			// Lengths from none to several rows of a 1 h row width.
			n := rng.IntN(4) * rng.IntN(600)
			t0 := rng.Int64N(6*hour) - 2*hour
			step := 1 + rng.Int64N(30_000)
			seen := map[int64]bool{}
			for k := range n {
				ts := t0 + int64(k)*step
				if round > 0 && rng.IntN(2) == 0 {
					ts = rng.Int64N(8*hour) - 2*hour // a write again over an earlier one, or a new time
				}
				if seen[ts] {
					continue // one write per time per commit
				}
				seen[ts] = true
				v := rng.NormFloat64() * 1e6
				if rng.IntN(10) == 0 {
					v = values[rng.IntN(len(values))]
				}
				data[ls] = append(data[ls], sample{ts, math.Float64bits(v)})
				model[canonical(ls)][ts] = math.Float64bits(v)
			}
		}
		write(t, s, data)
		// A deleted range of a few series.
		for range 3 {
			i := rng.IntN(nSeries)
			lo := rng.Int64N(8*hour) - 2*hour
			hi := lo + rng.Int64N(2*hour)
			_, err := s.Delete(ctx, lo, hi, eq("__name__", "raw_model"), eq("i", fmt.Sprint(i)))
			require.NoError(t, err)
			for ts := range model[canonical(lbl("__name__", "raw_model", "i", fmt.Sprint(i)))] {
				if lo <= ts && ts <= hi {
					delete(model[canonical(lbl("__name__", "raw_model", "i", fmt.Sprint(i)))], ts)
				}
			}
		}
	}
	want := func(start, end int64) map[string][]sample {
		out := map[string][]sample{}
		for ls, smps := range model {
			for ts, v := range smps {
				if start <= ts && ts <= end {
					out[ls] = append(out[ls], sample{ts, v})
				}
			}
			slices.SortFunc(out[ls], func(a, b sample) int { return int(min(max(a.T-b.T, -1), 1)) })
		}
		return out
	}
	ranges := [][2]int64{{timeparam.Min.UnixMilli(), timeparam.Max.UnixMilli()}, {math.MinInt64, math.MaxInt64}}
	for range 16 {
		lo := rng.Int64N(9*hour) - 3*hour
		ranges = append(ranges, [2]int64{lo, lo + rng.Int64N(4*hour)})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var it chunkenc.Iterator // one for every series and query, as PromQL's
			for k := range ranges {
				r := ranges[(k+w*11)%len(ranges)]
				q, err := s.Querier(r[0], r[1])
				if err != nil {
					errs <- err
					return
				}
				set := q.Select(ctx, true, nil, eq("__name__", "raw_model"))
				exp := want(r[0], r[1])
				got := 0
				for set.Next() {
					ls := set.At().Labels()
					var enc []string
					ls.Range(func(l labels.Label) { enc = append(enc, l.Name, l.Value) })
					var smps []sample
					it = set.At().Iterator(it)
					for it.Next() == chunkenc.ValFloat {
						ts, v := it.At()
						smps = append(smps, sample{ts, math.Float64bits(v)})
					}
					if err := it.Err(); err != nil {
						errs <- err
						return
					}
					if w := exp[lbl(enc...)]; !slices.Equal(w, smps) {
						i := 0
						for i < min(len(w), len(smps)) && w[i] == smps[i] {
							i++
						}
						errs <- fmt.Errorf("range %v, series %s: %d samples, want %d, first different at %d", r, ls, len(smps), len(w), i)
						return
					}
					if len(smps) > 0 {
						got++
					}
				}
				nonEmpty := 0
				for _, smps := range exp {
					if len(smps) > 0 {
						nonEmpty++
					}
				}
				if err := q.Close(); err != nil || set.Err() != nil || got != nonEmpty {
					errs <- fmt.Errorf("range %v: %d series with samples, want %d (%v, %v)", r, got, nonEmpty, err, set.Err())
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
