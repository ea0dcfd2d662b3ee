package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// Timing of TestCassandraOutage.
const (
	// outageSeries is the size of the test target; with Prometheus's own
	// up/scrape_* series A scrapes outageSeries+5 series every second.
	outageSeries = 50
	// steadyFor is how long A writes through a healthy node before the
	// stop; the load is measured over its part after warmUp (A's start).
	steadyFor = 15 * time.Second
	warmUp    = 5 * time.Second
	// outageDuration is how long the node stays down (the issue asks for 60 s).
	outageDuration = 60 * time.Second
	// recoveryTimeout bounds the wait for the adapter to be ready and to
	// store again once the node serves CQL. The driver retries a host it
	// marked down only every --cassandra.reconnect-interval (1 s by default).
	recoveryTimeout = 3 * time.Minute
	// afterRecovery is how long A writes through the recovered node before
	// the compared window ends.
	afterRecovery = 5 * time.Second
	// catchUpTimeout bounds the wait for A to send its backlog.
	catchUpTimeout = 2 * time.Minute
)

// TestCassandraOutage stops the adapter's Cassandra node for outageDuration
// under a steady load from a real Prometheus, restarts it on the same data,
// and requires: only 5xx answers and a not-ready adapter during the outage,
// recovery without restarting the adapter, and every sample A scraped in the
// whole window readable through remote read afterwards, bit for bit.
func TestCassandraOutage(t *testing.T) {
	if testing.Short() {
		cassandratest.SkipUnlessCI(t, "takes over two minutes (a 60 s outage)")
	}
	promBin := envOrSkip(t, "KAIROS_TEST_PROMETHEUS", "the Prometheus server binary printed by scripts/prometheus.sh")
	node := startCassandraNode(t, nodeOptions{})

	target := httptest.NewServer(&outageTarget{})
	t.Cleanup(target.Close)
	ad := startAdapter(t, "", storageArgs{
		"--storage=cassandra",
		"--cassandra.hosts=" + node.addr,
		"--cassandra.keyspace=e2e_outage",
		"--cassandra.write-consistency=ONE",
		"--cassandra.read-consistency=ONE",
		// Short, so that writes fail fast while the node is down.
		"--cassandra.timeout=2s",
	})
	// One shard sends in WAL order (see waitSent); short backoffs make the
	// retries after the outage quick.
	promA := startPrometheus(t, promBin, "prometheus-A", fmt.Sprintf(`
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: e2e_outage
    static_configs:
      - targets: [%q]
remote_write:
  - url: %q
    queue_config:
      min_shards: 1
      max_shards: 1
      batch_send_deadline: 1s
      min_backoff: 100ms
      max_backoff: 1s
`, strings.TrimPrefix(target.URL, "http://"), ad.url("/api/v1/write")))
	began := time.Now()

	// Steady load through a healthy node.
	time.Sleep(warmUp)
	warm := time.Now()
	writtenWarm := promMetric(t, ad.url(""), "kairos_adapter_written_samples_total")
	time.Sleep(time.Until(began.Add(steadyFor)))
	written0 := promMetric(t, ad.url(""), "kairos_adapter_written_samples_total")
	steady := time.Since(warm)
	require.Greater(t, written0, writtenWarm, "A wrote nothing through the healthy node")
	load := (written0 - writtenWarm) / steady.Seconds()

	node.stopKeep(t)
	down := time.Now()
	answers0 := writeAnswers(t, ad)
	retried0 := promMetric(t, promA, "prometheus_remote_storage_samples_retried_total")

	// During the outage /-/ready must say 503, every time.
	readyPolls := 0
	for time.Since(down) < outageDuration {
		status, body, err := httpGet(ad.url("/-/ready"))
		require.NoError(t, err, "/-/ready during the outage")
		require.Equal(t, http.StatusServiceUnavailable, status, "/-/ready %.0fs into the outage: %s", time.Since(down).Seconds(), body)
		readyPolls++
		time.Sleep(time.Second)
	}
	outageAnswers := diffAnswers(writeAnswers(t, ad), answers0)
	retried := promMetric(t, promA, "prometheus_remote_storage_samples_retried_total") - retried0
	var n5xx float64
	for code, n := range outageAnswers {
		require.True(t, strings.HasPrefix(code, "5"), "the adapter answered %v remote writes with %s while Cassandra was down (all answers: %v)", n, code, outageAnswers)
		n5xx += n
	}
	require.Positive(t, n5xx, "no remote write reached the adapter during the outage")
	require.Positive(t, retried, "A retried nothing during the outage")

	node.restart(t)
	up := time.Now()
	readyAfter, storedAfter := waitRecovered(t, ad, node, up)
	time.Sleep(afterRecovery)

	// Compare a window fully in the past: everything A scraped from its
	// start up to end.
	end := time.Now().Add(-time.Second).Truncate(time.Second)
	waitCaughtUp(t, promA, end)
	caughtUp := time.Since(up)
	for _, m := range []string{
		"prometheus_remote_storage_samples_failed_total",
		"prometheus_remote_storage_samples_dropped_total",
	} {
		require.Zero(t, promMetric(t, promA, m), "%s: A gave up on samples", m)
	}

	window := end.Sub(began) + time.Minute
	fromA := promRange(t, promA, `{job="e2e_outage"}`, window, end)
	q := readQuery{Start: end.Add(-window).UnixMilli() + 1, End: end.UnixMilli(), Matchers: []*labels.Matcher{
		mustMatcher(labels.MatchEqual, "job", "e2e_outage")}}
	want := sampleLines(fromA)
	require.Greater(t, len(fromA), outageSeries, "A has too few series")
	duringOutage := 0
	for _, s := range fromA {
		for _, smp := range s.Samples {
			if smp.T >= down.UnixMilli() && smp.T <= up.UnixMilli() {
				duringOutage++
			}
		}
	}
	require.Positive(t, duringOutage, "A scraped nothing during the outage: the window tests nothing")
	for _, rt := range []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS} {
		got, stale := withoutStaleMarkers(remoteReadSeries(t, ad, rt, q)[0])
		if !slices.Equal(want, got) {
			t.Fatalf("%v: A's TSDB and the adapter differ over the window: %d samples in A, %d in the adapter; only in A (-), only in the adapter (+):\n%s",
				rt, len(want), len(got), diffLines(want, got, 40))
		}
		if rt == prompb.ReadRequest_SAMPLES && stale > 0 {
			t.Logf("the adapter also holds %d stale markers (A's query API hides them)", stale)
		}
	}

	t.Logf("load held: %.0f samples/s (%d series scraped every 1 s; %.0f samples stored in the last %.0fs before the stop)", load, len(fromA), written0-writtenWarm, steady.Seconds())
	t.Logf("outage of %v: %v write answers (%.0f 5xx, no other code); %d /-/ready polls all 503; A retried %.0f samples",
		outageDuration, outageAnswers, n5xx, readyPolls, retried)
	t.Logf("recovery after the node served CQL again: /-/ready 200 after %.1fs, first stored write after %.1fs, A caught up after %.1fs",
		readyAfter.Seconds(), storedAfter.Seconds(), caughtUp.Seconds())
	t.Logf("compared %d samples of %d series, %d of them scraped during the outage: identical", len(want), len(fromA), duringOutage)
}

