package e2e

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// Prometheus's minimum and maximum times, which its API documents and
// clients send back, as RFC 3339 and as Unix seconds.
const (
	minTimeText = "-292273086-05-16T16:47:06Z"
	maxTimeText = "292277025-08-18T07:12:54.999999999Z"
	minTimeSecs = "-9223309901257974"
	maxTimeSecs = "9223309901257974"
)

// TestQueryAPITrustCassandra runs the hostile ranges and the refused
// deletes of TestQueryAPITrust on Cassandra.
func TestQueryAPITrustCassandra(t *testing.T) {
	addr, keyspace := cassandratest.Keyspace(t)
	a := startAdapter(t, "", append(cassandraStorage(addr, keyspace), "--web.enable-admin-api", "--rollup.resolutions=5m,1h,6h"))
	end := time.Now().Truncate(time.Hour)
	mustWrite(t, a, false, hostileSeries(end))
	requireHostileRangesBounded(t, a, end)
	requireRefusedDeletesDeleteNothing(t, a)
}

// hostileSeries are the series the hostile requests name: trust_gauge
// over the last 6 hours at 15 s, and trust_delete at times from 1900 to
// 2100, which a delete must keep unless it names them.
func hostileSeries(end time.Time) []series {
	g := series{Labels: labels.FromStrings("__name__", "trust_gauge", "job", "trust")}
	for k := range 6 * 240 {
		g.Samples = append(g.Samples, sample{end.Add(-6*time.Hour).UnixMilli() + int64(k)*15_000, math.Float64bits(float64(k))})
	}
	d := series{Labels: labels.FromStrings("__name__", "trust_delete", "job", "trust")}
	for i, ts := range []int64{-2208988800000, -1, 0, 1, end.UnixMilli() - 60_000, end.UnixMilli(), 4102444800000} {
		d.Samples = append(d.Samples, sample{ts, math.Float64bits(float64(i))})
	}
	return []series{g, d}
}

// rssWatch samples the process's resident memory every 10 ms until
// stopped, and kills the process with SIGKILL once it is more than a GiB
// over where it started: a query that grows the process without bound
// fails the test instead of taking the machine's memory (on 4f4fb57 the
// query of death grew it to 24 GB).
type rssWatch struct {
	pid    int
	baseKB int64
	mu     sync.Mutex
	peakKB int64
	killed bool
	stop   chan struct{}
	done   chan struct{}
}

