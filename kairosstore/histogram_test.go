package kairosstore_test

import (
	"context"
	"encoding/hex"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// testHistograms are valid integer histograms covering every field: both
// exponential schema limits, custom buckets (NHCB), every reset hint, empty
// and huge counts, and a stale marker.
func testHistograms(t testing.TB) map[string]*histogram.Histogram {
	hs := map[string]*histogram.Histogram{
		"schema 0 both sides": {
			CounterResetHint: histogram.NotCounterReset,
			Schema:           0, ZeroThreshold: 0.001, ZeroCount: 2, Count: 21, Sum: 42.5,
			PositiveSpans:   []histogram.Span{{Offset: -2, Length: 2}, {Offset: 1, Length: 2}},
			PositiveBuckets: []int64{1, 1, -1, 2}, // 1 2 1 3
			NegativeSpans:   []histogram.Span{{Offset: 3, Length: 3}},
			NegativeBuckets: []int64{4, -2, 4}, // 4 2 6
		},
		"schema -4 reset": {
			CounterResetHint: histogram.CounterReset,
			Schema:           -4, ZeroThreshold: math.Ldexp(1, -128), Count: 3, Sum: -7.25,
			NegativeSpans:   []histogram.Span{{Offset: -1000, Length: 1}},
			NegativeBuckets: []int64{3},
		},
		// The smallest bucket index Prometheus accepts since 3.16:
		// -2^31 is out of range (TestHistogramValueRejects).
		"schema 8 huge": {
			Schema: 8, Count: 1<<63 + 5, Sum: math.MaxFloat64,
			PositiveSpans:   []histogram.Span{{Offset: math.MinInt32 + 1, Length: 2}, {Offset: math.MaxInt32, Length: 1}},
			PositiveBuckets: []int64{1 << 62, 0, -(1 << 62) + 5}, // 2^62 2^62 5
		},
		"gauge": {
			CounterResetHint: histogram.GaugeType,
			Schema:           3, ZeroThreshold: 0.5, ZeroCount: 7, Count: 7, Sum: math.Copysign(0, -1),
		},
		"empty": {},
		"nhcb": {
			CounterResetHint: histogram.NotCounterReset,
			Schema:           histogram.CustomBucketsSchema, Count: 10, Sum: 12.75,
			PositiveSpans:   []histogram.Span{{Offset: 0, Length: 2}, {Offset: 1, Length: 2}},
			PositiveBuckets: []int64{2, 1, -2, 3}, // 2 3 1 4
			CustomValues:    []float64{0.1, 0.5, 1, 5, 10},
		},
		"nhcb only +Inf bucket": {
			Schema: histogram.CustomBucketsSchema, Count: 1, Sum: math.Inf(1),
			PositiveSpans: []histogram.Span{{Offset: 0, Length: 1}}, PositiveBuckets: []int64{1},
		},
		"stale marker": {Sum: math.Float64frombits(value.StaleNaN)},
		"nan observed": {
			Schema: 1, Count: 4, Sum: math.NaN(),
			PositiveSpans: []histogram.Span{{Offset: 0, Length: 1}}, PositiveBuckets: []int64{3},
		},
	}
	for name, h := range hs {
		require.NoError(t, h.Validate(), name)
	}
	return hs
}

// testFloatHistograms are the integer ones as float histograms plus ones
// with fractional counts.
func testFloatHistograms(t testing.TB) map[string]*histogram.FloatHistogram {
	fhs := map[string]*histogram.FloatHistogram{}
	for name, h := range testHistograms(t) {
		fhs[name] = h.ToFloat(nil)
	}
	fhs["fractional"] = &histogram.FloatHistogram{
		CounterResetHint: histogram.GaugeType,
		Schema:           2, ZeroThreshold: 1e-9, ZeroCount: 0.25, Count: 3.75, Sum: 1e300,
		PositiveSpans:   []histogram.Span{{Offset: 5, Length: 2}},
		PositiveBuckets: []float64{1.5, 0.5},
		NegativeSpans:   []histogram.Span{{Offset: -5, Length: 1}, {Offset: 0, Length: 1}},
		NegativeBuckets: []float64{1, 0.5},
	}
	fhs["nhcb fractional"] = &histogram.FloatHistogram{
		Schema: histogram.CustomBucketsSchema, Count: 0.5, Sum: 0.125,
		PositiveSpans: []histogram.Span{{Offset: 1, Length: 1}}, PositiveBuckets: []float64{0.5},
		CustomValues: []float64{-1, 0, 1},
	}
	for name, fh := range fhs {
		require.NoError(t, fh.Validate(), name)
	}
	return fhs
}

// requireHistogram compares every field of two integer histograms; floats by
// bits (so NaN and -0 compare exactly), empty and nil slices alike.
func requireHistogram(t *testing.T, want, got *histogram.Histogram, msgAndArgs ...any) {
	t.Helper()
	require.NotNil(t, got, msgAndArgs...)
	require.Equal(t, want.CounterResetHint, got.CounterResetHint, msgAndArgs...)
	require.Equal(t, want.Schema, got.Schema, msgAndArgs...)
	require.Equal(t, bitsOf(want.ZeroThreshold), bitsOf(got.ZeroThreshold), msgAndArgs...)
	require.Equal(t, want.ZeroCount, got.ZeroCount, msgAndArgs...)
	require.Equal(t, want.Count, got.Count, msgAndArgs...)
	require.Equal(t, bitsOf(want.Sum), bitsOf(got.Sum), msgAndArgs...)
	require.Equal(t, nonNil(want.PositiveSpans), nonNil(got.PositiveSpans), msgAndArgs...)
	require.Equal(t, nonNil(want.NegativeSpans), nonNil(got.NegativeSpans), msgAndArgs...)
	require.Equal(t, nonNil(want.PositiveBuckets), nonNil(got.PositiveBuckets), msgAndArgs...)
	require.Equal(t, nonNil(want.NegativeBuckets), nonNil(got.NegativeBuckets), msgAndArgs...)
	require.Equal(t, bitsOf(want.CustomValues...), bitsOf(got.CustomValues...), msgAndArgs...)
}

// requireFloatHistogram is requireHistogram for float histograms.
func requireFloatHistogram(t *testing.T, want, got *histogram.FloatHistogram, msgAndArgs ...any) {
	t.Helper()
	require.NotNil(t, got, msgAndArgs...)
	require.Equal(t, want.CounterResetHint, got.CounterResetHint, msgAndArgs...)
	require.Equal(t, want.Schema, got.Schema, msgAndArgs...)
	require.Equal(t, bitsOf(want.ZeroThreshold), bitsOf(got.ZeroThreshold), msgAndArgs...)
	require.Equal(t, bitsOf(want.ZeroCount), bitsOf(got.ZeroCount), msgAndArgs...)
	require.Equal(t, bitsOf(want.Count), bitsOf(got.Count), msgAndArgs...)
	require.Equal(t, bitsOf(want.Sum), bitsOf(got.Sum), msgAndArgs...)
	require.Equal(t, nonNil(want.PositiveSpans), nonNil(got.PositiveSpans), msgAndArgs...)
	require.Equal(t, nonNil(want.NegativeSpans), nonNil(got.NegativeSpans), msgAndArgs...)
	require.Equal(t, bitsOf(want.PositiveBuckets...), bitsOf(got.PositiveBuckets...), msgAndArgs...)
	require.Equal(t, bitsOf(want.NegativeBuckets...), bitsOf(got.NegativeBuckets...), msgAndArgs...)
	require.Equal(t, bitsOf(want.CustomValues...), bitsOf(got.CustomValues...), msgAndArgs...)
}

func bitsOf(vs ...float64) []uint64 {
	out := []uint64{}
	for _, v := range vs {
		out = append(out, math.Float64bits(v))
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func TestHistogramValueRoundTrip(t *testing.T) {
	for name, h := range testHistograms(t) {
		b := codec.AppendHistogramValue([]byte("pre"), h)
		require.Equal(t, "pre", string(b[:3]), name)
		got, err := codec.DecodeHistogramValue(b[3:])
		require.NoError(t, err, name)
		requireHistogram(t, h, got, name)
	}
	for name, fh := range testFloatHistograms(t) {
		b := codec.AppendFloatHistogramValue([]byte("pre"), fh)
		require.Equal(t, "pre", string(b[:3]), name)
		got, err := codec.DecodeFloatHistogramValue(b[3:])
		require.NoError(t, err, name)
		requireFloatHistogram(t, fh, got, name)
	}
}

// TestHistogramValueGolden pins the worked examples of
// docs/histogram-encoding.md.
func TestHistogramValueGolden(t *testing.T) {
	exp := &histogram.Histogram{
		CounterResetHint: histogram.NotCounterReset,
		Schema:           3, ZeroThreshold: 0.001, ZeroCount: 1, Count: 5, Sum: 12.5,
		PositiveSpans:   []histogram.Span{{Offset: -1, Length: 2}},
		PositiveBuckets: []int64{1, 2},
	}
	require.Equal(t, "01"+"02"+"06"+"05"+"4029000000000000"+ // version, hint, schema, count, sum
		"3f50624dd2f1a9fc"+"01"+ // zero threshold, zero count
		"01"+"01"+"02"+"02"+"02"+"04"+ // positive spans, deltas
		"00"+"00", // negative spans, deltas
		hexOf(codec.AppendHistogramValue(nil, exp)))
	require.Equal(t, "01"+"02"+"06"+"4014000000000000"+"4029000000000000"+
		"3f50624dd2f1a9fc"+"3ff0000000000000"+
		"01"+"01"+"02"+"02"+"3ff0000000000000"+"4008000000000000"+
		"00"+"00",
		hexOf(codec.AppendFloatHistogramValue(nil, exp.ToFloat(nil))))
	nhcb := &histogram.Histogram{
		Schema: histogram.CustomBucketsSchema, Count: 4, Sum: 2.5,
		PositiveSpans:   []histogram.Span{{Offset: 0, Length: 3}},
		PositiveBuckets: []int64{2, -1, 0},
		CustomValues:    []float64{0.5, 1},
	}
	require.Equal(t, "01"+"00"+"69"+"04"+"4004000000000000"+ // no zero bucket for schema -53
		"01"+"00"+"03"+"03"+"04"+"01"+"00"+ // positive spans, deltas
		"02"+"3fe0000000000000"+"3ff0000000000000", // custom values instead of the negative side
		hexOf(codec.AppendHistogramValue(nil, nhcb)))
}

func TestHistogramValueRejects(t *testing.T) {
	// A span at bucket index -2^31, valid before Prometheus 3.16, is
	// not now: stored by an older adapter, it reads as undecodable.
	below := &histogram.Histogram{Count: 1, PositiveSpans: []histogram.Span{{Offset: math.MinInt32, Length: 1}}, PositiveBuckets: []int64{1}}
	_, err := codec.DecodeHistogramValue(codec.AppendHistogramValue(nil, below))
	require.ErrorContains(t, err, "bucket index is out of range")
	_, err = codec.DecodeFloatHistogramValue(codec.AppendFloatHistogramValue(nil, below.ToFloat(nil)))
	require.ErrorContains(t, err, "bucket index is out of range")

	valid := codec.AppendHistogramValue(nil, testHistograms(t)["schema 0 both sides"])
	for n := range len(valid) {
		_, err := codec.DecodeHistogramValue(valid[:n])
		require.Error(t, err, "truncated to %d bytes", n)
	}
	validFloat := codec.AppendFloatHistogramValue(nil, testFloatHistograms(t)["fractional"])
	for n := range len(validFloat) {
		_, err := codec.DecodeFloatHistogramValue(validFloat[:n])
		require.Error(t, err, "truncated to %d bytes", n)
	}
	for _, tc := range []struct{ name, hex, err string }{
		{"unknown version", "020000000000000000000000000000000000000000", "unknown version 2"},
		{"unknown hint", "010400" + "00" + "0000000000000000" + "0000000000000000" + "00" + "00" + "00" + "00" + "00", "unknown counter reset hint 4"},
		{"trailing byte", "010000" + "00" + "0000000000000000" + "0000000000000000" + "00" + "00" + "00" + "00" + "00" + "00", "1 trailing bytes"},
		{"padded varint", "010000" + "8000" + "0000000000000000" + "0000000000000000" + "00" + "00" + "00" + "00" + "00", "not minimal"},
		{"varint overflow", "010000" + "ffffffffffffffffff7f", "overflows 64 bits"},
		{"schema beyond int32", "0100" + "8080808020", "overflows 32 bits"},
		{"invalid schema", "010012" + "00" + "0000000000000000" + "0000000000000000" + "00" + "00" + "00" + "00" + "00", "invalid schema"},
		{"span count too big", "010000" + "00" + "0000000000000000" + "0000000000000000" + "00" + "ffffffff0f", "does not fit"},
		{"span length beyond uint32", "010000" + "00" + "0000000000000000" + "0000000000000000" + "00" + "01" + "00" + "8080808010" + "00" + "00" + "00", "overflows 32 bits"},
		{"spans and buckets disagree", "010000" + "01" + "0000000000000000" + "0000000000000000" + "00" + "01" + "00" + "02" + "01" + "02" + "00" + "00", "spans need 2 buckets, have 1"},
		{"count mismatch", "010000" + "05" + "0000000000000000" + "0000000000000000" + "00" + "01" + "00" + "01" + "01" + "02" + "00" + "00", "should equal"},
		{"negative bucket", "010000" + "00" + "0000000000000000" + "0000000000000000" + "00" + "01" + "00" + "01" + "01" + "01" + "00" + "00", "negative"},
		{"custom bounds not increasing", "0100" + "69" + "00" + "0000000000000000" + "00" + "00" + "02" + "3ff0000000000000" + "3ff0000000000000", "strictly increasing"},
	} {
		_, err := codec.DecodeHistogramValue(unhexT(t, tc.hex))
		require.ErrorContains(t, err, tc.err, tc.name)
	}
	_, err = codec.DecodeFloatHistogramValue(unhexT(t, "010000"+"bff0000000000000"+"0000000000000000"+"0000000000000000"+"0000000000000000"+"00"+"00"+"00"+"00"))
	require.ErrorContains(t, err, "negative", "float histogram with a negative count")
}

func unhexT(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

// FuzzHistogramValue: decoding never panics, and whatever decodes is the
// canonical encoding of its histogram: encoding it again gives the same
// bytes.
func FuzzHistogramValue(f *testing.F) {
	for _, h := range testHistograms(f) {
		f.Add(codec.AppendHistogramValue(nil, h))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := codec.DecodeHistogramValue(b)
		if err != nil {
			return
		}
		require.NoError(t, h.Validate())
		require.Equal(t, b, codec.AppendHistogramValue(nil, h))
	})
}

// FuzzFloatHistogramValue is FuzzHistogramValue for float histograms.
func FuzzFloatHistogramValue(f *testing.F) {
	for _, fh := range testFloatHistograms(f) {
		f.Add(codec.AppendFloatHistogramValue(nil, fh))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fh, err := codec.DecodeFloatHistogramValue(b)
		if err != nil {
			return
		}
		require.NoError(t, fh.Validate())
		require.Equal(t, b, codec.AppendFloatHistogramValue(nil, fh))
	})
}

// point is one sample read back: a float (V as bits), or a histogram.
type point struct {
	T  int64
	V  uint64
	H  *histogram.Histogram
	FH *histogram.FloatHistogram
}

type pointSeries struct {
	Labels labels.Labels
	Points []point
}

// readPoints reads every sample type through Querier.Select.
func readPoints(t *testing.T, s *ks.Store, start, end int64, ms ...*labels.Matcher) []pointSeries {
	t.Helper()
	q, err := s.Querier(start, end)
	require.NoError(t, err)
	set := q.Select(context.Background(), true, nil, ms...)
	var out []pointSeries
	var it chunkenc.Iterator
	for set.Next() {
		sr := set.At()
		it = sr.Iterator(it)
		ps := pointSeries{Labels: sr.Labels()}
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			switch vt {
			case chunkenc.ValFloat:
				ts, v := it.At()
				ps.Points = append(ps.Points, point{T: ts, V: math.Float64bits(v)})
			case chunkenc.ValHistogram:
				ts, h := it.AtHistogram(nil)
				ps.Points = append(ps.Points, point{T: ts, H: h})
			case chunkenc.ValFloatHistogram:
				ts, fh := it.AtFloatHistogram(nil)
				ps.Points = append(ps.Points, point{T: ts, FH: fh})
			}
		}
		require.NoError(t, it.Err())
		if len(ps.Points) == 0 {
			continue // rows in the range, no sample: as the engine, skipped
		}
		out = append(out, ps)
	}
	require.NoError(t, set.Err())
	return out
}

func requirePoints(t *testing.T, want, got []point, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	for i := range want {
		w, g := want[i], got[i]
		require.Equal(t, w.T, g.T, "%s: point %d", msg, i)
		switch {
		case w.H != nil:
			requireHistogram(t, w.H, g.H, "%s: point %d at %d", msg, i, w.T)
		case w.FH != nil:
			requireFloatHistogram(t, w.FH, g.FH, "%s: point %d at %d", msg, i, w.T)
		default:
			require.Nil(t, g.H, "%s: point %d", msg, i)
			require.Nil(t, g.FH, "%s: point %d", msg, i)
			require.Equal(t, w.V, g.V, "%s: point %d", msg, i)
		}
	}
}

func appendPoints(t *testing.T, app *ks.Appender, ls labels.Labels, ps []point) {
	t.Helper()
	for _, p := range ps {
		if p.H != nil || p.FH != nil {
			require.NoError(t, errOf(app.AppendHistogram(0, ls, p.T, p.H, p.FH)))
		} else {
			require.NoError(t, errOf(app.Append(0, ls, p.T, math.Float64frombits(p.V))))
		}
	}
}

// TestHistogramWriteRead stores integer and float histograms of every kind
// across row windows and reads every field back through Querier.Select.
func TestHistogramWriteRead(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		s := openStore(t, eng, ks.Options{})
		names := []string{"schema 0 both sides", "schema -4 reset", "schema 8 huge", "gauge", "empty", "nhcb", "nhcb only +Inf bucket", "stale marker", "nan observed"}
		hs, fhs := testHistograms(t), testFloatHistograms(t)
		intSeries := labels.FromStrings("__name__", "latency_seconds", "job", "api")
		floatSeries := labels.FromStrings("__name__", "latency_seconds", "job", "db:1")
		var intPoints, floatPoints []point
		for i, name := range append(names, "fractional", "nhcb fractional") {
			ts := int64(i) * 25 * 60 * 1000 // several row windows of an hour
			if h := hs[name]; h != nil {
				intPoints = append(intPoints, point{T: ts, H: h})
			}
			floatPoints = append(floatPoints, point{T: ts + 1, FH: fhs[name]})
		}
		app := s.NewAppender()
		appendPoints(t, app, intSeries, intPoints)
		appendPoints(t, app, floatSeries, floatPoints)
		require.NoError(t, app.Commit(context.Background()))

		got := readPoints(t, s, 0, 6*hour, eq("__name__", "latency_seconds"))
		require.Len(t, got, 2)
		require.Equal(t, intSeries, got[0].Labels)
		requirePoints(t, intPoints, got[0].Points, "integer histograms")
		require.Equal(t, floatSeries, got[1].Labels)
		requirePoints(t, floatPoints, got[1].Points, "float histograms")

		// A range inside the data cuts at exact bounds.
		start, end := intPoints[2].T, floatPoints[5].T
		got = readPoints(t, s, start, end, eq("__name__", "latency_seconds"), eq("job", "api"))
		require.Len(t, got, 1)
		requirePoints(t, intPoints[2:6], got[0].Points, "integer histograms in range")
	})
}

