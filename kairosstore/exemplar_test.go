package kairosstore_test

import (
	"context"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

func exemplarAt(ts int64, pairs ...string) exemplar.Exemplar {
	return exemplar.Exemplar{Labels: labels.FromStrings(pairs...), Value: float64(ts) / 10, Ts: ts, HasTs: ts != 0}
}

// TestExemplarsWriteQuery stores exemplars of float and histogram series
// through the Appender and finds them with Store.Exemplars by matchers and
// time range, while Select and KairosDB's row_keys of the series never see
// them.
func TestExemplarsWriteQuery(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		s := openStore(t, eng, ks.Options{})
		a := labels.FromStrings("__name__", "http_requests_total", "instance", "a:1", "job", "api")
		b := labels.FromStrings("__name__", "http_requests_total", "job", "db")
		c := labels.FromStrings("__name__", "latency", "job", "api")
		d := labels.FromStrings("__name__", "no_exemplars", "job", "api")
		aEx := []exemplar.Exemplar{
			exemplarAt(100, "trace_id", "t1"),
			exemplarAt(hour+5, "span_id", "s2", "trace_id", "t2"),
			exemplarAt(2*hour+7, "trace_id", "t3"),
		}
		bEx := []exemplar.Exemplar{exemplarAt(200, "trace_id", "t4")}
		cEx := []exemplar.Exemplar{exemplarAt(150, "trace_id", "t5"), exemplarAt(151, "trace_id", "t6")}
		cEx[1].Value = math.Inf(1)

		app := s.NewAppender()
		require.NoError(t, errOf(app.Append(0, a, 100, 1)))
		require.NoError(t, errOf(app.AppendExemplar(0, a, aEx[2]))) // out of order over two requests
		require.NoError(t, errOf(app.Append(0, b, 200, 2)))
		require.NoError(t, errOf(app.AppendExemplar(0, b, bEx[0])))
		require.NoError(t, errOf(app.AppendHistogram(0, c, 150, testHistograms(t)["nhcb"], nil)))
		for _, e := range cEx {
			require.NoError(t, errOf(app.AppendExemplar(0, c, e)))
		}
		require.NoError(t, errOf(app.Append(0, d, 100, 3)))
		require.NoError(t, app.Commit(ctx))
		app = s.NewAppender()
		require.NoError(t, errOf(app.AppendExemplar(0, a, aEx[0])))
		require.NoError(t, errOf(app.AppendExemplar(0, a, aEx[1])))
		require.NoError(t, app.Commit(ctx))

		query := func(start, end int64, ms ...*labels.Matcher) []exemplar.QueryResult {
			t.Helper()
			got, err := s.Exemplars(ctx, start, end, ms...)
			require.NoError(t, err)
			return got
		}
		require.Equal(t, []exemplar.QueryResult{{SeriesLabels: a, Exemplars: aEx}, {SeriesLabels: b, Exemplars: bEx}},
			query(0, 3*hour, eq("__name__", "http_requests_total")))
		require.Equal(t, []exemplar.QueryResult{{SeriesLabels: a, Exemplars: aEx}, {SeriesLabels: c, Exemplars: cEx}},
			query(0, 3*hour, eq("job", "api")), "without a name matcher the exemplar metrics are listed")
		require.Equal(t, []exemplar.QueryResult{{SeriesLabels: a, Exemplars: aEx[1:2]}},
			query(hour+5, 2*hour+6, labels.MustNewMatcher(labels.MatchRegexp, "__name__", "http.*")), "time range, inclusive")
		require.Equal(t, []exemplar.QueryResult{{SeriesLabels: c, Exemplars: cEx[:1]}},
			query(150, 150, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"), eq("job", "api")))
		require.Empty(t, query(0, 3*hour, eq("__name__", "no_exemplars")))
		require.Empty(t, query(0, 3*hour, eq("__name__", "http_requests_total#exemplars")), "an exemplar metric has no exemplar metric")
		require.Empty(t, query(300, 400, eq("__name__", "http_requests_total")))

		// Select never returns the exemplar metrics, listed or named.
		got := readPoints(t, s, 0, 3*hour, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
		var names []string
		for _, ps := range got {
			names = append(names, ps.Labels.Get("__name__"))
		}
		require.Equal(t, []string{"http_requests_total", "http_requests_total", "latency", "no_exemplars"}, names)
		require.Empty(t, readPoints(t, s, 0, 3*hour, eq("__name__", "http_requests_total#exemplars")))

		// KairosDB sees the exemplar metrics among its metric names, and
		// nothing of them in the series' own row_keys.
		var stored []string
		require.NoError(t, eng.MetricNames(ctx, func(n string) error { stored = append(stored, n); return nil }))
		require.Equal(t, []string{"http_requests_total", "http_requests_total#exemplars", "latency", "latency#exemplars", "no_exemplars"}, stored)
		require.NoError(t, eng.RowTimes(ctx, "http_requests_total", math.MinInt64, math.MaxInt64, func(rt int64) error {
			return eng.RowKeys(ctx, "http_requests_total", rt, func(dataType string, _ []codec.Tag) error {
				require.Equal(t, codec.TypeDouble, dataType)
				return nil
			})
		}))
	})
}

// TestExemplarsMetricPrefix: with a metric prefix the exemplar metric is
// prefix + name + suffix, and queries strip both.
func TestExemplarsMetricPrefix(t *testing.T) {
	ctx := context.Background()
	eng := openPebble(t)
	s := openStore(t, eng, ks.Options{MetricPrefix: "prom."})
	ls := labels.FromStrings("__name__", "up", "job", "x")
	e := exemplarAt(10, "trace_id", "t")
	app := s.NewAppender()
	require.NoError(t, errOf(app.AppendExemplar(0, ls, e)))
	require.NoError(t, app.Commit(ctx))

	var stored []string
	require.NoError(t, eng.MetricNames(ctx, func(n string) error { stored = append(stored, n); return nil }))
	require.Equal(t, []string{"prom.up#exemplars"}, stored)
	want := []exemplar.QueryResult{{SeriesLabels: ls, Exemplars: []exemplar.Exemplar{e}}}
	for _, m := range []*labels.Matcher{eq("__name__", "up"), labels.MustNewMatcher(labels.MatchRegexp, "__name__", "u.*"), eq("job", "x")} {
		got, err := s.Exemplars(ctx, 0, 100, m)
		require.NoError(t, err)
		require.Equal(t, want, got, m.String())
	}
	require.Empty(t, readPoints(t, s, 0, 100, eq("job", "x")), "an exemplar alone makes no series")
}

// TestExemplarInvalid: exemplars whose labels Prometheus could not hold, or
// of series the layout cannot hold, are refused with 400 and not stored.
func TestExemplarInvalid(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, openPebble(t), ks.Options{})
	ls := labels.FromStrings("__name__", "x")
	var sb labels.ScratchBuilder
	build := func(pairs ...string) labels.Labels {
		sb.Reset()
		for i := 0; i < len(pairs); i += 2 {
			sb.Add(pairs[i], pairs[i+1])
		}
		return sb.Labels() // unsorted on purpose
	}
	for name, el := range map[string]labels.Labels{
		"empty name":    build("", "v"),
		"repeated name": build("a", "1", "a", "2"),
		"unsorted":      build("b", "1", "a", "2"),
		"invalid UTF-8": build("a", "\xff"),
	} {
		app := s.NewAppender()
		requireInvalid(t, errOf(app.AppendExemplar(0, ls, exemplar.Exemplar{Labels: el, Ts: 1})), name)
		require.NoError(t, app.Commit(ctx))
	}
	app := s.NewAppender()
	requireInvalid(t, errOf(app.AppendExemplar(0, labels.FromStrings("job", "no name"), exemplarAt(1))), "series without a name")
	require.NoError(t, app.Commit(ctx))
	got, err := s.Exemplars(ctx, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".*"))
	require.NoError(t, err)
	require.Empty(t, got)
}
