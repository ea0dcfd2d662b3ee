package e2e

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"
)

// TestQueryAPITrust sends the queries that took the process down or held
// it past its limits, as a Grafana user or an attacker could: each is
// refused or answered by its deadline, the process serves on, its CPU stops
// within a second of the deadline, and its peak RSS stays within a bound.
// Prometheus itself dies on the first (its engine allocates per subquery
// step), so the limits, not a Prometheus answer, are the reference here.
func TestQueryAPITrust(t *testing.T) {
	// With the admin API and rollups as by default: the hostile ranges
	// and deletes below need them.
	a := startAdapter(t, "", append(embeddedStorage(t.TempDir()), "--query.timeout=15s", "--query.max-concurrency=4", "--web.enable-admin-api", "--rollup.resolutions=5m,1h,6h"))
	// 100 series of 6 hours at 15 s: 144,000 samples.
	end := time.Now().Truncate(time.Hour)
	for b := range 5 {
		var batch []series
		for i := b * 20; i < (b+1)*20; i++ {
			s := series{Labels: labels.FromStrings("__name__", "trust_total", "i", strconv.Itoa(i))}
			for k := range 6 * 240 {
				s.Samples = append(s.Samples, sample{end.Add(-6*time.Hour).UnixMilli() + int64(k)*15_000, math.Float64bits(float64(k * (i + 1)))})
			}
			batch = append(batch, s)
		}
		mustWrite(t, a, false, batch)
	}
	mustWrite(t, a, false, hostileSeries(end))
	at := strconv.FormatInt(end.Unix(), 10)
	pid := a.cmd.Process.Pid

	requireHostileRangesBounded(t, a, end)
	requireRefusedDeletesDeleteNothing(t, a)

	refused := []struct {
		name, path string
		form       url.Values
		flag       string
	}{
		{"1y of 1ms steps", "/api/v1/query", url.Values{"query": {`count_over_time(vector(1)[1y:1ms])`}}, "--query.max-subquery-steps"},
		{"7d of 1ms steps, timeout 2s", "/api/v1/query", url.Values{"query": {`rate(trust_total[7d:1ms])`}, "timeout": {"2s"}}, "--query.max-subquery-steps"},
		{"100,000 nested brackets, timeout 5s", "/api/v1/query", url.Values{"query": {strings.Repeat("(", 100_000) + "1" + strings.Repeat(")", 100_000)}, "timeout": {"5s"}}, "--query.max-length"},
		{"2,400-term sum formatted", "/api/v1/format_query", url.Values{"query": {strings.Repeat("trust_total+", 2399) + "trust_total"}}, "--query.max-depth"},
		{"2,400 nested brackets formatted", "/api/v1/format_query", url.Values{"query": {strings.Repeat("(", 2400) + "x" + strings.Repeat(")", 2400)}}, "--query.max-depth"},
		{"2,400 nested brackets parsed", "/api/v1/parse_query", url.Values{"query": {strings.Repeat("(", 2400) + "x" + strings.Repeat(")", 2400)}}, "--query.max-depth"},
		{"a 1.2 GB label", "/api/v1/query", url.Values{"query": {`label_replace(label_replace(vector(1), "a", "` + strings.Repeat("x", 60_000) + `", "", ""), "b", "` + strings.Repeat("$1", 20_000) + `", "a", "(.*)")`}}, "label_replace"},
	}
	for _, c := range refused {
		began := time.Now()
		code, body := postForm(t, a.url(c.path), c.form)
		took := time.Since(began)
		t.Logf("%s: %d in %v", c.name, code, took.Round(time.Millisecond))
		require.Equal(t, http.StatusBadRequest, code, "%s: %.300s", c.name, body)
		require.Contains(t, body, `"errorType":"bad_data"`, c.name)
		require.Contains(t, body, c.flag, c.name)
		require.Less(t, took, 2*time.Second, "%s: refused before evaluation, not after", c.name)
		requireServing(t, a)
	}

	// What dashboards send still works: a 30-day SLO subquery at 1-minute
	// resolution, over a week's range.
	code, body := postForm(t, a.url("/api/v1/query_range"), url.Values{
		"query": {`max_over_time(sum(rate(trust_total[5m]))[30d:1m])`}, "start": {strconv.FormatInt(end.Add(-7*24*time.Hour).Unix(), 10)}, "end": {at}, "step": {"3600"},
	})
	require.Equal(t, http.StatusOK, code, "%.300s", body)

	// A query within every limit that takes long: its answer comes at its
	// deadline, and the evaluation stops within a second after it.
	slow := url.Values{"query": {`max_over_time(sum(quantile_over_time(0.5, trust_total[3h]))[6h:1s])`}, "time": {at}, "timeout": {"2s"}}
	began := time.Now()
	code, body = postForm(t, a.url("/api/v1/query"), slow)
	took := time.Since(began)
	t.Logf("slow query: %d after %v: %.200s", code, took.Round(time.Millisecond), body)
	require.Equal(t, http.StatusServiceUnavailable, code, "%.300s", body)
	require.Contains(t, body, `"errorType":"timeout"`)
	require.Less(t, took, 2*time.Second+500*time.Millisecond, "answered at the deadline")
	time.Sleep(time.Second)
	cpu0 := procCPU(t, pid)
	time.Sleep(time.Second)
	spent := procCPU(t, pid) - cpu0
	t.Logf("CPU in the second after the deadline's second: %v", spent)
	require.Less(t, spent, 150*time.Millisecond, "the evaluation goes on past its deadline")
	requireServing(t, a)

	// Twenty such requests at once hold no slot the others need.
	deep := url.Values{"query": {strings.Repeat("(", 100_000) + "1" + strings.Repeat(")", 100_000)}}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { postForm(t, a.url("/api/v1/query"), deep) })
	}
	began = time.Now()
	code, body = postForm(t, a.url("/api/v1/query"), url.Values{"query": {"sum(trust_total)"}, "time": {at}})
	require.Equal(t, http.StatusOK, code, body)
	require.Less(t, time.Since(began), 2*time.Second)
	wg.Wait()

	peak := procStatusKB(t, pid, "VmHWM")
	t.Logf("adapter peak RSS %d MiB", peak>>10)
	require.Less(t, peak, int64(768<<10), "peak RSS within 768 MiB")
}

func postForm(t *testing.T, u string, form url.Values) (int, string) {
	t.Helper()
	r := request{method: http.MethodPost, path: "", contentType: "application/x-www-form-urlencoded", body: form.Encode()}
	return r.do(t, u)
}

func requireServing(t *testing.T, a *adapter) {
	t.Helper()
	require.False(t, a.exited(), "the adapter exited: %s", a.out.String())
	code, body, err := httpGet(a.url("/api/v1/query?query=vector(1)"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)
}

// procCPU is the user and system CPU time the process has used.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err := strconv.ParseInt(f[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseInt(f[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
