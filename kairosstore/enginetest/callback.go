package enginetest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// testCallbackError checks that every scan stops at the first callback error
// and returns it.
func testCallbackError(t *testing.T, start opener) {
	e := start(t)
	ctx := t.Context()
	wt := writeTime()
	const rt = 1358985600000
	key := []byte("k")
	rowKey := func(kv string) engine.IndexedRowKey {
		return engine.IndexedRowKey{Metric: "m", RowTime: rt, DataType: "kairos_long", Tags: tags("h", kv)}
	}
	write(t, e, &engine.Batch{
		WriteTime:   wt,
		Cells:       []engine.Cell{{Key: key, Column: 1, Value: []byte("1")}, {Key: key, Column: 2, Value: []byte("2")}},
		RowKeys:     []engine.IndexedRowKey{rowKey("a"), rowKey("b")},
		TagIndexed:  []engine.TagIndexedRowKey{{IndexedRowKey: rowKey("a"), Pair: "p"}, {IndexedRowKey: rowKey("b"), Pair: "p"}},
		RowTimes:    []engine.RowTimeIndex{{Metric: "m", RowTime: rt}, {Metric: "m", RowTime: rt + rowWidth}},
		MetricNames: []string{"m", "n"},
	})
	require.NoError(t, e.SetServiceValue(ctx, "s", "sk", "a", "1", wt))
	require.NoError(t, e.SetServiceValue(ctx, "s", "sk", "b", "2", wt))
	seedLegacy(t, e, wt, engine.LegacyRowKey{Metric: "m", RowKey: []byte{1}}, engine.LegacyRowKey{Metric: "m", RowKey: []byte{2}})

	errStop := errors.New("stop")
	for _, tc := range []struct {
		name string
		scan func(ctx context.Context, stop func() error) error
	}{
		{"Cells", func(ctx context.Context, stop func() error) error {
			return e.Cells(ctx, key, 0, 0xffffffff, func(uint32, []byte) error { return stop() })
		}},
		{"RowKeys", func(ctx context.Context, stop func() error) error {
			return e.RowKeys(ctx, "m", rt, func(string, []codec.Tag) error { return stop() })
		}},
		{"TagIndexedRowKeys", func(ctx context.Context, stop func() error) error {
			return e.TagIndexedRowKeys(ctx, "m", rt, "p", func(string, []codec.Tag) error { return stop() })
		}},
		{"RowTimes", func(ctx context.Context, stop func() error) error {
			return e.RowTimes(ctx, "m", 0, 1<<62, func(int64) error { return stop() })
		}},
		{"MetricNames", func(ctx context.Context, stop func() error) error {
			return e.MetricNames(ctx, func(string) error { return stop() })
		}},
		{"ServiceKeys", func(ctx context.Context, stop func() error) error {
			return e.ServiceKeys(ctx, "s", "sk", "", func(string) error { return stop() })
		}},
		{"LegacyRowKeys", func(ctx context.Context, stop func() error) error {
			return e.LegacyRowKeys(ctx, "m", []byte{0}, []byte{0xff}, func([]byte) error { return stop() })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := tc.scan(t.Context(), func() error {
				calls++
				return errStop
			})
			require.ErrorIs(t, err, errStop)
			require.Equal(t, 1, calls, "the scan must stop at the first error")
		})
	}
}
