package e2e

import (
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

const (
	day  = int64(24 * time.Hour / time.Millisecond)
	week = 7 * day
	// rowWidth is the default KairosDB row width (3 weeks): samples on
	// both sides of a multiple of it are in different rows.
	rowWidth = 3 * week
)

// base is a leap day's last millisecond, a date with history in time bugs.
var base = time.Date(2024, 2, 29, 23, 59, 59, 999e6, time.UTC).UnixMilli()

// testTimestamps spread over many 3-week rows, both sides of a row boundary,
// and before the epoch.
var testTimestamps = []int64{
	-5*week - 123,
	-rowWidth - 1, -rowWidth, -rowWidth + 1,
	-1, 0, 1,
	900*rowWidth - 1, 900 * rowWidth,
	base - 1, base, base + 1,
	base + day, base + 2*day + 7,
	base + 3*week, base + 6*week + 1, base + 20*week,
}

// testValues cover what must come back bit-exact: zero, extremes, NaN with
// and without payload, infinities and the stale marker. Not -0: proto3
// (Prometheus's gogo marshallers) omits a double equal to 0, so -0 arrives as
// +0 on every remote write and read, whatever the receiver does.
var testValues = []uint64{
	math.Float64bits(1.5),
	math.Float64bits(0),
	math.Float64bits(-42.25),
	math.Float64bits(math.MaxFloat64),
	math.Float64bits(math.SmallestNonzeroFloat64),
	math.Float64bits(math.NaN()),
	0x7ff8000000000123, // a NaN with a payload
	0xfff0000000000001, // a negative signalling NaN
	math.Float64bits(math.Inf(1)),
	math.Float64bits(math.Inf(-1)),
	value.StaleNaN,
	math.Float64bits(123456789.000001),
}

// testSeries returns series whose metric names start with prefix: label
// values with the KairosDB row-key separators ':' and '=', spaces, UTF-8,
// newlines and escapes; a series with only __name__; a metric name with
// colons and one with UTF-8. Each series has a sample at every test
// timestamp, with values rotated so every series sees every value.
func testSeries(prefix string) []series {
	lsets := []labels.Labels{
		labels.FromStrings("__name__", prefix+"_tagless"),
		labels.FromStrings("__name__", prefix+"_punct", "job", "e2e",
			"colon", "a:b::c:", "equals", "k=v==", "both", "x=1:y=2", "space", " leading and trailing "),
		labels.FromStrings("__name__", prefix+"_utf8", "job", "e2e",
			"city", "Zürich", "snow", "☃ ❄", "cjk", "日本語", "emoji", "🙂"),
		labels.FromStrings("__name__", prefix+"_escapes", "job", "e2e",
			"text", "line1\nline2\r\n", "tab", "a\tb", "quote", `say "hi"`, "backslash", `C:\path\`),
		labels.FromStrings("__name__", prefix+":recording:rule", "job", "e2e", "le", "+Inf"),
		labels.FromStrings("__name__", prefix+".utf8 métric", "label.with.dots", "v", "ünïcode", "x=y"),
	}
	out := make([]series, len(lsets))
	for i, ls := range lsets {
		out[i].Labels = ls
		for j, ts := range testTimestamps {
			out[i].Samples = append(out[i].Samples, sample{T: ts, Bits: testValues[(i+j)%len(testValues)]})
		}
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		roundTrip(t, startAdapter(t, "", embeddedStorage(t.TempDir())))
	})
	t.Run("cassandra", func(t *testing.T) {
		t.Parallel()
		addr, ks := cassandratest.Keyspace(t)
		roundTrip(t, startAdapter(t, "", cassandraStorage(addr, ks)))
	})
}

func roundTrip(t *testing.T, a *adapter) {
	v1, v2 := testSeries("e2e_rt_v1"), testSeries("e2e_rt_v2")
	written := slices.Concat(v1, v2)
	minT, maxT := slices.Min(testTimestamps), slices.Max(testTimestamps)
	queries := []readQuery{
		// Everything, over a range wider than the data.
		{Start: minT - 1000, End: maxT + 1000, Matchers: []*labels.Matcher{
			mustMatcher(labels.MatchRegexp, "__name__", "e2e_rt_.*")}},
		// One series, a range within one row.
		{Start: base, End: base + 2*day + 7, Matchers: []*labels.Matcher{
			mustMatcher(labels.MatchEqual, "__name__", "e2e_rt_v1_punct"),
			mustMatcher(labels.MatchEqual, "colon", "a:b::c:")}},
		// No metric name, a negative regex, a range over several rows
		// starting before the epoch.
		{Start: -5*week - 200, End: base + 3*week, Matchers: []*labels.Matcher{
			mustMatcher(labels.MatchEqual, "job", "e2e"),
			mustMatcher(labels.MatchNotRegexp, "__name__", ".*v2.*")}},
		// != also selects series without the label; a 2 ms range.
		{Start: -1, End: 0, Matchers: []*labels.Matcher{
			mustMatcher(labels.MatchRegexp, "__name__", "e2e_rt_v2.*"),
			mustMatcher(labels.MatchNotEqual, "city", "Zürich")}},
		// Regexes are anchored and '.' matches a newline.
		{Start: minT, End: maxT, Matchers: []*labels.Matcher{
			mustMatcher(labels.MatchRegexp, "__name__", "e2e_rt_v1_escapes|e2e_rt_v2.utf8 .*"),
			mustMatcher(labels.MatchRegexp, "text", "line1.line2..|"),
		}},
		// The whole time range Prometheus uses when a query has no bounds
		// (e.g. /api/v1/series without start and end).
		{Start: math.MinInt64/1000 + 62135596801, End: math.MaxInt64/1000 - 62135596801, Matchers: []*labels.Matcher{
			mustMatcher(labels.MatchEqual, "__name__", "e2e_rt_v2_tagless")}},
	}
	checkRead := func(t *testing.T, when string) {
		t.Helper()
		for _, rt := range []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS} {
			got := remoteRead(t, a, rt, queries...)
			for i, q := range queries {
				want := expectRead(written, q)
				require.NotEmpty(t, want, "query %d selects nothing: fix the test", i)
				require.Equal(t, want, got[i], "%s: %v: query %d %v [%d, %d]", when, rt, i, q.Matchers, q.Start, q.End)
			}
		}
	}

	mustWrite(t, a, false, v1)
	mustWrite(t, a, true, v2)
	checkRead(t, "after one write")

	// Prometheus resends a batch whose answer it did not get: an identical
	// request must not add anything.
	mustWrite(t, a, false, v1)
	mustWrite(t, a, true, v2)
	checkRead(t, "after a retried write")

	t.Run("partial write", func(t *testing.T) {
		for _, v2 := range []bool{false, true} {
			name := "e2e_partial_v1"
			if v2 {
				name = "e2e_partial_v2"
			}
			valid := []series{
				{Labels: labels.FromStrings("__name__", name, "job", "e2e", "n", "1"), Samples: []sample{{T: base, Bits: math.Float64bits(1)}, {T: base + 1, Bits: value.StaleNaN}}},
				{Labels: labels.FromStrings("__name__", name, "job", "e2e", "n", "2"), Samples: []sample{{T: base, Bits: math.Float64bits(2)}}},
			}
			noName := series{Labels: labels.FromStrings("job", "e2e_no_name"), Samples: []sample{{T: base, Bits: math.Float64bits(3)}}}
			// The adapter documents (adapter.go): invalid series are
			// rejected with 400 after the valid rest is committed, and a
			// 2.0 answer confirms what was stored.
			res := remoteWrite(t, a, v2, []series{valid[0], noName, valid[1]})
			require.Equal(t, http.StatusBadRequest, res.Status, "v2=%v: %s", v2, res.Body)
			require.Contains(t, res.Body, "__name__", "the error names the problem")
			if v2 {
				require.Equal(t, countItems(valid), res.written())
			}
			for _, rt := range []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS} {
				q := readQuery{Start: base - 1, End: base + 1, Matchers: []*labels.Matcher{mustMatcher(labels.MatchEqual, "__name__", name)}}
				require.Equal(t, expectRead(valid, q), remoteRead(t, a, rt, q)[0], "v2=%v %v: the valid series", v2, rt)
				q.Matchers = []*labels.Matcher{mustMatcher(labels.MatchEqual, "job", "e2e_no_name")}
				require.Empty(t, remoteRead(t, a, rt, q)[0], "v2=%v %v: the series without a name", v2, rt)
			}
		}
	})
}
