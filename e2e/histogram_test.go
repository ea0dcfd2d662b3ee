package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// hspec describes a histogram by absolute bucket counts, which read better
// than the deltas of integer histograms; Count is derived from the buckets
// so that the histogram is valid.
type hspec struct {
	hint     histogram.CounterResetHint
	schema   int32
	sum      float64
	zt, zc   float64 // zero threshold and zero bucket count
	pos, neg []histogram.Span
	pc, nc   []float64 // positive and negative bucket counts
	custom   []float64 // bucket bounds of schema -53
	// nan counts observations in no bucket: NaN, whose sum is then NaN.
	nan float64
}

func (s hspec) count() float64 {
	c := s.zc + s.nan
	for _, v := range slices.Concat(s.pc, s.nc) {
		c += v
	}
	return c
}

func (s hspec) toInt() *histogram.Histogram {
	deltas := func(counts []float64) []int64 {
		var out []int64
		prev := int64(0)
		for _, c := range counts {
			out = append(out, int64(c)-prev)
			prev = int64(c)
		}
		return out
	}
	return &histogram.Histogram{
		CounterResetHint: s.hint, Schema: s.schema, Sum: s.sum, Count: uint64(s.count()),
		ZeroThreshold: s.zt, ZeroCount: uint64(s.zc),
		PositiveSpans: s.pos, PositiveBuckets: deltas(s.pc),
		NegativeSpans: s.neg, NegativeBuckets: deltas(s.nc),
		CustomValues: s.custom,
	}
}

func (s hspec) toFloat() *histogram.FloatHistogram {
	return &histogram.FloatHistogram{
		CounterResetHint: s.hint, Schema: s.schema, Sum: s.sum, Count: s.count(),
		ZeroThreshold: s.zt, ZeroCount: s.zc,
		PositiveSpans: s.pos, PositiveBuckets: s.pc,
		NegativeSpans: s.neg, NegativeBuckets: s.nc,
		CustomValues: s.custom,
	}
}

type spans = []histogram.Span

// histTimes are the timestamps of histogram series, spread over KairosDB
// rows as testTimestamps are.
var histTimes = []int64{-rowWidth - 1, -1, 0, 900*rowWidth - 1, 900 * rowWidth, base, base + day}

// ints and floats give the histograms of specs, with integer or float
// counts, at histTimes.
func ints(specs ...hspec) []hsample {
	out := make([]hsample, len(specs))
	for i, s := range specs {
		out[i] = hsample{T: histTimes[i], H: s.toInt()}
	}
	return out
}

func floats(specs ...hspec) []hsample {
	out := make([]hsample, len(specs))
	for i, s := range specs {
		out[i] = hsample{T: histTimes[i], FH: s.toFloat()}
	}
	return out
}

// staleInt is the stale marker Prometheus writes for an integer histogram
// series: only the sum is set.
func staleInt(t int64) hsample {
	return hsample{T: t, H: &histogram.Histogram{Sum: math.Float64frombits(value.StaleNaN)}}
}

