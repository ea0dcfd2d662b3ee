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

// TestSeriesCounts: series are counted per metric and row window from the
// indexes, one row_keys entry per series of a type (a non-finite sample's
// row under the side index is not counted), the same from row_keys and from
// a kept listing.
func TestSeriesCounts(t *testing.T) {
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

		type window struct {
			metric  string
			rowTime int64
		}
		want := map[window]int{{"a", base}: 2, {"a", base + hour}: 1, {"b", base}: 1}
		// Listed; then after reads that list the windows and keep them
		// (a window is kept once listed twice), from the kept listings:
		// the counts must not change, and every window comes to be
		// counted from its kept listing.
		allCached := false
		for round := 0; round < 6 && !allCached; round++ {
			got, cached := map[window]int{}, map[bool]int{}
			for _, m := range []string{"a", "b", "c"} {
				require.NoError(t, s.SeriesCounts(ctx, m, base, base+2*hour-1, func(rt int64, _ string, n int, c bool) {
					got[window{m, rt}] += n
					cached[c]++
				}))
			}
			require.Equal(t, want, got, "round %d", round)
			allCached = cached[false] == 0
			q, err := s.Querier(base, base+2*hour-1)
			require.NoError(t, err)
			set := q.Select(ctx, false, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", "a|b|c"))
			for set.Next() {
			}
			require.NoError(t, set.Err())
			require.NoError(t, q.Close())
		}
		require.True(t, allCached, "every window from its kept listing")
	})
}
