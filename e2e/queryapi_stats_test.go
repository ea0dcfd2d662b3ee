package e2e

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// timing is a timing of a stats answer: the one part of it that depends on
// the process rather than the query.
var timing = regexp.MustCompile(`"(evalTotalTime|resultSortTime|queryPreparationTime|innerEvalTime|execQueueTime|execTotalTime)":[-+0-9.e]+`)

// compareStats requires the adapter's answer to a query with the stats
// parameter to be Prometheus's byte for byte once the timings are zeroed:
// the same fields in the same order (data.stats.timings, data.stats.samples
// with totalQueryableSamples, samplesRead, seriesTouched (since Prometheus
// 3.16) and peakSamples), the same sample and series counts, and
// no stats without the parameter.
func compareStats(t *testing.T, prom, adapterURL string, t0 time.Time) {
	sec := func(d time.Duration) string { return strconv.FormatInt(t0.Add(d).Unix(), 10) }
	n := 0
	for _, q := range []string{`temperature`, `sum(rate(http_requests_total[5m]))`, `sum by (room) (temperature)`, `max_over_time(temperature[30m:5m])`, `vector(1)`, `nonexistent_metric`} {
		for _, st := range []string{"all", "1", ""} {
			for _, r := range []request{
				{method: http.MethodGet, path: "/api/v1/query?" + url.Values{"query": {q}, "time": {sec(0)}, "stats": {st}}.Encode()},
				{method: http.MethodGet, path: "/api/v1/query_range?" + url.Values{"query": {q}, "start": {sec(-50 * time.Minute)}, "end": {sec(0)}, "step": {"60"}, "stats": {st}}.Encode()},
			} {
				codeA, bodyA := r.do(t, prom)
				codeB, bodyB := r.do(t, adapterURL)
				require.Equal(t, http.StatusOK, codeA, bodyA)
				require.Equal(t, codeA, codeB, "%s: status", r)
				if st != "" {
					require.Contains(t, bodyA, `"stats":{"timings":{"evalTotalTime":`, "%s: Prometheus answers stats", r)
					require.Regexp(t, `"samples":\{"totalQueryableSamples":\d+,"samplesRead":\d+,"seriesTouched":\d+,"peakSamples":\d+\}`, bodyB, "%s", r)
				} else {
					require.NotContains(t, bodyB, `"stats"`, "%s", r)
				}
				require.Equal(t, timing.ReplaceAllString(bodyA, `"$1":0`), timing.ReplaceAllString(bodyB, `"$1":0`), "%s: body, timings zeroed", r)
				n++
			}
		}
	}
	t.Logf("%d answers with and without stats equal to Prometheus's, timings aside", n)
}
