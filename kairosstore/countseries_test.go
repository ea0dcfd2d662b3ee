package kairosstore_test

import (
	"context"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
)

// TestCountSeries: series are counted per metric and row window from the
// indexes, once per series whatever its rows in the window (a non-finite
// sample adds a row under the side index), the same from row_keys and
// from a kept listing.
func TestCountSeries(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, openPebble(t), ks.Options{RowKeysCacheBytes: 64 << 20})
	base := int64(100 * hour)
	app := s.NewAppender()
	for _, smp := range []struct {
		ls labels.Labels
		t  int64
		v  float64
	}{
		{labels.FromStrings("__name__", "a", "i", "1"), base + 1, 1},
		{labels.FromStrings("__name__", "a", "i", "1"), base + 2, math.NaN()},
		{labels.FromStrings("__name__", "a", "i", "2"), base + 3, 1},
		{labels.FromStrings("__name__", "a", "i", "3"), base + hour + 1, 1},
		{labels.FromStrings("__name__", "b", "i", "1"), base + 5, 1},
		{labels.FromStrings("__name__", "c", "i", "1"), base + 3*hour, 1}, // outside the range
	} {
		_, err := app.Append(0, smp.ls, smp.t, smp.v)
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit(ctx))

	for _, tc := range []struct {
		name string
		ms   []*labels.Matcher
		want []index.SeriesCount
	}{
		{"all", nil, []index.SeriesCount{{Metric: "a", RowTime: base, Series: 2}, {Metric: "a", RowTime: base + hour, Series: 1}, {Metric: "b", RowTime: base, Series: 1}}},
		{"one tag value", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "i", "1")}, []index.SeriesCount{{Metric: "a", RowTime: base, Series: 1}, {Metric: "b", RowTime: base, Series: 1}}},
		{"one metric", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "a"), labels.MustNewMatcher(labels.MatchRegexp, "i", "[23]")}, []index.SeriesCount{{Metric: "a", RowTime: base, Series: 1}, {Metric: "a", RowTime: base + hour, Series: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Listed, listed again (and kept), then from the kept listing.
			for range 3 {
				got, err := s.CountSeries(ctx, base, base+2*hour-1, tc.ms...)
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
			}
		})
	}
}