// TestHistogramMixedSeries: a series that switches between floats and
// histograms reads back in time order with each sample's type, including
// both forms of stale marker (a float StaleNaN and a histogram with a
// StaleNaN sum).
func TestHistogramMixedSeries(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		s := openStore(t, eng, ks.Options{})
		hs, fhs := testHistograms(t), testFloatHistograms(t)
		ls := labels.FromStrings("__name__", "requests", "instance", "a")
		want := []point{
			{T: 10, V: bits(1)},
			{T: 20, V: bits(2)},
			{T: 30, H: hs["schema 0 both sides"]},
			{T: 40, H: hs["nhcb"]},
			{T: 50, V: value.StaleNaN}, // float stale marker after histograms
			{T: hour + 10, FH: fhs["fractional"]},
			{T: hour + 20, H: hs["stale marker"]},
			{T: hour + 30, V: bits(math.Inf(1))},
			{T: 2*hour + 5, H: hs["gauge"]},
			{T: 2*hour + 6, V: bits(3)},
		}
		// Appended out of order and over two requests: the reader sorts.
		app := s.NewAppender()
		appendPoints(t, app, ls, want[5:])
		require.NoError(t, app.Commit(context.Background()))
		app = s.NewAppender()
		appendPoints(t, app, ls, want[:5])
		require.NoError(t, app.Commit(context.Background()))

		got := readPoints(t, s, 0, 3*hour, eq("__name__", "requests"))
		require.Len(t, got, 1)
		requirePoints(t, want, got[0].Points, "mixed series")
		require.True(t, value.IsStaleNaN(math.Float64frombits(got[0].Points[4].V)))
		require.True(t, value.IsStaleNaN(got[0].Points[6].H.Sum))

		// Seek lands on samples of each type.
		q, err := s.Querier(0, 3*hour)
		require.NoError(t, err)
		set := q.Select(context.Background(), true, nil, eq("__name__", "requests"))
		require.True(t, set.Next())
		it := set.At().Iterator(nil)
		require.Equal(t, chunkenc.ValHistogram, it.Seek(25))
		require.Equal(t, int64(30), it.AtT())
		require.Equal(t, chunkenc.ValHistogram, it.Seek(30), "Seek to the current sample stays")
		require.Equal(t, chunkenc.ValFloat, it.Seek(41))
		require.Equal(t, chunkenc.ValFloatHistogram, it.Seek(hour))
		require.Equal(t, chunkenc.ValHistogram, it.Next())
		require.Equal(t, chunkenc.ValFloat, it.Next())
		require.Equal(t, chunkenc.ValNone, it.Seek(4*hour))
		require.False(t, set.Next())
		require.NoError(t, set.Err())
	})
}

