package kairosstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// Prometheus's minimum and maximum times, ms.
const promMinT, promMaxT = int64(-9223309901257974), int64(9223309901257974)

// TestChunksMatchSamples holds the chunks of the chunked (remote read) path
// to the samples written, on both engines: for every series and range, the
// chunks readChunks encodes (in bulk on Pebble) are byte for byte those of
// Prometheus's encoder (storage.NewSeriesToChunkEncoder) over the samples
// written in the range, decode to exactly them (NaN payloads included),
// and are those of the per-cell read of the same engine (a store that
// cannot see CellDoubles). The series: one sample, exactly a chunk and one
// more, flushes of the bulk read cut mid-chunk, steps of 1 ms, 1e300 and
// -0, non-finite values (null rows: the sorted path), NaN payloads and ±Inf
// written as doubles behind the store's back (the bulk path), a cell of 4
// bytes among them, samples at
// Prometheus's minimum and maximum times, and ranges of 1 ms.
func TestChunksMatchSamples(t *testing.T) {
	t.Run("pebble", func(t *testing.T) {
		t.Parallel()
		eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, eng.Close()) })
		testChunksMatchSamples(t, eng)
	})
	t.Run("cassandra", func(t *testing.T) {
		t.Parallel()
		addr, keyspace := cassandratest.Keyspace(t)
		testChunksMatchSamples(t, cassandratest.Engine(t, addr, keyspace))
	})
}

func testChunksMatchSamples(t *testing.T, eng engine.Engine) {
	ctx := context.Background()
	require.NoError(t, eng.Setup(ctx))
	const hour = int64(time.Hour / time.Millisecond)
	bulk, slow := bulkAndPerCell(t, eng)

	nans := []uint64{math.Float64bits(math.NaN()), value.StaleNaN, 0x7ff8dead00000001, 0xfff0000000000001, 0x7ff0000000000001, 0xffffffffffffffff}
	type smp struct {
		t int64
		v uint64
	}
	run := func(from, step int64, n int, v func(i int) uint64) []smp {
		out := make([]smp, n)
		for i := range out {
			out[i] = smp{from + int64(i)*step, v(i)}
		}
		return out
	}
	irregular := func(i int) uint64 { return math.Float64bits(math.Sin(float64(i)) * 1e3) }
	cases := map[string][]smp{
		"one":     {{5 * hour, math.Float64bits(42)}},
		"chunk":   run(hour, 15_000, chunkSamples, irregular),
		"chunk+1": run(hour, 15_000, chunkSamples+1, irregular),
		"flushes": run(0, 1000, 3*bulkFlush+chunkSamples/2, irregular), // a flush ends mid-chunk
		"ms":      run(2*hour-500, 1, 1000, irregular),                 // across a row boundary
		"large": run(0, 60_000, 300, func(i int) uint64 {
			return math.Float64bits([]float64{1e300, -1e300, math.Copysign(0, -1), 5e-324}[i%4])
		}),
		"nonfinite": run(0, 60_000, 300, func(i int) uint64 {
			return append(nans, math.Float64bits(math.Inf(1)), math.Float64bits(math.Inf(-1)), 0)[i%(len(nans)+3)]
		}),
		"max": {{promMaxT - hour, 1}, {promMaxT - 1, math.Float64bits(2)}, {promMaxT, math.Float64bits(1e300)}},
		"min": {{promMinT, math.Float64bits(-1)}, {promMinT + 1, nans[2]}, {0, 0}},
	}
	app := bulk.NewAppender()
	for name, ss := range cases {
		ls := labels.FromStrings("__name__", "chk", "s", name)
		for _, s := range ss {
			_, err := app.Append(0, ls, s.t, math.Float64frombits(s.v))
			require.NoError(t, err, "%s at %d", name, s.t)
		}
	}
	require.NoError(t, app.Commit(ctx))

	// NaN payloads and ±Inf as 8-byte cells of the series' double rows,
	// as another writer may leave them: these the bulk path decodes.
	sel, err := bulk.idx.Select(ctx, index.Query{Matchers: index.All, Start: promMinT, End: promMaxT})
	require.NoError(t, err)
	b := &engine.Batch{WriteTime: time.Now().UnixMilli()}
	for _, ref := range sel.Series {
		name := ref.Labels.Get("s")
		if name != "large" && name != "flushes" {
			continue
		}
		for _, r := range ref.Rows {
			if r.DataType != codec.TypeDouble || r.RowTime != 0 {
				continue
			}
			for i, v := range append(nans, math.Float64bits(math.Inf(-1))) {
				col := uint32(7 + 1000*i) // between the samples written
				b.Cells = append(b.Cells, engine.Cell{Key: r.Key, Column: col, Value: binary.BigEndian.AppendUint64(nil, v)})
				cases[name] = append(cases[name], smp{int64(col), v})
			}
			if name == "large" {
				// A 4-byte cell, no double: skipped, and its block read a
				// cell at a time between the bulk reads of the others.
				b.Cells = append(b.Cells, engine.Cell{Key: r.Key, Column: 500, Value: []byte{1, 2, 3, 4}})
			}
		}
	}
	require.NotEmpty(t, b.Cells)
	require.NoError(t, eng.Write(ctx, b))
	for _, ss := range cases {
		slices.SortFunc(ss, func(a, b smp) int { return int(min(max(a.t-b.t, -1), 1)) })
	}

	require.Len(t, sel.Series, len(cases))
	for _, ref := range sel.Series {
		name := ref.Labels.Get("s")
		ss := cases[name]
		sortRows(ref)
		// The series of finite doubles only go the direct way, the others
		// (null rows, negative row times) the sorted one.
		direct := name != "nonfinite" && name != "min"
		require.Equal(t, direct, floatsInOrder(ref.Rows), name)
		if direct {
			_, _, err := bulk.encodeCells(ctx, ref, promMinT, promMaxT, 0, nil)
			require.NoError(t, err, name)
		}
		first, last := ss[0].t, ss[len(ss)-1].t
		ranges := [][2]int64{{promMinT, promMaxT}, {first, first}, {last, last}, {first, first + 1}, {last - 1, last}, {first + 1, last - 1}}
		for _, rg := range ranges {
			where := fmt.Sprintf("%s [%d, %d]", name, rg[0], rg[1])
			var want []chunks.Sample
			for _, s := range ss {
				if s.t >= rg[0] && s.t <= rg[1] {
					want = append(want, sampleOf{s.t, math.Float64frombits(s.v)})
				}
			}
			wantChks := encodeSamples(t, ref.Labels, want)
			for _, st := range []*Store{bulk, slow} {
				for _, hint := range []int{0, len(want), 3 * bulkFlush} {
					chks, n, err := st.readChunks(ctx, ref, rg[0], rg[1], hint, nil)
					require.NoError(t, err, where)
					require.Equal(t, len(want), n, where)
					require.Equal(t, wantChks, chunkBytes(chks), "%s, per cell %v, hint %d", where, st == slow, hint)
					require.Equal(t, samplesBits(want), samplesBits(decodeChunks(t, chks)), where)
				}
			}
		}
	}
}