// outageTarget serves outageSeries gauges whose values change with every
// scrape.
type outageTarget struct{ scrapes atomic.Int64 }

func (s *outageTarget) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n := s.scrapes.Add(1)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	var sb strings.Builder
	sb.WriteString("# TYPE e2e_outage_value gauge\n")
	for i := range outageSeries {
		fmt.Fprintf(&sb, "e2e_outage_value{i=\"%d\"} %g\n", i, float64(n*int64(i+1))+0.25)
	}
	_, _ = w.Write([]byte(sb.String()))
}

// waitRecovered waits until the adapter is ready and has stored a sample
// again after up, the moment the node served CQL again, and returns how long
// each took. It fails, describing what the adapter did, after
// recoveryTimeout.
func waitRecovered(t *testing.T, ad *adapter, node *cassandraNode, up time.Time) (ready, stored time.Duration) {
	t.Helper()
	written := promMetric(t, ad.url(""), "kairos_adapter_written_samples_total")
	var last string
	for time.Since(up) < recoveryTimeout {
		status, body, err := httpGet(ad.url("/-/ready"))
		if ready == 0 && err == nil && status == http.StatusOK {
			ready = time.Since(up)
		}
		last = fmt.Sprintf("/-/ready: %d %q %v", status, strings.TrimSpace(body), err)
		if stored == 0 && promMetric(t, ad.url(""), "kairos_adapter_written_samples_total") > written {
			stored = time.Since(up)
		}
		if ready > 0 && stored > 0 {
			return ready, stored
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("the adapter did not recover within %v of the node serving CQL again (ready after %v, stored after %v; 0 = never); last %s; write answers so far %v\nnode log tail:\n%s\nadapter output:\n%s",
		recoveryTimeout, ready, stored, last, writeAnswers(t, ad), node.nodeLogTail(), ad.out.String())
	return 0, 0
}

// waitCaughtUp waits until A has sent every sample up to end: with one
// shard samples leave in WAL order, so a sent sample newer than end means
// all older ones were confirmed.
func waitCaughtUp(t *testing.T, prom string, end time.Time) {
	t.Helper()
	deadline := time.Now().Add(catchUpTimeout)
	for {
		sent := promMetric(t, prom, "prometheus_remote_storage_queue_highest_sent_timestamp_seconds")
		if sent >= float64(end.Unix()+1) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("A sent samples only up to %v after %v; want past %v", time.Unix(int64(sent), 0), catchUpTimeout, end)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

var writeCountLine = regexp.MustCompile(`^kairos_adapter_request_duration_seconds_count\{code="([^"]+)",handler="write"\} (\S+)$`)

// writeAnswers returns how many remote writes the adapter answered with
// each status code, from its own /metrics.
func writeAnswers(t *testing.T, ad *adapter) map[string]float64 {
	t.Helper()
	status, body, err := httpGet(ad.url("/metrics"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if m := writeCountLine.FindStringSubmatch(line); m != nil {
			v, err := strconv.ParseFloat(m[2], 64)
			require.NoError(t, err, line)
			out[m[1]] = v
		}
	}
	return out
}

// diffAnswers returns the answers of now that were not in before, by code.
func diffAnswers(now, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for code, n := range now {
		if d := n - before[code]; d > 0 {
			out[code] = d
		}
	}
	return out
}

// promRange returns every raw sample of the series matching selector that
// the Prometheus server prom holds in (end-window, end], from its query API.
func promRange(t *testing.T, prom, selector string, window time.Duration, end time.Time) []series {
	t.Helper()
	params := url.Values{
		"query": {fmt.Sprintf("%s[%dms]", selector, window.Milliseconds())},
		"time":  {strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64)},
	}
	status, body, err := httpGet(prom + "/api/v1/query?" + params.Encode())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, body)
	var res struct {
		Status string
		Data   struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Values [][2]json.Number
			}
		}
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&res))
	require.Equal(t, "success", res.Status, body)
	require.Equal(t, "matrix", res.Data.ResultType)
	var out []series
	for _, r := range res.Data.Result {
		s := series{Labels: labels.FromMap(r.Metric)}
		for _, p := range r.Values {
			ts, err := apiMillis(string(p[0]))
			require.NoError(t, err)
			v, err := strconv.ParseFloat(string(p[1]), 64)
			require.NoError(t, err)
			s.Samples = append(s.Samples, sample{T: ts, Bits: math.Float64bits(v)})
		}
		out = append(out, s)
	}
	return out
}

