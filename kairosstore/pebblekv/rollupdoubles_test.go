package pebblekv

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// BenchmarkRollupDoubles reads a year of rollup buckets of 20 series as
// the store's rollup read does (kairosstore/rollupread.go: a CellsOfRows
// per series, its rows of three weeks whole), with the values rollups
// hold: 8-byte doubles that change every bucket (a counter's running
// sum), written one row at a time with one write time each, under the
// rollup job's row keys: one block per row (windowOf), where a raw row's
// 2^24 ms window would hold 4-5 cells at 1h and one at 6h. Compacted
// first, as a store's rollups are minutes after the job wrote them.
//
//	go test -run '^$' -bench RollupDoubles -benchtime 200x ./kairosstore/pebblekv/
func BenchmarkRollupDoubles(b *testing.B) {
	for _, res := range []int64{3600_000, 6 * 3600_000} {
		b.Run(fmt.Sprintf("bucket=%dh", res/3600_000), func(b *testing.B) {
			// The block cache the panels' adapters ran with
			// (--storage.embedded-cache-bytes), which holds them all.
			opts := DefaultOptions()
			opts.CacheSize = 256 << 20
			e := open(b, b.TempDir(), opts)
			ctx := b.Context()
			spec := codec.DefaultRowSpec()
			const series = 20
			t0 := int64(1_764_115_200_000)
			end := t0 + 366*24*3600*1000
			rows := make([][][]byte, series)
			want := 0
			for s := range series {
				tags := []codec.Tag{{Name: "instance", Value: fmt.Sprint("i", s)}, {Name: "job", Value: "j"}, {Name: "rollup_aggregate", Value: "counter"}, {Name: "rollup_resolution", Value: fmt.Sprint(res/3600_000, "h")}, {Name: "saved_from", Value: "x"}}
				v := 0.0
				for rt := spec.RowTime(t0); rt < end; rt += spec.WidthMillis() {
					key := codec.AppendRowKey(nil, codec.RowKey{Metric: "x_rollup", RowTime: rt, DataType: codec.TypeDouble, Tags: tags})
					rows[s] = append(rows[s], key)
					batch := &engine.Batch{WriteTime: rt}
					for t := max(rt, t0) / res * res; t < min(rt+spec.WidthMillis(), end); t += res {
						if t < rt {
							continue
						}
						v += 300 + float64(t%7919)/7
						batch.Cells = append(batch.Cells, engine.Cell{Key: key, Column: spec.Column(rt, t), Value: binary.BigEndian.AppendUint64(nil, math.Float64bits(v))})
					}
					want += len(batch.Cells)
					require.NoError(b, e.Write(ctx, batch))
				}
			}
			_, err := e.Compact(ctx)
			require.NoError(b, err)
			read := func() {
				n, sum := 0, 0.0
				count := func(_ uint32, v []byte) error {
					n++
					sum += math.Float64frombits(binary.BigEndian.Uint64(v))
					return nil
				}
				for _, keys := range rows {
					err := e.CellsOfRows(ctx, func(cells func([]byte, uint32, uint32, func(uint32, []byte) error) error) error {
						for _, k := range keys {
							if err := cells(k, 0, math.MaxUint32, count); err != nil {
								return err
							}
						}
						return nil
					})
					require.NoError(b, err)
				}
				if n != want || sum == 0 {
					b.Fatal(n, want)
				}
			}
			read()
			b.ReportAllocs()
			for b.Loop() {
				read()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(want), "ns/cell")
		})
	}
}
