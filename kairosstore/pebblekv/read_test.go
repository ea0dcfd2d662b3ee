package pebblekv

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// BenchmarkRollupRows reads a year of 6h rollup buckets of 20 series as
// the store reads them (rollupread.go): each series' rows of three weeks
// in turn, a row holding one cell per 6h, so that most blocks (windows of
// 4.7 hours) hold one cell and many none. "cells" is a Cells call per row,
// "rows" one CellsOfRows per series. The store is compacted first, as a
// store's rollups are some minutes after the job wrote them: its blocks
// are values, not merge operands.
//
//	go test -run '^$' -bench RollupRows ./kairosstore/pebblekv/
func BenchmarkRollupRows(b *testing.B) {
	e := open(b, b.TempDir(), DefaultOptions())
	ctx := b.Context()
	spec := codec.DefaultRowSpec()
	const series, bucket = 20, int64(6 * 3600 * 1000)
	t0 := int64(1_764_115_200_000)
	end := t0 + 366*24*3600*1000
	rows := make([][][]byte, series)
	batch := &engine.Batch{WriteTime: 1}
	for s := range series {
		tags := []codec.Tag{{Name: "instance", Value: fmt.Sprint("i", s)}, {Name: "job", Value: "j"}, {Name: "rollup", Value: "6h:max"}}
		for t := t0; t < end; t += bucket {
			rt := spec.RowTime(t)
			key := codec.AppendRowKey(nil, codec.RowKey{Metric: "x", RowTime: rt, DataType: codec.TypeDouble, Tags: tags})
			if n := len(rows[s]); n == 0 || string(rows[s][n-1]) != string(key) {
				rows[s] = append(rows[s], key)
			}
			batch.Cells = append(batch.Cells, engine.Cell{Key: key, Column: spec.Column(rt, t), Value: []byte{0xf6, 0x01}})
		}
	}
	require.NoError(b, e.Write(ctx, batch))
	_, err := e.Compact(ctx)
	require.NoError(b, err)
	want := len(batch.Cells)
	for _, how := range []string{"cells", "rows"} {
		b.Run("read="+how, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				n := 0
				count := func(uint32, []byte) error { n++; return nil }
				for _, keys := range rows {
					var err error
					if how == "cells" {
						for _, k := range keys {
							if err = e.Cells(ctx, k, 0, 0xffffffff, count); err != nil {
								break
							}
						}
					} else {
						err = e.CellsOfRows(ctx, func(cells func([]byte, uint32, uint32, func(uint32, []byte) error) error) error {
							for _, k := range keys {
								if err := cells(k, 0, 0xffffffff, count); err != nil {
									return err
								}
							}
							return nil
						})
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if n != want {
					b.Fatal(n, want)
				}
			}
		})
	}
}