// TestHistogramIteratorCopies: the iterator hands out copies, fills the
// object passed in, and converts integer histograms for AtFloatHistogram,
// as chunkenc.Iterator says.
func TestHistogramIteratorCopies(t *testing.T) {
	s := openStore(t, openPebble(t), ks.Options{})
	h := testHistograms(t)["schema 0 both sides"]
	ls := labels.FromStrings("__name__", "h")
	app := s.NewAppender()
	require.NoError(t, errOf(app.AppendHistogram(0, ls, 5, h, nil)))
	require.NoError(t, app.Commit(context.Background()))

	q, err := s.Querier(0, 10)
	require.NoError(t, err)
	set := q.Select(context.Background(), true, nil, eq("__name__", "h"))
	require.True(t, set.Next())
	series := set.At()

	it := series.Iterator(nil)
	require.Equal(t, chunkenc.ValHistogram, it.Next())
	_, got := it.AtHistogram(nil)
	got.PositiveBuckets[0] = 99
	got.PositiveSpans[0].Length = 7
	dst := &histogram.Histogram{PositiveBuckets: make([]int64, 10)}
	ts, filled := it.AtHistogram(dst)
	require.Equal(t, int64(5), ts)
	require.Same(t, dst, filled, "the passed-in histogram is filled")
	requireHistogram(t, h, filled, "a changed copy leaves the series intact")

	ts, fh := it.AtFloatHistogram(nil)
	require.Equal(t, int64(5), ts)
	requireFloatHistogram(t, h.ToFloat(nil), fh)
	fdst := &histogram.FloatHistogram{}
	_, ffilled := it.AtFloatHistogram(fdst)
	require.Same(t, fdst, ffilled)
	require.Equal(t, chunkenc.ValNone, it.Next())

	// The series can be iterated again after its histograms were changed.
	it = series.Iterator(it)
	require.Equal(t, chunkenc.ValHistogram, it.Next())
	_, again := it.AtHistogram(nil)
	requireHistogram(t, h, again)
}