// histogramSeries returns series whose names start with prefix: integer and
// float counter histograms of exponential schemas 0 and 3 with positive and
// negative spans, zero buckets, reset hints and a stale marker; gauge
// histograms of schemas 8 and -4; a series that switches between floats,
// integer and float histograms; and a float series with exemplars. With
// nhcb, also custom-bucket (schema -53) histograms, which Prometheus sends
// over remote write 2.0 only.
func histogramSeries(prefix string, nhcb bool) []series {
	ls := func(name, kind string) labels.Labels {
		return labels.FromStrings("__name__", prefix+name, "job", "e2e", "kind", kind)
	}
	const zt = 0.001
	intCounter := ints(
		hspec{schema: 0, sum: 18.4, zt: zt, zc: 2,
			pos: spans{{Offset: 0, Length: 2}, {Offset: 1, Length: 2}}, pc: []float64{1, 2, 1, 1},
			neg: spans{{Offset: 0, Length: 1}, {Offset: 2, Length: 1}}, nc: []float64{2, 1}},
		hspec{hint: histogram.NotCounterReset, schema: 0, sum: 30.5, zt: zt, zc: 3,
			pos: spans{{Offset: 0, Length: 2}, {Offset: 1, Length: 2}}, pc: []float64{2, 3, 1, 2},
			neg: spans{{Offset: 0, Length: 1}, {Offset: 2, Length: 1}}, nc: []float64{3, 1}},
		hspec{hint: histogram.CounterReset, schema: 0, sum: 2.5, zt: zt,
			pos: spans{{Offset: -2, Length: 1}, {Offset: 3, Length: 1}}, pc: []float64{1, 1}},
		// A new bucket between the two of the previous histogram.
		hspec{schema: 0, sum: 9.75, zt: zt, zc: 1,
			pos: spans{{Offset: -2, Length: 2}, {Offset: 2, Length: 1}}, pc: []float64{1, 4, 3}},
	)
	intCounter = append(intCounter, staleInt(histTimes[4]),
		hsample{T: histTimes[5], H: hspec{schema: 0, sum: 70, zt: zt, pos: spans{{Offset: 5, Length: 1}}, pc: []float64{7}}.toInt()})

	floatCounter := floats(
		hspec{schema: 3, sum: -7.125, zt: 0x1p-10, zc: 0.5,
			pos: spans{{Offset: -3, Length: 3}, {Offset: 5, Length: 2}}, pc: []float64{0.25, 1.5, 2, 3.75, 0.125},
			neg: spans{{Offset: 1, Length: 2}}, nc: []float64{1.5, 0.5}},
		hspec{hint: histogram.NotCounterReset, schema: 3, sum: 3.3, zt: 0x1p-10, zc: 1,
			pos: spans{{Offset: -3, Length: 3}, {Offset: 5, Length: 2}}, pc: []float64{0.5, 1.5, 2.5, 4, 0.25},
			neg: spans{{Offset: 1, Length: 2}}, nc: []float64{2, 0.75}},
		hspec{hint: histogram.CounterReset, schema: 3, sum: 0.01, zt: 0x1p-10, zc: 0.25,
			pos: spans{{Offset: 0, Length: 1}}, pc: []float64{0.1}},
		hspec{hint: histogram.NotCounterReset, schema: 3, sum: 1e-3, zt: 0x1p-10, zc: 0.25,
			pos: spans{{Offset: 0, Length: 1}, {Offset: 2, Length: 1}}, pc: []float64{0.2, 1e-3}},
	)

	// Gauge histograms go up and down and change their buckets freely;
	// one has an empty bucket inside a span, one a NaN observation.
	intGauge := ints(
		hspec{hint: histogram.GaugeType, schema: 8, sum: 1.5,
			pos: spans{{Offset: 100, Length: 3}}, pc: []float64{5, 0, 2},
			neg: spans{{Offset: -4, Length: 1}}, nc: []float64{1}},
		hspec{hint: histogram.GaugeType, schema: 8, sum: 0.25,
			pos: spans{{Offset: 101, Length: 1}}, pc: []float64{1}},
		hspec{hint: histogram.GaugeType, schema: 8, sum: -20, zc: 4,
			pos: spans{{Offset: 99, Length: 2}, {Offset: 10, Length: 1}}, pc: []float64{3, 3, 1},
			neg: spans{{Offset: -4, Length: 2}}, nc: []float64{2, 9}},
	)
	floatGauge := floats(
		hspec{hint: histogram.GaugeType, schema: -4, sum: 1e3, zt: 0.5, zc: 1.25,
			pos: spans{{Offset: 0, Length: 2}}, pc: []float64{3.5, 0.5},
			neg: spans{{Offset: 0, Length: 1}}, nc: []float64{2}},
		hspec{hint: histogram.GaugeType, schema: -4, sum: -3, zt: 0.5,
			pos: spans{{Offset: 1, Length: 1}}, pc: []float64{2}},
		hspec{hint: histogram.GaugeType, schema: -4, sum: math.NaN(), zt: 0.5,
			pos: spans{{Offset: 0, Length: 1}}, pc: []float64{1}, nan: 1},
	)

	// Floats, then integer histograms, a float, a float histogram and an
	// integer histogram again: every switch starts a new chunk.
	mixed := series{
		Labels: ls("_mixed", "mixed"),
		Samples: []sample{
			{T: histTimes[0], Bits: math.Float64bits(1.5)},
			{T: histTimes[1], Bits: math.Float64bits(-2)},
			{T: histTimes[4], Bits: math.Float64bits(42)},
		},
		Histograms: []hsample{
			{T: histTimes[2], H: hspec{schema: 0, sum: 3, pos: spans{{Offset: 0, Length: 1}}, pc: []float64{3}}.toInt()},
			{T: histTimes[3], H: hspec{hint: histogram.NotCounterReset, schema: 0, sum: 4, pos: spans{{Offset: 0, Length: 1}}, pc: []float64{4}}.toInt()},
			{T: histTimes[5], FH: hspec{schema: 1, sum: 2.5, pos: spans{{Offset: 0, Length: 1}}, pc: []float64{2.5}}.toFloat()},
			{T: histTimes[6], H: hspec{schema: 0, sum: 5, pos: spans{{Offset: 0, Length: 1}}, pc: []float64{5}}.toInt()},
		},
	}

	withExemplars := series{
		Labels: ls("_exemplars", "counter"),
		Samples: []sample{
			{T: base, Bits: math.Float64bits(1)},
			{T: base + 1, Bits: math.Float64bits(2)},
			{T: base + day, Bits: math.Float64bits(3)},
		},
		Exemplars: []exemplar.Exemplar{
			{Labels: labels.FromStrings("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"), Value: 0.25, Ts: base, HasTs: true},
			{Labels: labels.FromStrings("span_id", "00f067aa0ba902b7", "trace_id", "4bf92f3577b34da6a3ce929d0e0e4737"), Value: 1.5, Ts: base + 1, HasTs: true},
			{Labels: labels.FromStrings("city", "Zürich ☃", "trace_id", "x:y=z"), Value: -3, Ts: base + day - 5, HasTs: true},
		},
	}

	out := []series{
		{Labels: ls("_int", "counter"), Histograms: intCounter},
		{Labels: ls("_float", "counter"), Histograms: floatCounter},
		{Labels: ls("_gauge", "gauge"), Histograms: intGauge},
		{Labels: ls("_gauge_float", "gauge"), Histograms: floatGauge},
		mixed,
		withExemplars,
	}
	if nhcb {
		custom := []float64{0.1, 0.5, 1, 5}
		out = append(out,
			series{Labels: ls("_nhcb", "counter"), Histograms: ints(
				// Bucket 4 is the +Inf bucket.
				hspec{schema: -53, sum: 20.5, custom: custom,
					pos: spans{{Offset: 0, Length: 2}, {Offset: 1, Length: 2}}, pc: []float64{1, 2, 3, 4}},
				hspec{hint: histogram.NotCounterReset, schema: -53, sum: 30, custom: custom,
					pos: spans{{Offset: 0, Length: 2}, {Offset: 1, Length: 2}}, pc: []float64{2, 2, 5, 6}},
				hspec{hint: histogram.CounterReset, schema: -53, sum: 0.05, custom: custom,
					pos: spans{{Offset: 0, Length: 1}}, pc: []float64{1}},
			)},
			series{Labels: ls("_nhcb_float", "counter"), Histograms: floats(
				hspec{schema: -53, sum: 1.25, custom: custom[:2],
					pos: spans{{Offset: 1, Length: 2}}, pc: []float64{0.5, 1.5}},
				hspec{hint: histogram.CounterReset, schema: -53, sum: 0.5, custom: custom[:2],
					pos: spans{{Offset: 0, Length: 1}}, pc: []float64{0.5}},
			)},
		)
	}
	return out
}