// sortRows sorts the rows of a series as newSeriesSet does before
// readChunks reads it.
func sortRows(ref *index.Series) {
	slices.SortFunc(ref.Rows, func(a, b index.Row) int {
		return cmp.Or(cmp.Compare(a.RowTime, b.RowTime), strings.Compare(a.DataType, b.DataType))
	})
}

type sampleOf struct {
	t int64
	f float64
}

func (s sampleOf) T() int64                    { return s.t }
func (s sampleOf) F() float64                  { return s.f }
func (sampleOf) H() *histogram.Histogram       { return nil }
func (sampleOf) FH() *histogram.FloatHistogram { return nil }
func (sampleOf) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s sampleOf) Copy() chunks.Sample         { return s }
func (sampleOf) ST() int64                     { return 0 }

type chunkOf struct {
	MinT, MaxT int64
	Bytes      []byte
}

func chunkBytes(chks []chunks.Meta) []chunkOf {
	var out []chunkOf
	for _, c := range chks {
		out = append(out, chunkOf{c.MinTime, c.MaxTime, c.Chunk.Bytes()})
	}
	return out
}

// encodeSamples is Prometheus's encoding of samples into chunks.
func encodeSamples(t *testing.T, ls labels.Labels, ss []chunks.Sample) []chunkOf {
	it := storage.NewSeriesToChunkEncoder(storage.NewListSeries(ls, ss)).Iterator(nil)
	var chks []chunks.Meta
	for it.Next() {
		chks = append(chks, it.At())
	}
	require.NoError(t, it.Err())
	return chunkBytes(chks)
}

func decodeChunks(t *testing.T, chks []chunks.Meta) []chunks.Sample {
	var out []chunks.Sample
	for _, c := range chks {
		require.LessOrEqual(t, c.Chunk.NumSamples(), chunkSamples)
		it := c.Chunk.Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			out = append(out, sampleOf{ts, v})
		}
		require.NoError(t, it.Err())
	}
	return out
}

// samplesBits is samples as (time, value bits) pairs, so that NaN payloads
// compare exactly.
func samplesBits(ss []chunks.Sample) [][2]uint64 {
	out := make([][2]uint64, len(ss))
	for i, s := range ss {
		out[i] = [2]uint64{uint64(s.T()), math.Float64bits(s.F())}
	}
	return out
}