// TestHistogramChunks: the streamed remote-read path encodes the series
// into Prometheus chunks (storage.NewSeriesSetToChunkSet); every sample
// comes back out of them.
func TestHistogramChunks(t *testing.T) {
	s := openStore(t, openPebble(t), ks.Options{})
	hs, fhs := testHistograms(t), testFloatHistograms(t)
	ls := labels.FromStrings("__name__", "c")
	want := []point{
		{T: 1, V: bits(1)},
		{T: 2, H: hs["schema 0 both sides"]},
		{T: 3, H: hs["nhcb"]},
		{T: 4, H: hs["stale marker"]},
		{T: 5, FH: fhs["fractional"]},
		{T: 6, V: value.StaleNaN},
	}
	app := s.NewAppender()
	appendPoints(t, app, ls, want)
	require.NoError(t, app.Commit(context.Background()))

	q, err := s.Querier(0, 10)
	require.NoError(t, err)
	cs := storage.NewSeriesSetToChunkSet(q.Select(context.Background(), true, nil, eq("__name__", "c")))
	require.True(t, cs.Next())
	var got []point
	chunks := cs.At().Iterator(nil)
	for chunks.Next() {
		it := chunks.At().Chunk.Iterator(nil)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			switch vt {
			case chunkenc.ValFloat:
				ts, v := it.At()
				got = append(got, point{T: ts, V: math.Float64bits(v)})
			case chunkenc.ValHistogram:
				ts, h := it.AtHistogram(nil)
				got = append(got, point{T: ts, H: h})
			case chunkenc.ValFloatHistogram:
				ts, fh := it.AtFloatHistogram(nil)
				got = append(got, point{T: ts, FH: fh})
			}
		}
		require.NoError(t, it.Err())
	}
	require.NoError(t, chunks.Err())
	require.False(t, cs.Next())
	require.NoError(t, cs.Err())
	// Chunks keep a reset hint per chunk, not per sample: compare the rest.
	for i := range got {
		if got[i].H != nil {
			got[i].H.CounterResetHint = want[i].H.CounterResetHint
		}
		if got[i].FH != nil {
			got[i].FH.CounterResetHint = want[i].FH.CounterResetHint
		}
	}
	requirePoints(t, want, got, "through chunks")
}