// TestHistogramRoundTrip writes native histograms and exemplars over remote
// write 1.0 and 2.0 and reads the histograms back with both remote-read
// response types. Remote read has no exemplars: they are read through the
// store's Go API on the adapter's storage, the one place this package looks
// past HTTP.
func TestHistogramRoundTrip(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		a := startAdapter(t, "", embeddedStorage(dir))
		histogramRoundTrip(t, a, func(t *testing.T) engine.Engine {
			// Pebble allows one process per directory.
			require.Equal(t, 0, a.stop(t, syscall.SIGTERM), "adapter exit code after SIGTERM")
			eng, err := pebblekv.Open(dir, pebblekv.DefaultOptions(), nil)
			require.NoError(t, err)
			return eng
		})
	})
	t.Run("cassandra", func(t *testing.T) {
		t.Parallel()
		addr, ks := cassandratest.Keyspace(t)
		a := startAdapter(t, "", cassandraStorage(addr, ks))
		histogramRoundTrip(t, a, func(t *testing.T) engine.Engine {
			eng, err := cql.Open(t.Context(), cql.Config{
				Hosts: []string{addr}, Keyspace: ks, WriteConsistency: "ONE", ReadConsistency: "ONE", Timeout: 30 * time.Second,
			}, nil)
			require.NoError(t, err)
			return eng
		})
	})
}

