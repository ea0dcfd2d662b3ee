package pebblekv

import (
	"encoding/binary"
	"fmt"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// BenchmarkRollupDoubles reads a year of rollup buckets of 20 series as
// the store's rollup read does (kairosstore/rollupread.go: a reader of
// rows per series, its rows of three weeks whole), with the values rollups
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
			// read=cells is a call per cell (CellsOfRows), read=doubles
			// the 8-byte cells of each block in bulk (CellDoublesOfRows).
			for _, bulk := range []bool{false, true} {
				b.Run(map[bool]string{false: "read=cells", true: "read=doubles"}[bulk], func(b *testing.B) {
					read := func() {
						n, sum := 0, 0.0
						count := func(_ uint32, v []byte) error {
							n++
							sum += math.Float64frombits(binary.BigEndian.Uint64(v))
							return nil
						}
						var cols []int64
						var vals []float64
						flush := func() error {
							n += len(cols)
							for _, v := range vals {
								sum += v
							}
							cols, vals = cols[:0], vals[:0]
							return nil
						}
						for _, keys := range rows {
							var err error
							if bulk {
								err = e.CellDoublesOfRows(ctx, func(doubles func([]byte, uint32, uint32, *[]int64, *[]float64, func() error, func(uint32, []byte) error) error) error {
									for _, k := range keys {
										if err := doubles(k, 0, math.MaxUint32, &cols, &vals, flush, count); err != nil {
											return err
										}
									}
									return nil
								})
							} else {
								err = e.CellsOfRows(ctx, func(cells func([]byte, uint32, uint32, func(uint32, []byte) error) error) error {
									for _, k := range keys {
										if err := cells(k, 0, math.MaxUint32, count); err != nil {
											return err
										}
									}
									return nil
								})
							}
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
		})
	}
}

// BenchmarkRollupAppend is the rollup job's steady write: an hour of its
// passes on 20 series (a bucket of each of the five aggregates every 5m,
// and at 1h) into rows two weeks full, then a flush and a compaction of
// the data_points blocks, where the merge operator folds the new cells
// into their blocks. A block is what a compaction that meets a written key
// merges whole: 2^24 ms before (56 cells at 5m, 4-5 at 1h), the window
// windowOf gives a rollup row now.
//
//	go test -run '^$' -bench RollupAppend -benchtime 50x ./kairosstore/pebblekv/
func BenchmarkRollupAppend(b *testing.B) {
	e := open(b, b.TempDir(), DefaultOptions())
	ctx := b.Context()
	const hour = 3_600_000
	type row struct {
		key []byte
		res int64
	}
	var rows []row
	for s := range 20 {
		for _, res := range []int64{hour / 12, hour} {
			for _, agg := range []string{"count", "counter", "max", "min", "sum"} {
				tags := []codec.Tag{{Name: "instance", Value: fmt.Sprint("i", s)}, {Name: "job", Value: "j"}, {Name: "rollup_aggregate", Value: agg},
					{Name: "rollup_resolution", Value: map[int64]string{hour / 12: "5m", hour: "1h"}[res]}, {Name: "saved_from", Value: "x"}}
				rows = append(rows, row{codec.AppendRowKey(nil, codec.RowKey{Metric: "x_rollup", RowTime: 0, DataType: codec.TypeDouble, Tags: tags}), res})
			}
		}
	}
	value := func(t int64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(float64(t%7919)/7)) }
	// Two weeks of buckets, a day a write.
	for day := int64(0); day < 14; day++ {
		batch := &engine.Batch{WriteTime: day}
		for _, r := range rows {
			for t := day * 24 * hour; t < (day+1)*24*hour; t += r.res {
				batch.Cells = append(batch.Cells, engine.Cell{Key: r.key, Column: uint32(t), Value: value(t)})
			}
		}
		require.NoError(b, e.Write(ctx, batch))
	}
	compact := func() {
		require.NoError(b, e.drainHead())
		require.NoError(b, e.db.Flush())
		require.NoError(b, e.db.Compact(ctx, []byte{tableBlock}, []byte{tableBlock + 1}, false))
	}
	compact()
	next := int64(14 * 24 * hour)
	cells := 0
	// The process's CPU, Pebble's compactions included, which run beside
	// the loop.
	cpu := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	cpu0 := cpu()
	for b.Loop() {
		for t := next + hour/12; t <= next+hour; t += hour / 12 {
			batch := &engine.Batch{WriteTime: t}
			for _, r := range rows {
				if t%r.res == 0 {
					batch.Cells = append(batch.Cells, engine.Cell{Key: r.key, Column: uint32(t), Value: value(t)})
				}
			}
			cells += len(batch.Cells)
			require.NoError(b, e.Write(ctx, batch))
		}
		compact()
		next += hour
		if next >= 21*24*hour {
			b.Fatal("past the row: fewer iterations")
		}
	}
	b.ReportMetric(float64((cpu()-cpu0).Nanoseconds())/float64(cells), "cpu-ns/cell")
}
