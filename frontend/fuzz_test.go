package frontend

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kairos-remote/kairos-adapter/internal/promqltest"
)

// extreme matches answers holding an infinity or a value within a
// thousand-fold of float64's end, where which value a sum gives depends on
// the order of its additions (finite's doc in shard.go).
var extreme = regexp.MustCompile(`Inf"|e\+30\d"`)

// FuzzSplitAndShardMatchWhole asks any expression over any range and step
// of the test data, with any split interval and shard count, of the query
// API whole and through the frontend (twice: the second answer comes from
// the results cache), and requires the same answer: TestSplitAndShardMatchWhole
// with the expressions and ranges the fuzzer finds. Answers at float64's
// end are left out (extreme).
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
		if extreme.MatchString(want.body) {
			t.Skip("an answer at float64's end")
		}
		fe := New(whole, Options{
			SplitInterval: time.Duration(1+splitMin%120) * time.Minute, Shards: 1 + int(shards%5),
			CacheBytes: 16 << 20, Now: func() time.Time { return midnight.Add(48 * time.Hour) },
		}, prometheus.NewRegistry(), nil)
		for round := range 2 {
			got := ask(t, fe, form, nil)
			if want.code == http.StatusOK && extreme.MatchString(got.body) {
				t.Skip("an answer at float64's end")
			}
			sameAnswer(t, form.Encode()+" round "+string(rune('0'+round)), want, got)
		}
	})
}
