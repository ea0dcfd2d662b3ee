package kairosstore

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"
)

// TestListIteratorSeekNext: Seek (a binary search from where the iterator
// is) and Next land where a linear walk of the samples does, with times at
// Prometheus's ends and 1 ms or 300 years apart, values NaN, ±Inf and 1e300,
// and histograms among the floats; Seek never moves back.
func TestListIteratorSeekNext(t *testing.T) {
	const year = 365 * 24 * 3600 * 1000
	minT, maxT := int64(-9223309901257974000), int64(9223309901257974000) // Prometheus's minimum and maximum times, ms
	series := map[string][]int64{
		"ends":     {minT, minT + 1, -1, 0, 1, maxT - 1, maxT},
		"300y":     {minT, minT + 300*year, 0, 300 * year, maxT},
		"1ms":      {10, 11, 12, 13, 14, 15},
		"one":      {0},
		"none":     nil,
		"extremes": {math.MinInt64, math.MinInt64 + 1, math.MaxInt64 - 1, math.MaxInt64},
	}
	values := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, -1e300, 0}
	rng := rand.New(rand.NewPCG(1, 2))
	for name, ts := range series {
		for _, withHist := range []bool{false, true} {
			l := &listSeries{}
			for i, ts := range ts {
				var h *histogram.Histogram
				if withHist && i%2 == 1 {
					h = &histogram.Histogram{Count: uint64(i), Sum: float64(i)}
				}
				l.add(ts, values[i%len(values)], h, nil)
			}
			// linear: where a Seek to t from position i lands.
			linear := func(i int, t int64) int {
				i = max(i, 0)
				for i < len(ts) && ts[i] < t {
					i++
				}
				return i
			}
			targets := slices.Clone(ts)
			for _, t := range ts {
				targets = append(targets, t-1, t+1)
			}
			targets = append(targets, math.MinInt64, math.MaxInt64, minT, maxT)
			for range 200 {
				it := l.Iterator(nil).(*listIterator)
				pos := -1
				for range 6 {
					var vt chunkenc.ValueType
					if rng.IntN(3) == 0 {
						vt = it.Next()
						pos = min(pos+1, len(ts))
						if pos >= len(ts) {
							require.Equal(t, chunkenc.ValNone, vt, name)
							continue
						}
					} else {
						target := targets[rng.IntN(len(targets))]
						vt = it.Seek(target)
						pos = linear(pos, target)
						if pos >= len(ts) {
							require.Equal(t, chunkenc.ValNone, vt, "%s: seek %d", name, target)
							continue
						}
						require.GreaterOrEqual(t, it.AtT(), target, "%s: seek %d", name, target)
					}
					require.Equal(t, vt, func() chunkenc.ValueType {
						if withHist && pos%2 == 1 {
							return chunkenc.ValHistogram
						}
						return chunkenc.ValFloat
					}(), name)
					require.Equal(t, ts[pos], it.AtT(), "%s at %d", name, pos)
					if l.valueType(pos) == chunkenc.ValFloat {
						gt, gv := it.At()
						require.Equal(t, ts[pos], gt, name)
						require.Equal(t, math.Float64bits(values[pos%len(values)]), math.Float64bits(gv), name)
					}
				}
			}
		}
	}
}