// TestHistogramInvalid: what Prometheus would refuse is refused with 400
// and nothing of it is stored.
func TestHistogramInvalid(t *testing.T) {
	s := openStore(t, openPebble(t), ks.Options{})
	ls := labels.FromStrings("__name__", "bad")
	good := testHistograms(t)["schema 0 both sides"]
	for _, tc := range []struct {
		name string
		h    *histogram.Histogram
		fh   *histogram.FloatHistogram
	}{
		{"neither", nil, nil},
		{"both", good, good.ToFloat(nil)},
		{"schema 9 not reduced", &histogram.Histogram{Schema: 9}, nil},
		{"unknown schema", nil, &histogram.FloatHistogram{Schema: -5}},
		{"spans and buckets disagree", &histogram.Histogram{PositiveSpans: []histogram.Span{{Length: 2}}, PositiveBuckets: []int64{1}, Count: 1}, nil},
		{"count mismatch", &histogram.Histogram{PositiveSpans: []histogram.Span{{Length: 1}}, PositiveBuckets: []int64{1}, Count: 2, Sum: 1}, nil},
		{"custom values with exponential schema", &histogram.Histogram{CustomValues: []float64{1}}, nil},
		{"nhcb with negative buckets", nil, &histogram.FloatHistogram{Schema: -53, NegativeSpans: []histogram.Span{{Length: 1}}, NegativeBuckets: []float64{1}, Count: 1}},
	} {
		app := s.NewAppender()
		err := errOf(app.AppendHistogram(0, ls, 1, tc.h, tc.fh))
		requireInvalid(t, err, tc.name)
		require.NoError(t, app.Commit(context.Background()))
	}
	app := s.NewAppender()
	requireInvalid(t, errOf(app.AppendHistogram(0, labels.FromStrings("job", "no name"), 1, good, nil)), "series without a name")
	require.NoError(t, app.Commit(context.Background()))
	require.Empty(t, readPoints(t, s, 0, 10, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".*")))
}

