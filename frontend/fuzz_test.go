package frontend

import (
	"math"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/promqltest"
)

// atEnd reports whether v is not finite or within a thousand-fold of
// float64's end, where which value a sum gives depends on the order of its
// additions (finite's doc in shard.go).
func atEnd(v float64) bool {
	return math.IsInf(v, 0) || math.IsNaN(v) || math.Abs(v) > 1e305
}

// fuzzSame is sameAnswer for whatever the fuzzer sends, with the two
// answers it cannot require the same of held to what they can be:
//   - a timeout on either side (how far each got differs): it must be
//     Prometheus's timeout answer, and the other the same or a success;
//   - values at float64's end (atEnd) may differ; the status, series,
//     times, annotations and every other value must not.
func fuzzSame(t *testing.T, desc string, want, got answer) {
	t.Helper()
	if want.code == http.StatusServiceUnavailable || got.code == http.StatusServiceUnavailable {
		for _, a := range []answer{want, got} {
			if a.code != http.StatusOK {
				require.Equal(t, http.StatusServiceUnavailable, a.code, "%s: %s", desc, a.body)
				require.Contains(t, a.body, `"errorType":"timeout"`, desc)
			}
		}
		return
	}
	sameAnswerAt(t, desc, want, got, true)
}

// FuzzSplitAndShardMatchWhole asks any expression over any range and step
// of the test data, with any split interval and shard count, of the query
// API whole and through the frontend (twice: the second answer comes from
// the results cache), and requires the same answer: TestSplitAndShardMatchWhole
// with the expressions and ranges the fuzzer finds. Answers at float64's
// end may differ (fuzzSame).
func FuzzSplitAndShardMatchWhole(f *testing.F) {
	exprs, shouldFail := promqltest.ComplianceExprs()
	for _, e := range append(append(exprs, extraExprs...), shouldFail...) {
		f.Add(e, int64(5400), uint16(180), uint16(90), uint8(20), uint8(3))
	}
	store := testStore(f, nil)
	writeTestData(f, store)
	whole := queryAPI(store)
	first := midnight.Add(-2 * time.Hour)
	f.Fuzz(func(t *testing.T, q string, startSec int64, minutes, stepSec uint16, splitMin, shards uint8) {
		start := first.Add(time.Duration(uint64(startSec)%(4*3600)) * time.Second)
		end := start.Add(time.Duration(minutes%240) * time.Minute)
		step := time.Duration(1+stepSec%600) * time.Second
		if end.Sub(start)/step > 2000 {
			step = end.Sub(start) / 2000
		}
		form := rangeForm(q, start, end, step)
		want := ask(t, whole, form, nil)
		fe := New(whole, Options{
			SplitInterval: time.Duration(1+splitMin%120) * time.Minute, Shards: 1 + int(shards%5),
			CacheBytes: 16 << 20, Now: func() time.Time { return midnight.Add(48 * time.Hour) },
		}, prometheus.NewRegistry(), nil)
		for round := range 2 {
			fuzzSame(t, form.Encode()+" round "+string(rune('0'+round)), want, ask(t, fe, form, nil))
		}
	})
}

// FuzzFrontendForms sends any parameters, as text, to query_range whole and
// through the frontend: the frontend reads start, end and step itself
// before it splits, and must refuse what the query API refuses, with the
// same answer, and answer the rest the same.
func FuzzFrontendForms(f *testing.F) {
	for _, c := range [][5]string{
		{"sum(rate(http_requests_total[5m]))", "1741559400", "1741570200", "90", ""},
		{"temperature", "2025-03-09T23:00:00Z", "2025-03-10T01:00:00.5Z", "1m", "10s"},
		{"temperature", "1741570200", "1741559400", "90", ""},
		{"temperature", "1741559400", "1741570200", "0.0001", ""},
		{"temperature", "-1e300", "1e300", "NaN", "-1"},
		{"avg(temperature)", "1741559400.123456789", "1741570200", "1e-3", "1ms"},
	} {
		f.Add(c[0], c[1], c[2], c[3], c[4])
	}
	store := testStore(f, nil)
	writeTestData(f, store)
	whole := queryAPI(store)
	fe := New(whole, Options{SplitInterval: 30 * time.Minute, Shards: 3, CacheBytes: 16 << 20, Now: func() time.Time { return midnight.Add(48 * time.Hour) }},
		prometheus.NewRegistry(), nil)
	f.Fuzz(func(t *testing.T, q, start, end, step, timeout string) {
		form := url.Values{"query": {q}, "start": {start}, "end": {end}, "step": {step}}
		if timeout != "" {
			form.Set("timeout", timeout)
		}
		want := ask(t, whole, form, nil)
		fuzzSame(t, form.Encode(), want, ask(t, fe, form, nil))
	})
}