// histogramRoundTrip runs the test on a; openEngine opens the adapter's
// storage for the exemplar check, the test's last step.
func histogramRoundTrip(t *testing.T, a *adapter, openEngine func(t *testing.T) engine.Engine) {
	v1, v2 := histogramSeries("e2e_hist_v1", false), histogramSeries("e2e_hist_v2", true)
	written := slices.Concat(v1, v2)
	all := readQuery{Start: math.MinInt64/1000 + 62135596801, End: math.MaxInt64/1000 - 62135596801, Matchers: []*labels.Matcher{
		mustMatcher(labels.MatchRegexp, "__name__", "e2e_hist_.*")}}
	queries := []readQuery{
		all,
		// Ranges starting inside series: the reset at histTimes[2] is the
		// first histogram of its chunk, the stale marker at histTimes[4]
		// the last.
		{Start: histTimes[2], End: histTimes[4], Matchers: []*labels.Matcher{
			mustMatcher(labels.MatchRegexp, "__name__", "e2e_hist_v.*"),
			mustMatcher(labels.MatchEqual, "kind", "counter")}},
		{Start: histTimes[3], End: histTimes[5], Matchers: []*labels.Matcher{
			mustMatcher(labels.MatchRegexp, "__name__", "e2e_hist_v2_(mixed|gauge.*)")}},
		// One row: the integer histogram before a row boundary and the
		// stale marker after it.
		{Start: histTimes[3], End: histTimes[4], Matchers: []*labels.Matcher{
			mustMatcher(labels.MatchEqual, "__name__", "e2e_hist_v1_int")}},
	}
	checkRead := func(t *testing.T, when string) {
		t.Helper()
		for _, rt := range []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS} {
			got := remoteRead(t, a, rt, queries...)
			for i, q := range queries {
				want := expectReadAs(written, q, rt)
				require.NotEmpty(t, want, "query %d selects nothing: fix the test", i)
				require.Equal(t, want, got[i], "%s: %v: query %d %v [%d, %d]", when, rt, i, q.Matchers, q.Start, q.End)
			}
		}
	}

	// mustWrite checks the 2.0 headers: every histogram and exemplar sent
	// was confirmed.
	mustWrite(t, a, false, v1)
	mustWrite(t, a, true, v2)
	checkRead(t, "after one write")

	// The read path is sound if it hands Prometheus what the Prometheus
	// client accepts (it validates histograms since 3.9).
	for _, ss := range remoteReadSeries(t, a, prompb.ReadRequest_SAMPLES, all)[0] {
		for _, h := range ss.Histograms {
			if h.H != nil {
				require.NoError(t, h.H.Validate(), "%s %s", ss.Labels, h)
			} else {
				require.NoError(t, h.FH.Validate(), "%s %s", ss.Labels, h)
			}
		}
	}

	// A resent batch adds nothing.
	mustWrite(t, a, false, v1)
	mustWrite(t, a, true, v2)
	checkRead(t, "after a retried write")

	checkExemplars(t, openEngine(t), written)
}

// checkExemplars reads every exemplar written through the store's API.
func checkExemplars(t *testing.T, eng engine.Engine, written []series) {
	t.Cleanup(func() { _ = eng.Close() })
	ctx := context.Background()
	store, err := kairosstore.Open(ctx, eng, kairosstore.Options{}, nil, nil)
	require.NoError(t, err)
	var want []string
	for _, s := range written {
		for _, e := range s.Exemplars {
			want = append(want, formatExemplar(s.Labels, e))
		}
	}
	require.NotEmpty(t, want, "no exemplars written: fix the test")
	res, err := store.Exemplars(ctx, math.MinInt64/1000, math.MaxInt64/1000, mustMatcher(labels.MatchRegexp, "__name__", "e2e_hist_.*"))
	require.NoError(t, err)
	got := []string{}
	for _, r := range res {
		for _, e := range r.Exemplars {
			got = append(got, formatExemplar(r.SeriesLabels, e))
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	require.Equal(t, want, got, "exemplars read through the store")
}

func formatExemplar(series labels.Labels, e exemplar.Exemplar) string {
	return fmt.Sprintf("%q t=%d %s v=%#016x hasTs=%v", series.String(), e.Ts, e.Labels, math.Float64bits(e.Value), e.HasTs)
}
