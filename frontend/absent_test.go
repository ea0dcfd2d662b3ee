package frontend

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/stretchr/testify/require"
)

// TestLabelsFromMatchersMatchPrometheus: absent and absent_over_time take
// their answer's labels from a selector's matchers, so they show whatever
// the adapter passes the engine in them. Where the store reads only the
// windows the engine evaluates (a step longer than the range, or than the
// lookback) over series with gaps between samples longer than the range,
// the answers must be Prometheus's own engine's over the same samples
// (refStore), through the query API alone and through the
// frontend (split, sharded, cached).
func TestLabelsFromMatchersMatchPrometheus(t *testing.T) {
	store := testStore(t, nil)
	writeTestData(t, store)
	ref := &refStore{}
	appendTestData(t, ref)
	eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e8, Timeout: time.Minute, LookbackDelta: 5 * time.Minute, EnableAtModifier: true, EnableNegativeOffset: true})

	whole := queryAPI(store)
	front := New(whole, Options{SplitInterval: 20 * time.Minute, Shards: 2, CacheBytes: 16 << 20, Now: func() time.Time { return midnight.Add(24 * time.Hour) }}, prometheus.NewRegistry(), nil)
	// Evaluation times 7 s after the samples' 15 s grid.
	start, end := midnight.Add(-90*time.Minute+7*time.Second), midnight.Add(90*time.Minute)
	for _, c := range []struct {
		q    string
		step time.Duration
	}{
		{`absent_over_time(temperature[1s])`, time.Minute},
		{`absent_over_time(temperature{room="r1", job="sensors"}[5s])`, time.Minute},
		{`absent_over_time(flaky_gauge{id="late", job="x"}[20s] offset 7s)`, time.Minute},
		{`absent_over_time(http_requests_total{code="500", instance="b"}[6s])`, 90 * time.Second},
		{`count_over_time(temperature{room="r2"}[10s])`, time.Minute},
		{`sum by (room) (count_over_time(temperature[10s]))`, time.Minute},
		{`absent(flaky_gauge{id="gone", job="x"})`, 10 * time.Minute},
		{`absent(temperature{room="r9"} offset 1m)`, 10 * time.Minute},
		{`absent(nonexistent{job="x"})`, 10 * time.Minute},
	} {
		qry, err := eng.NewRangeQuery(context.Background(), ref, nil, c.q, start, end, c.step)
		require.NoError(t, err)
		res := qry.Exec(context.Background())
		require.NoError(t, res.Err)
		want := promLines(res.Value.(promql.Matrix))
		qry.Close()
		require.NotEmpty(t, want, c.q)
		form := rangeForm(c.q, start, end, c.step)
		for name, h := range map[string]http.Handler{"query API": whole, "frontend": front} {
			for round := range 2 { // the second from the frontend's cache
				a := ask(t, h, form, nil)
				require.Equal(t, 200, a.code, a.body)
				require.Equal(t, want, answerLines(t, a.body), "%s (%s, round %d)", c.q, name, round)
			}
		}
	}
}

// promLines and answerLines put an engine's matrix and the query API's
// JSON in one form: a line per point, labels, time (ms) and value as the
// query API writes it.
func promLines(m promql.Matrix) []string {
	var out []string
	for _, s := range m {
		for _, p := range s.Floats {
			out = append(out, s.Metric.String()+" "+strconv.FormatInt(p.T, 10)+" "+strconv.FormatFloat(p.F, 'f', -1, 64))
		}
	}
	return out
}

func answerLines(t *testing.T, body string) []string {
	var a struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &a), body)
	var out []string
	for _, s := range a.Data.Result {
		ls := labels.FromMap(s.Metric)
		for _, v := range s.Values {
			ms := int64(v[0].(float64)*1000 + 0.5)
			out = append(out, ls.String()+" "+strconv.FormatInt(ms, 10)+" "+v[1].(string))
		}
	}
	return out
}

// refStore holds samples in memory and selects them by matchers alone, as
// Prometheus's TSDB does: the reference the engine reads without anything
// of the adapter's in between.
type refStore struct{ series []*refSeries }

type refSeries struct {
	ls      labels.Labels
	samples []chunks.Sample
}

type refSample struct {
	t int64
	f float64
	h *histogram.Histogram
}

func (s refSample) T() int64                      { return s.t }
func (s refSample) ST() int64                     { return 0 }
func (s refSample) F() float64                    { return s.f }
func (s refSample) H() *histogram.Histogram       { return s.h }
func (s refSample) FH() *histogram.FloatHistogram { return nil }
func (s refSample) Copy() chunks.Sample           { return s }
func (s refSample) Type() chunkenc.ValueType {
	if s.h != nil {
		return chunkenc.ValHistogram
	}
	return chunkenc.ValFloat
}

func (r *refStore) add(ls labels.Labels, s refSample) {
	i := slices.IndexFunc(r.series, func(x *refSeries) bool { return labels.Equal(x.ls, ls) })
	if i < 0 {
		r.series = append(r.series, &refSeries{ls: ls})
		i = len(r.series) - 1
	}
	r.series[i].samples = append(r.series[i].samples, s)
}

func (r *refStore) Append(_ storage.SeriesRef, ls labels.Labels, t int64, v float64) (storage.SeriesRef, error) {
	r.add(ls, refSample{t: t, f: v})
	return 0, nil
}

func (r *refStore) AppendHistogram(_ storage.SeriesRef, ls labels.Labels, t int64, h *histogram.Histogram, _ *histogram.FloatHistogram) (storage.SeriesRef, error) {
	r.add(ls, refSample{t: t, h: h})
	return 0, nil
}

func (r *refStore) Querier(mint, maxt int64) (storage.Querier, error) {
	return &refQuerier{r: r, mint: mint, maxt: maxt}, nil
}

type refQuerier struct {
	r          *refStore
	mint, maxt int64
}

func (q *refQuerier) Select(_ context.Context, _ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	var out []storage.Series
	for _, s := range q.r.series {
		if !slices.ContainsFunc(ms, func(m *labels.Matcher) bool { return !m.Matches(s.ls.Get(m.Name)) }) {
			in := slices.DeleteFunc(slices.Clone(s.samples), func(x chunks.Sample) bool { return x.T() < q.mint || x.T() > q.maxt })
			out = append(out, storage.NewListSeries(s.ls, in))
		}
	}
	slices.SortFunc(out, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	return &refSet{series: out, i: -1}
}

func (q *refQuerier) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (q *refQuerier) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (q *refQuerier) Close() error { return nil }

type refSet struct {
	series []storage.Series
	i      int
}

func (s *refSet) Next() bool                        { s.i++; return s.i < len(s.series) }
func (s *refSet) At() storage.Series                { return s.series[s.i] }
func (s *refSet) Err() error                        { return nil }
func (s *refSet) Warnings() annotations.Annotations { return nil }
