package kairosstore

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"
)

// TestXOREncoderMatchesChunkenc holds xorEncoder to chunkenc's appender:
// the same bytes for every chunk of samples, of one sample to 120: regular
// and jittered steps, steps of 1 ms and of 300 years, the ends of
// Prometheus's times and of int64 (deltas and deltas of deltas that
// overflow), every bucket of delta of delta at its bounds, values
// repeating, reusing the XOR window or not, NaN payloads, stale markers,
// ±Inf, 1e300, -0 and subnormals.
func TestXOREncoderMatchesChunkenc(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 120))
	const y300 = int64(300 * 365.25 * 24 * 3600 * 1000)
	odd := []float64{math.NaN(), math.Float64frombits(value.StaleNaN), math.Float64frombits(0x7ff8dead00000001), math.Float64frombits(0xfff0000000000001),
		math.Inf(1), math.Inf(-1), 1e300, -1e300, math.Copysign(0, -1), 0, 5e-324, math.MaxFloat64, 1, 1.5}
	steps := []func(i int) int64{
		func(int) int64 { return 15_000 },
		func(int) int64 { return 1 },
		func(int) int64 { return y300 },
		func(int) int64 { return 15_000 + rng.Int64N(200) - 100 },
		func(int) int64 { return rng.Int64N(1 << 22) },
		func(int) int64 { return rng.Int64() },
		// Deltas of deltas at the bounds of each bucket.
		func(i int) int64 {
			b := []int64{0, 1 << 13, 1<<13 + 1, -(1<<13 - 1), -(1 << 13), 1 << 16, 1<<16 + 1, -(1<<16 - 1), -(1 << 16), 1 << 19, 1<<19 + 1, -(1<<19 - 1), -(1 << 19)}
			return 1<<21 + b[i%len(b)]*int64(i%2*2-1)
		},
	}
	values := []func(i int) float64{
		func(i int) float64 { return float64(i) },
		func(i int) float64 { return math.Round(100*math.Sin(float64(i)/50)) / 4 },
		func(int) float64 { return rng.NormFloat64() * 1e6 },
		func(int) float64 { return math.Float64frombits(rng.Uint64()) },
		func(int) float64 { return odd[rng.IntN(len(odd))] },
		func(i int) float64 { return odd[i%len(odd)] },
		func(int) float64 { return 42 },
	}
	starts := []int64{0, 1_700_000_000_000, promMinT, promMaxT - 119*15_000, math.MinInt64, math.MaxInt64 - 1000, -1}
	var enc xorEncoder
	check := func(ts []int64, vs []float64) {
		t.Helper()
		want := chunkenc.NewXORChunk()
		app, err := want.Appender()
		require.NoError(t, err)
		enc.reset(nil)
		for i := range ts {
			app.Append(0, ts[i], vs[i])
			enc.append(ts[i], vs[i])
		}
		got := enc.chunk()
		require.Equal(t, want.Bytes(), got.Bytes(), "times %v values %v", ts, vs)
		require.Equal(t, len(ts), got.NumSamples())
	}
	for _, start := range starts {
		for _, step := range steps {
			for _, val := range values {
				for _, n := range []int{1, 2, 3, 119, 120, 1 + rng.IntN(120)} {
					ts, vs := make([]int64, n), make([]float64, n)
					tt := start
					for i := range n {
						ts[i], vs[i] = tt, val(i)
						tt += step(i) // overflows on purpose: the encoding wraps alike
					}
					check(ts, vs)
				}
			}
		}
	}
	// Times at Prometheus's ends, next to each other and far apart.
	check([]int64{promMinT, promMaxT}, []float64{1, 2})
	check([]int64{promMinT, promMinT + 1, promMaxT - 1, promMaxT}, []float64{math.NaN(), 1e300, math.Inf(-1), 0})
	check([]int64{math.MinInt64, 0, math.MaxInt64}, []float64{-1e300, 5e-324, math.Float64frombits(value.StaleNaN)})
}

// FuzzXOREncoder: for any times and values the fuzzer makes up (16 bytes a
// sample, up to a chunk's 120), xorEncoder writes chunkenc's bytes.
func FuzzXOREncoder(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 16*120))
	seed := make([]byte, 0, 16*3)
	for _, s := range [][2]uint64{{1_700_000_000_000, math.Float64bits(1)}, {1_700_000_015_000, value.StaleNaN}, {math.MaxInt64, 0x7ff8dead00000001}} {
		seed = binary.BigEndian.AppendUint64(seed, s[0])
		seed = binary.BigEndian.AppendUint64(seed, s[1])
	}
	f.Add(seed)
	var enc xorEncoder
	f.Fuzz(func(t *testing.T, b []byte) {
		n := min(len(b)/16, 120)
		want := chunkenc.NewXORChunk()
		app, err := want.Appender()
		require.NoError(t, err)
		enc.reset(nil)
		for i := range n {
			ts := int64(binary.BigEndian.Uint64(b[16*i:]))
			v := math.Float64frombits(binary.BigEndian.Uint64(b[16*i+8:]))
			app.Append(0, ts, v)
			enc.append(ts, v)
		}
		require.Equal(t, want.Bytes(), enc.chunk().Bytes())
	})
}
