package web_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// BenchmarkSeriesCountsVsLabelValues counts the series of one metric of
// KAIROS_BENCH_SERIES (default 100,000; the figure is 1,000,000)
// series in one row window, as the explorer does, beside the label-values
// lookup of the same metric (/api/v1/label/instance/values?match[]=big),
// both listing the row_keys partition (no kept listings).
func BenchmarkSeriesCountsVsLabelValues(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("KAIROS_BENCH_SERIES")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	eng, err := pebblekv.Open(b.TempDir(), pebblekv.Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	if err := eng.Setup(ctx); err != nil {
		b.Fatal(err)
	}
	const chunk = 100_000
	for lo := 0; lo < n; lo += chunk {
		batch := &engine.Batch{WriteTime: 1, MetricNames: []string{"big"}, RowTimes: []engine.RowTimeIndex{{Metric: "big"}}}
		for i := lo; i < min(lo+chunk, n); i++ {
			batch.RowKeys = append(batch.RowKeys, engine.IndexedRowKey{Metric: "big", DataType: "kairos_double",
				Tags: []codec.Tag{{Name: "instance", Value: fmt.Sprintf("10.%d.%d.%d:9100", i>>16&255, i>>8&255, i&255)}, {Name: "job", Value: "node"}}})
		}
		if err := eng.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	s, err := kairosstore.Open(ctx, eng, kairosstore.Options{}, nil, prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	end := int64(time.Hour / time.Millisecond)
	b.Run("series_counts", func(b *testing.B) {
		for b.Loop() {
			got := 0
			if err := s.SeriesCounts(ctx, "big", 0, end, func(_ int64, _ string, k int, _ bool) { got += k }); err != nil || got != n {
				b.Fatal(got, err)
			}
		}
	})
	b.Run("label_values", func(b *testing.B) {
		m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "big")
		for b.Loop() {
			q, err := s.Querier(0, end)
			if err != nil {
				b.Fatal(err)
			}
			vs, _, err := q.LabelValues(ctx, "instance", nil, m)
			if err != nil || len(vs) != n {
				b.Fatal(len(vs), err)
			}
			q.Close()
		}
	})
}