func watchRSS(t *testing.T, pid int) *rssWatch {
	t.Helper()
	base, ok := rssKB(pid)
	require.True(t, ok, "no VmRSS for pid %d", pid)
	w := &rssWatch{pid: pid, baseKB: base, peakKB: base, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			kb, ok := rssKB(pid)
			if !ok {
				continue
			}
			w.mu.Lock()
			w.peakKB = max(w.peakKB, kb)
			if kb > w.baseKB+1<<20 && !w.killed {
				w.killed = true
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.close)
	return w
}

func (w *rssWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// growth is the peak resident memory over the start, and whether the
// watch killed the process.
func (w *rssWatch) growth() (kb int64, killed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peakKB - w.baseKB, w.killed
}

// rssKB is VmRSS of pid, in kB; false once the process is gone.
func rssKB(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// requireHostileRangesBounded sends the query of death of issue #33: a
// range query of a stored series between Prometheus's minimum and maximum
// times at a step of 10 days, with a timeout of 3 s, as text and as Unix
// seconds, through the frontend and around it (stats=all keeps a query
// whole), and count_over_time(x[1y]) over the same range. On 4f4fb57 the
// first answered a 503 after 6 s while the read planner went on walking
// 2·10^10 windows, and the process grew until the kernel killed it. Each
// must answer within its timeout plus a second (here: refused at once with
// Prometheus's 11,000-points answer), the process serve on, and its
// resident memory stay within 256 MiB of where it started.
func requireHostileRangesBounded(t *testing.T, a *adapter, end time.Time) {
	t.Helper()
	pid := a.cmd.Process.Pid
	watch := watchRSS(t, pid)
	for _, q := range []string{`trust_gauge`, `count_over_time(trust_gauge[1y])`, `sum(rate(trust_gauge[5m]))`} {
		for _, bounds := range [][2]string{{minTimeText, maxTimeText}, {minTimeSecs, maxTimeSecs}} {
			for _, whole := range []bool{false, true} {
				form := url.Values{"query": {q}, "start": {bounds[0]}, "end": {bounds[1]}, "step": {"864000"}, "timeout": {"3s"}}
				name := fmt.Sprintf("%s from %s to %s", q, bounds[0], bounds[1])
				if whole {
					form.Set("stats", "all")
					name += ", around the frontend"
				}
				began := time.Now()
				resp, err := http.PostForm(a.url("/api/v1/query_range"), form)
				var code int
				var body string
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					code, body = resp.StatusCode, string(b)
				}
				took := time.Since(began)
				grown, killed := watch.growth()
				t.Logf("%s: %d in %v, RSS +%d MiB: %.200s", name, code, took.Round(time.Millisecond), grown>>10, body)
				require.False(t, killed, "%s: the process grew by more than 1 GiB within %v and was killed", name, took.Round(time.Millisecond))
				require.NoError(t, err, name)
				require.Less(t, took, 4*time.Second, "%s: answered within its timeout of 3s and a second", name)
				if code != http.StatusServiceUnavailable {
					require.Equal(t, http.StatusBadRequest, code, "%s: %s", name, body)
					require.Contains(t, body, "exceeded maximum resolution of 11,000 points per timeseries", name)
				}
				requireServing(t, a)
			}
		}
	}
	// What a dashboard sends over the same data still works. Raw
	// samples: the data was written after the rollup job may have rolled
	// its hours up empty, and their recomputation is the job's business.
	code, body := postForm(t, a.url("/api/v1/query_range"), url.Values{
		"query": {`count_over_time(trust_gauge[1h])`}, "start": {strconv.FormatInt(end.Add(-6*time.Hour).Unix(), 10)},
		"end": {strconv.FormatInt(end.Unix(), 10)}, "step": {"3600"}, "max_source_resolution": {"0"},
	})
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"240"`, body)
	time.Sleep(500 * time.Millisecond)
	grown, killed := watch.growth()
	t.Logf("RSS: %d MiB at the start, peak +%d MiB", watch.baseKB>>10, grown>>10)
	require.False(t, killed)
	require.Less(t, grown, int64(256<<10), "resident memory within 256 MiB of where it started")
}

// requireRefusedDeletesDeleteNothing sends deletes of trust_delete whose
// times are no explicit finite time: each is 400 bad_data naming the
// parameter, and every sample of the series is still there. On 4f4fb57
// start=NaN answered 204 and deleted every sample. Then a delete of an
// explicit range deletes only that range.
func requireRefusedDeletesDeleteNothing(t *testing.T, a *adapter) {
	t.Helper()
	all := readQuery{Start: math.MinInt64 / 2, End: math.MaxInt64, Matchers: []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "trust_delete")}}
	before := remoteRead(t, a, prompb.ReadRequest_SAMPLES, all)[0]
	require.Len(t, before, 7, "every sample of trust_delete: %v", before)
	for _, c := range []struct{ param, value string }{
		{"start", "NaN"}, {"end", "NaN"}, {"start", "Inf"}, {"start", "+Inf"}, {"end", "-Inf"},
		{"start", "1e300"}, {"start", "-1e300"}, {"end", "1e300"}, {"end", "1e999"},
		{"start", "9223372036854775807"}, {"start", ""}, {"end", ""},
	} {
		for _, path := range []string{"/api/v1/admin/tsdb/delete_series", "/api/v1/admin/rollups/recompute"} {
			form := url.Values{"match[]": {`trust_delete`}, c.param: {c.value}}
			code, body := postForm(t, a.url(path), form)
			require.Equal(t, http.StatusBadRequest, code, "%s %s=%q: %s", path, c.param, c.value, body)
			require.Contains(t, body, `"errorType":"bad_data"`)
			require.Contains(t, body, fmt.Sprintf(`invalid parameter \"%s\"`, c.param), body)
		}
		require.Equal(t, before, remoteRead(t, a, prompb.ReadRequest_SAMPLES, all)[0], "start=%q deleted samples", c.value)
	}
	// Both given twice (in the URL and the body): refused, not the first.
	code, body := postForm(t, a.url("/api/v1/admin/tsdb/delete_series?start=0"), url.Values{"match[]": {`trust_delete`}, "start": {"NaN"}})
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Equal(t, before, remoteRead(t, a, prompb.ReadRequest_SAMPLES, all)[0])

	// -0 to 1: the samples at 0 and 1 ms go (seconds: 0 to 1000 ms).
	code, body = postForm(t, a.url("/api/v1/admin/tsdb/delete_series"), url.Values{"match[]": {`trust_delete`}, "start": {"-0"}, "end": {"0.001"}})
	require.Equal(t, http.StatusNoContent, code, body)
	after := remoteRead(t, a, prompb.ReadRequest_SAMPLES, all)[0]
	require.Len(t, after, 5, "%v", after)
	// Prometheus's bounds as text delete the rest.
	code, body = postForm(t, a.url("/api/v1/admin/tsdb/delete_series"), url.Values{"match[]": {`trust_delete`}, "start": {minTimeText}, "end": {maxTimeText}})
	require.Equal(t, http.StatusNoContent, code, body)
	require.Empty(t, remoteRead(t, a, prompb.ReadRequest_SAMPLES, all)[0])
}