// apiMillis parses a timestamp of Prometheus's API, seconds with up to
// three decimals, into milliseconds without going through a float.
func apiMillis(s string) (int64, error) {
	sec, frac, _ := strings.Cut(s, ".")
	if len(frac) > 3 {
		return 0, fmt.Errorf("timestamp %q has more than millisecond precision", s)
	}
	n, err := strconv.ParseInt(sec+(frac + "000")[:3], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timestamp %q: %w", s, err)
	}
	return n, nil
}

// withoutStaleMarkers returns the float samples of ss as sampleLines, less
// the stale markers, and counts those: Prometheus's query API never returns
// them, remote read does. A writes them when a scrape fails, which a busy
// machine may cause.
func withoutStaleMarkers(ss []series) ([]string, int) {
	stale := 0
	var kept []series
	for _, s := range ss {
		k := series{Labels: s.Labels}
		for _, smp := range s.Samples {
			if value.IsStaleNaN(math.Float64frombits(smp.Bits)) {
				stale++
				continue
			}
			k.Samples = append(k.Samples, smp)
		}
		kept = append(kept, k)
	}
	return sampleLines(kept), stale
}

// sampleLines renders the float samples of ss one per line, sorted, so that
// two sources compare exactly and differences read as a diff.
func sampleLines(ss []series) []string {
	out := []string{}
	for _, s := range ss {
		for _, smp := range s.Samples {
			out = append(out, fmt.Sprintf("%s t=%d v=%#016x", s.Labels, smp.T, smp.Bits))
		}
	}
	slices.Sort(out)
	return out
}
