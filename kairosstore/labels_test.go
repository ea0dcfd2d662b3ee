package kairosstore_test

import (
	"context"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	ks "github.com/kairos-remote/kairos-adapter/kairosstore"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
)

// TestLabelLookups checks the label names and values the query API reads
// from the indexes, with and without matchers, by row window, and that a
// Select for "series" returns label sets without reading samples.
func TestLabelLookups(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		s := openStore(t, eng, ks.Options{MetricPrefix: "p."})
		write(t, s, map[string][]sample{
			lbl("__name__", "cpu", "host", "a", "mode", "idle"): {{10, bits(1)}},
			lbl("__name__", "cpu", "host", "b", "mode", "user"): {{hour + 10, bits(2)}},
			lbl("__name__", "mem", "host", "a", "dc", "x"):      {{10, bits(3)}},
		})
		ctx := context.Background()
		cases := []struct {
			name       string
			start, end int64
			ms         []*labels.Matcher
			names      []string
			hosts      []string
			metrics    []string
			series     []string
		}{
			{name: "everything", start: 0, end: 3 * hour,
				names: []string{"__name__", "dc", "host", "mode"}, hosts: []string{"a", "b"}, metrics: []string{"cpu", "mem"}},
			{name: "one metric", start: 0, end: 3 * hour, ms: []*labels.Matcher{eq("__name__", "cpu")},
				names: []string{"__name__", "host", "mode"}, hosts: []string{"a", "b"}, metrics: []string{"cpu"},
				series: []string{`{__name__="cpu", host="a", mode="idle"}`, `{__name__="cpu", host="b", mode="user"}`}},
			{name: "by tag", start: 0, end: 3 * hour, ms: []*labels.Matcher{eq("host", "a")},
				names: []string{"__name__", "dc", "host", "mode"}, hosts: []string{"a"}, metrics: []string{"cpu", "mem"},
				series: []string{`{__name__="cpu", host="a", mode="idle"}`, `{__name__="mem", dc="x", host="a"}`}},
			// The second row window only: host b's row.
			{name: "later window", start: hour, end: 3 * hour, ms: []*labels.Matcher{eq("__name__", "cpu")},
				names: []string{"__name__", "host", "mode"}, hosts: []string{"b"}, metrics: []string{"cpu"},
				series: []string{`{__name__="cpu", host="b", mode="user"}`}},
			{name: "nothing matches", start: 0, end: 3 * hour, ms: []*labels.Matcher{eq("host", "z")},
				names: []string{}, hosts: []string{}, metrics: []string{}, series: []string{}},
		}
		for _, c := range cases {
			q, err := s.Querier(c.start, c.end)
			require.NoError(t, err)
			names, _, err := q.LabelNames(ctx, nil, c.ms...)
			require.NoError(t, err)
			require.Equal(t, c.names, names, "%s: names", c.name)
			hosts, _, err := q.LabelValues(ctx, "host", nil, c.ms...)
			require.NoError(t, err)
			require.Equal(t, c.hosts, hosts, "%s: host values", c.name)
			metrics, _, err := q.LabelValues(ctx, "__name__", nil, c.ms...)
			require.NoError(t, err)
			require.Equal(t, c.metrics, metrics, "%s: metric names (prefix removed)", c.name)
			if c.series != nil {
				set := q.Select(ctx, false, &storage.SelectHints{Start: c.start, End: c.end, Func: "series"}, c.ms...)
				got := []string{}
				for set.Next() {
					got = append(got, set.At().Labels().String())
				}
				require.NoError(t, set.Err())
				require.Equal(t, c.series, got, "%s: series", c.name)
			}
		}
		q, err := s.Querier(0, 3*hour)
		require.NoError(t, err)
		limited, _, err := q.LabelNames(ctx, &storage.LabelHints{Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []string{"__name__", "dc"}, limited)
	})
}

// TestCountSeries: series are counted per metric and row window from the
// indexes, once per series whatever its rows in the window (a non-finite
// sample adds a row under the side index), the same from row_keys and
// from a kept listing.
func TestCountSeries(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		s := openStore(t, eng, ks.Options{RowKeysCacheBytes: 64 << 20})
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
	})
}