// requireInvalid checks err is one the edges answer 400 (adapter's statusOf).
func requireInvalid(t *testing.T, err error, msg string) {
	t.Helper()
	require.Error(t, err, msg)
	require.ErrorIs(t, err, storeerr.ErrInvalid, msg)
}

// TestHistogramsInvisibleToFloatMetrics: everything KairosDB reads to query
// a float metric (row_key_time_index, row_keys, tag_indexed_row_keys,
// row_key_index; §7.2-7.4, §6.3) holds only KairosDB's own types, however
// many histograms and exemplars the keyspace holds for other metrics and
// for the float series itself. Our own read of the float metric is
// unaffected as well.
func TestHistogramsInvisibleToFloatMetrics(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		// Every metric tag-indexed, so tag_indexed_row_keys is written too.
		s := openStore(t, eng, ks.Options{TagIndexed: map[string][]string{"*": nil}})
		hs := testHistograms(t)
		up := labels.FromStrings("__name__", "up", "job", "api")
		app := s.NewAppender()
		for i := range int64(4) {
			ts := i * 40 * 60 * 1000
			require.NoError(t, errOf(app.Append(0, up, ts, float64(i))))
			require.NoError(t, errOf(app.AppendExemplar(0, up, exemplarAt(ts, "trace_id", "t1"))))
			require.NoError(t, errOf(app.AppendHistogram(0, labels.FromStrings("__name__", "latency", "job", "api"), ts, hs["nhcb"], nil)))
			require.NoError(t, errOf(app.AppendHistogram(0, labels.FromStrings("__name__", "latency_f", "job", "api"), ts, nil, hs["schema 0 both sides"].ToFloat(nil))))
		}
		require.NoError(t, errOf(app.Append(0, up, 3*hour, math.Float64frombits(value.StaleNaN))))
		require.NoError(t, app.Commit(ctx))

		// Not even null rows: KairosDB's aggregators fail on a NullDataPoint,
		// so the stale marker is indexed under the side metric.
		kairosTypes := map[string]bool{codec.TypeDouble: true}
		rowTimesOf := func(metric string) []int64 {
			var rowTimes []int64
			require.NoError(t, eng.RowTimes(ctx, metric, math.MinInt64, math.MaxInt64, func(rt int64) error {
				rowTimes = append(rowTimes, rt)
				return nil
			}))
			return rowTimes
		}
		rowTimes := rowTimesOf("up")
		// 3h too: the stale marker indexes the series' kairos_double row
		// of its window, which holds no cell (write.go appendFloat).
		require.Equal(t, []int64{0, hour, 2 * hour, 3 * hour}, rowTimes)
		require.Equal(t, []int64{3 * hour}, rowTimesOf("up"+ks.NonFiniteSuffix))
		types := map[string]bool{}
		for _, rt := range rowTimes {
			require.NoError(t, eng.RowKeys(ctx, "up", rt, func(dataType string, _ []codec.Tag) error {
				types[dataType] = true
				return nil
			}))
			require.NoError(t, eng.TagIndexedRowKeys(ctx, "up", rt, "job=api", func(dataType string, _ []codec.Tag) error {
				types[dataType] = true
				return nil
			}))
		}
		for dt := range types {
			require.True(t, kairosTypes[dt], "KairosDB would fail on data type %q of a float metric", dt)
		}
		require.NoError(t, eng.LegacyRowKeys(ctx, "up", nil, []byte{0xff}, func(k []byte) error {
			t.Errorf("unexpected row_key_index entry %x", k)
			return nil
		}))

		got := readPoints(t, s, 0, 4*hour, eq("__name__", "up"))
		require.Len(t, got, 1)
		requirePoints(t, []point{
			{T: 0, V: bits(0)}, {T: 40 * 60 * 1000, V: bits(1)}, {T: 80 * 60 * 1000, V: bits(2)}, {T: 120 * 60 * 1000, V: bits(3)}, {T: 3 * hour, V: value.StaleNaN},
		}, got[0].Points, "float metric")
	})
}
