package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// Timing of TestPrometheusEndToEnd. Prometheus A scrapes every second for
// scrapeFor; in a restart case the adapter is down for outage from
// restartAfter on.
const (
	scrapeFor    = 25 * time.Second
	restartAfter = 8 * time.Second
	outage       = 5 * time.Second
	// flushTimeout bounds the wait for A to have sent everything up to the
	// compared range; retries after an outage back off up to 1 s.
	flushTimeout = 2 * time.Minute
)

// TestPrometheusEndToEnd runs real Prometheus servers against the adapter:
// A scrapes a test target and remote-writes to the adapter; B has no data of
// its own and remote-reads from the adapter. The same PromQL queries must
// then give byte-identical answers from A (its local TSDB) and B (the
// adapter).
func TestPrometheusEndToEnd(t *testing.T) {
	promBin := envOrSkip(t, "KAIROS_TEST_PROMETHEUS", "the Prometheus server binary printed by scripts/prometheus.sh")
	for _, c := range []struct {
		engine  string
		v2      bool
		restart bool
	}{
		{engine: "embedded", v2: false},
		{engine: "embedded", v2: true, restart: true},
		{engine: "cassandra", v2: false, restart: true},
		{engine: "cassandra", v2: true},
	} {
		name := c.engine + "/rw1"
		if c.v2 {
			name = c.engine + "/rw2"
		}
		if c.restart {
			name += "_restart"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var storage storageArgs
			if c.engine == "cassandra" {
				storage = cassandraStorage(cassandratest.Keyspace(t))
			} else {
				storage = embeddedStorage(t.TempDir())
			}
			prometheusEndToEnd(t, promBin, storage, c.v2, c.restart)
		})
	}
}

func prometheusEndToEnd(t *testing.T, promBin string, storage storageArgs, v2, restart bool) {
	target := httptest.NewServer(&scrapeTarget{})
	t.Cleanup(target.Close)
	native := httptest.NewServer(&nativeTarget{})
	t.Cleanup(native.Close)
	ad := startAdapter(t, "", storage)

	msg := "prometheus.WriteRequest"
	if v2 {
		msg = "io.prometheus.write.v2.Request"
	}
	// One shard sends in WAL order, so once a sample newer than the
	// compared range was sent, everything in the range was (see
	// waitSent). Short backoffs make recovery after an outage quick.
	// No external_labels: A and B must see identical series.
	//
	// Native histograms in Prometheus 3.13: --enable-feature=native-histograms
	// is a no-op; scrape_native_histograms turns them on per scrape config
	// (and makes PrometheusProto the first protocol, set explicitly here).
	// always_scrape_classic_histograms keeps the classic buckets of
	// e2e_native_hist as well. Over 2.0, e2e_classic_hist is also converted
	// to a custom-bucket histogram (NHCB), which Prometheus does not send
	// over 1.0 (it counts it as dropped). send_native_histograms is needed
	// for 2.0 too: the docs call it a no-op there, but 3.13's queue manager
	// and WAL watcher skip histograms without it.
	//
	// Exemplars (scraped with --enable-feature=exemplar-storage) are sent
	// over both protocols: over 2.0 Prometheus 3.13 sends each exemplar in
	// a TimeSeries without samples (prometheus/prometheus#17857), which the
	// adapter accepts although the spec asks for a sample.
	configA := fmt.Sprintf(`
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: e2e
    static_configs:
      - targets: [%q]
  - job_name: e2e_native
    scrape_native_histograms: true
    scrape_protocols: [PrometheusProto]
    always_scrape_classic_histograms: true
    convert_classic_histograms_to_nhcb: %v
    static_configs:
      - targets: [%q]
remote_write:
  - url: %q
    name: kairos
    protobuf_message: %s
    send_native_histograms: true
    send_exemplars: %v
    queue_config:
      min_shards: 1
      max_shards: 1
      batch_send_deadline: 1s
      min_backoff: 100ms
      max_backoff: 1s
`, strings.TrimPrefix(target.URL, "http://"), v2, strings.TrimPrefix(native.URL, "http://"), ad.url("/api/v1/write"), msg, true)
	configB := fmt.Sprintf(`
global:
  scrape_interval: 1s
remote_read:
  - url: %q
    name: kairos
    read_recent: true
    remote_timeout: 1m
`, ad.url("/api/v1/read"))

	promA := startPrometheus(t, promBin, "prometheus-A", configA, "--enable-feature=exemplar-storage")
	promB := startPrometheus(t, promBin, "prometheus-B", configB)
	began := time.Now()

	if restart {
		time.Sleep(time.Until(began.Add(restartAfter)))
		require.Equal(t, 0, ad.stop(t, syscall.SIGTERM), "adapter exit code after SIGTERM")
		// A keeps scraping and retrying while the adapter is away.
		time.Sleep(outage)
		ad = startAdapter(t, ad.addr, storage)
	}
	time.Sleep(time.Until(began.Add(scrapeFor)))

	// Compare a range fully in the past and already sent. A keeps
	// scraping; that does not matter since both only look at [.., end].
	end := time.Now().Add(-time.Second).Truncate(time.Second)
	waitSent(t, promA, end)
	if restart {
		require.Positive(t, promMetric(t, promA, "prometheus_remote_storage_samples_retried_total"),
			"A never retried: the adapter's outage went unnoticed, so the restart tested nothing")
	}

	// A scrape that times out on a busy machine is not the adapter's
	// fault: A then writes stale markers, which B must see too, and an
	// instant query may find nothing.
	_, ups := queryAPI(t, promA, "/api/v1/query", url.Values{"query": {`up[30s]`}, "time": {strconv.FormatInt(end.Unix(), 10)}})
	if failed := slices.DeleteFunc(ups, func(l string) bool { return !strings.HasSuffix(l, " 0") }); len(failed) > 0 {
		t.Logf("A failed %d scrapes in the last 30 s: %q", len(failed), failed)
	}
	compareE2EQueries(t, promA, promB, e2eQueries(v2), end)
	require.Positive(t, promMetric(t, promA, "prometheus_remote_storage_histograms_total"), "A sent no histograms")
	require.Positive(t, promMetric(t, ad.url(""), "kairos_adapter_written_histograms_total"), "the adapter stored no histograms")
	require.Positive(t, promMetric(t, ad.url(""), "kairos_adapter_written_exemplars_total"), "the adapter stored no exemplars")

	// B asks for STREAMED_XOR_CHUNKS first (Prometheus >= 2.55), and every
	// query it sent was answered.
	const readQueries = "kairos_adapter_read_queries_total"
	streamed := promMetric(t, ad.url(""), readQueries, `response_type="streamed_xor_chunks"`, `code="200"`)
	require.Positive(t, streamed, "B's queries were not answered with STREAMED_XOR_CHUNKS")
	require.Equal(t, streamed, promMetric(t, ad.url(""), readQueries), "remote-read queries that were not streamed or failed")
}

// e2eQueries is the PromQL expression table of the end-to-end tests over
// what scrapeTarget and nativeTarget serve; nhcb adds the queries of the
// classic histogram Prometheus converts to custom buckets.
func e2eQueries(nhcb bool) []string {
	queries := []string{
		`e2e_requests_total`,
		`rate(e2e_requests_total[10s])`,
		`sum by (room) (e2e_temperature_celsius)`,
		`histogram_quantile(0.9, sum by (le) (rate(e2e_latency_seconds_bucket[10s])))`,
		`{__name__=~"e2e_rpc_duration_seconds.*"}`,
		`e2e_requests_total{code!="200", path!~".*:.*"}`,
		`{job="e2e", kind="gauge"}`,
		`{__name__=~"up|scrape_samples_scraped"}`,
		`count({job="e2e"})`,
		`e2e_flapping`,
		// Native histograms, resetting every 10 scrapes.
		`histogram_quantile(0.9, rate(e2e_native_hist[10s]))`,
		`histogram_count(rate(e2e_native_hist[10s]))`,
		`histogram_sum(e2e_native_hist)`,
		`e2e_native_hist`,
		`histogram_quantile(0.9, sum by (le) (rate(e2e_native_hist_bucket[10s])))`,
	}
	if nhcb {
		queries = append(queries,
			`histogram_quantile(0.5, rate(e2e_classic_hist{path="/a:b=c"}[10s]))`,
			`e2e_classic_hist`)
	}
	return queries
}

// compareE2EQueries asks A and B every query at two instants and over the
// 20 s before end in steps of 1 s, then for every raw sample of the last
// 30 s, and requires identical answers.
func compareE2EQueries(t *testing.T, promA, promB string, queries []string, end time.Time) {
	t.Helper()
	at := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', -1, 64) }
	start := end.Add(-20 * time.Second)
	for _, q := range queries {
		// An instant may fall on a gap (e2e_flapping, a failed scrape);
		// 20 s of steps cannot.
		for _, ts := range []time.Time{end, end.Add(-7500 * time.Millisecond)} {
			compareQuery(t, promA, promB, true, "/api/v1/query", url.Values{"query": {q}, "time": {at(ts)}})
		}
		compareQuery(t, promA, promB, false, "/api/v1/query_range", url.Values{
			"query": {q}, "start": {at(start)}, "end": {at(end)}, "step": {"1"}})
	}
	// Every raw sample and histogram of every series the targets produced.
	for _, q := range []string{`{job="e2e"}[30s]`, `e2e_native_hist[30s]`, `{job="e2e_native"}[30s]`} {
		compareQuery(t, promA, promB, false, "/api/v1/query", url.Values{"query": {q}, "time": {at(end)}})
	}
}

// startPrometheus runs a Prometheus server with config, its own TSDB and
// the extra command-line args.
func startPrometheus(t *testing.T, bin, name, config string, args ...string) string {
	t.Helper()
	return startPrometheusIn(t, bin, name, t.TempDir(), config, args...)
}

// startPrometheusIn is startPrometheus with its TSDB in dir/data.
func startPrometheusIn(t *testing.T, bin, name, dir, config string, args ...string) string {
	t.Helper()
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(config), 0o644))
	p, addr := startServer(t, name, bin, "", func(addr string) []string {
		return append([]string{
			"--config.file=" + cfg,
			"--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + addr,
		}, args...)
	}, 2*time.Minute)
	// Nothing of Prometheus's own data matters after the test, and a
	// graceful stop would try to flush to an adapter that may be gone
	// already (cleanups run in reverse: a restarted adapter stops first)
	// for up to a minute.
	p.cleanupSignal = syscall.SIGKILL
	return "http://" + addr
}

// waitSent waits until A has sent every sample up to end: with one shard,
// samples leave in WAL order (scrape order), so a sent sample newer than
// end means all older ones were confirmed. Failed or dropped samples would
// still count as sent, hence the checks that there are none.
func waitSent(t *testing.T, prom string, end time.Time) {
	t.Helper()
	deadline := time.Now().Add(flushTimeout)
	for {
		sent := promMetric(t, prom, "prometheus_remote_storage_queue_highest_sent_timestamp_seconds")
		if sent >= float64(end.Unix()+1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus A sent samples only up to %v after %v; want past %v", time.Unix(int64(sent), 0), flushTimeout, end)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, m := range []string{
		"prometheus_remote_storage_samples_failed_total",
		"prometheus_remote_storage_samples_dropped_total",
		"prometheus_remote_storage_histograms_failed_total",
		"prometheus_remote_storage_histograms_dropped_total",
		"prometheus_remote_storage_exemplars_failed_total",
		"prometheus_remote_storage_exemplars_dropped_total",
	} {
		require.Zero(t, promMetric(t, prom, m), "%s: the adapter refused data Prometheus produced", m)
	}
	require.Positive(t, promMetric(t, prom, "prometheus_remote_storage_samples_total"))
}

// promMetric returns the sum of a metric's series on a server's /metrics
// whose line contains every one of with (e.g. `code="200"`); 0 when it has
// none (a vector without children is not exposed).
func promMetric(t *testing.T, prom, name string, with ...string) float64 {
	t.Helper()
	status, body, err := httpGet(prom + "/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		if slices.ContainsFunc(with, func(w string) bool { return !strings.Contains(line, w) }) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, "%s", line)
		sum += v
	}
	return sum
}

// compareQuery asks A and B the same query and requires identical results:
// same result type, same series, same timestamps and values as the strings
// Prometheus prints, and no warnings (B reports remote-read errors as
// warnings next to a partial result).
func compareQuery(t *testing.T, promA, promB string, mayBeEmpty bool, path string, params url.Values) {
	t.Helper()
	desc := path + "?" + params.Encode()
	typA, a := queryAPI(t, promA, path, params)
	typB, b := queryAPI(t, promB, path, params)
	if !mayBeEmpty {
		require.NotEmpty(t, a, "A has no result for %s: the test data is wrong", desc)
	}
	require.Equal(t, typA, typB, "result type of %s", desc)
	if !slices.Equal(a, b) {
		t.Fatalf("%s: A (local TSDB) and B (remote read from the adapter) differ; %d lines from A, %d from B; lines only in A (-) or only in B (+):\n%s",
			desc, len(a), len(b), diffLines(a, b, 40))
	}
}

// diffLines lists the lines of a missing from b ("-") and of b missing from
// a ("+"), counting repeats, at most limit of them: the answers have
// thousands of lines, so a full dump would bury the difference.
func diffLines(a, b []string, limit int) string {
	count := map[string]int{}
	for _, l := range b {
		count[l]++
	}
	var out []string
	for _, l := range a {
		if count[l] > 0 {
			count[l]--
			continue
		}
		out = append(out, "- "+l)
	}
	for _, l := range b {
		if count[l] > 0 {
			count[l]--
			out = append(out, "+ "+l)
		}
	}
	if len(out) == 0 {
		return "(same lines, different order)"
	}
	if len(out) > limit {
		out = append(out[:limit], fmt.Sprintf("... and %d more", len(out)-limit))
	}
	return strings.Join(out, "\n")
}

// apiResult is a Prometheus HTTP API answer; numbers stay json.Number so
// timestamps compare as printed.
type apiResult struct {
	Status   string   `json:"status"`
	Error    string   `json:"error"`
	Warnings []string `json:"warnings"`
	Infos    []string `json:"infos"`
	Data     struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

// queryAPI runs a query and returns its result type and its result as
// lines "labels @timestamp value", sorted by labels, points in time order.
func queryAPI(t *testing.T, prom, path string, params url.Values) (string, []string) {
	t.Helper()
	status, body, err := httpGet(prom + path + "?" + params.Encode())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "%s%s?%s: %s", prom, path, params.Encode(), body)
	var res apiResult
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&res))
	require.Equal(t, "success", res.Status, res.Error)
	require.Empty(t, res.Warnings, "%s%s?%s", prom, path, params.Encode())

	var lines []string
	point := func(metric string, p []any) {
		require.Len(t, p, 2)
		lines = append(lines, fmt.Sprintf("%s @%v %v", metric, p[0], p[1]))
	}
	switch res.Data.ResultType {
	case "scalar", "string":
		var p []any
		require.NoError(t, unmarshalNumbers(res.Data.Result, &p))
		point("", p)
	case "vector", "matrix":
		// Native histograms come as "histogram" (vector) and
		// "histograms" (matrix) points whose value is an object; fmt
		// prints it with sorted keys, every number as Prometheus wrote it.
		var rs []struct {
			Metric     map[string]string `json:"metric"`
			Value      []any             `json:"value"`
			Values     [][]any           `json:"values"`
			Histogram  []any             `json:"histogram"`
			Histograms [][]any           `json:"histograms"`
		}
		require.NoError(t, unmarshalNumbers(res.Data.Result, &rs))
		for _, r := range rs {
			metric := formatMetric(r.Metric)
			if r.Value != nil {
				point(metric, r.Value)
			}
			for _, p := range r.Values {
				point(metric, p)
			}
			if r.Histogram != nil {
				point(metric, r.Histogram)
			}
			for _, p := range r.Histograms {
				point(metric, p)
			}
		}
	default:
		t.Fatalf("unexpected result type %q", res.Data.ResultType)
	}
	// Order of series is free in Prometheus answers; points of a series are
	// in time order already and the stable sort keeps them so.
	slices.SortStableFunc(lines, func(a, b string) int {
		return strings.Compare(a[:strings.LastIndex(a, " @")], b[:strings.LastIndex(b, " @")])
	})
	if infos := res.Infos; len(infos) > 0 {
		lines = append(lines, "infos: "+strings.Join(infos, "; "))
	}
	return res.Data.ResultType, lines
}

func unmarshalNumbers(b []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	return dec.Decode(v)
}

func formatMetric(m map[string]string) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	var sb strings.Builder
	sb.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Quote(n) + "=" + strconv.Quote(m[n]))
	}
	sb.WriteByte('}')
	return sb.String()
}

// scrapeTarget serves a few hundred series in the Prometheus text format
// whose values are a function of the scrape number: counters (one of which
// resets), gauges (some of which come and go), a classic histogram and a
// summary, with label values that contain ':', '=', spaces, quotes, a
// newline and UTF-8.
type scrapeTarget struct {
	scrapes atomic.Int64
}

var (
	targetPaths  = []string{"/", "/api/v1:query", "/login?next=a=b", "/with space", "/ünïcode/日本", "/metrics", "/a:b=c d", "/health"}
	targetCodes  = []string{"200", "201", "404", "500", "503"}
	targetRooms  = []string{"kitchen", "Zürich ☃", "room:1", "k=v", "living room", "quote\"d", "line1\nline2", "back\\slash", "日本語", "r10"}
	targetQueues = []string{"q:1=a", "q 2", "q3"}
	targetLe     = []string{"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "+Inf"}
	targetSvcs   = []string{"svc:a=b", "svc b", "svc-ç", "svc4"}
)

func (s *scrapeTarget) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n := s.scrapes.Add(1)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

	fmt.Fprintln(bw, "# HELP e2e_requests_total Requests served.\n# TYPE e2e_requests_total counter")
	for i, path := range targetPaths {
		for j, code := range targetCodes {
			k := int64(i*len(targetCodes) + j)
			v := n * (k + 1)
			if k == 0 {
				v = n % 10 // resets every 10 scrapes
			}
			fmt.Fprintf(bw, "e2e_requests_total{kind=\"counter\",path=%s,code=%s} %s\n", q(path), q(code), f(float64(v)+0.5*float64(k%2)))
		}
	}
	fmt.Fprintln(bw, "# HELP e2e_temperature_celsius Temperature.\n# TYPE e2e_temperature_celsius gauge")
	for i, room := range targetRooms {
		for sensor := range 15 {
			v := float64((i*15+sensor)%17) + 0.25*float64((n+int64(sensor))%8) - 3
			fmt.Fprintf(bw, "e2e_temperature_celsius{kind=\"gauge\",room=%s,sensor=\"s%d\"} %s\n", q(room), sensor, f(v))
		}
	}
	fmt.Fprintln(bw, "# HELP e2e_queue_length Queue length.\n# TYPE e2e_queue_length gauge")
	for i, queue := range targetQueues {
		fmt.Fprintf(bw, "e2e_queue_length{kind=\"gauge\",queue=%s} %s\n", q(queue), f(float64((n*int64(i+3))%11)))
	}
	// Absent from every fourth scrape: Prometheus then writes stale
	// markers, which B must see as A does (no value at the next steps).
	if n%4 != 0 {
		fmt.Fprintln(bw, "# HELP e2e_flapping A series that comes and goes.\n# TYPE e2e_flapping gauge")
		for i := range 3 {
			fmt.Fprintf(bw, "e2e_flapping{kind=\"gauge\",i=\"%d\"} %d\n", i, n*int64(i+1))
		}
	}
	fmt.Fprintln(bw, "# HELP e2e_latency_seconds Latency.\n# TYPE e2e_latency_seconds histogram")
	for h := range 5 {
		handler := q(fmt.Sprintf("/h:%d=x", h))
		var cum int64
		for k, le := range targetLe {
			cum += n * int64((k*7+h)%5+1)
			fmt.Fprintf(bw, "e2e_latency_seconds_bucket{handler=%s,le=%q} %d\n", handler, le, cum)
		}
		fmt.Fprintf(bw, "e2e_latency_seconds_sum{handler=%s} %s\n", handler, f(float64(n)*0.137*float64(h+1)))
		fmt.Fprintf(bw, "e2e_latency_seconds_count{handler=%s} %d\n", handler, cum)
	}
	fmt.Fprintln(bw, "# HELP e2e_rpc_duration_seconds RPC duration.\n# TYPE e2e_rpc_duration_seconds summary")
	for i, svc := range targetSvcs {
		for j, quantile := range []string{"0.5", "0.9", "0.99"} {
			v := 0.001*float64((n+int64(i))%13) + 0.01*float64(j+1)
			fmt.Fprintf(bw, "e2e_rpc_duration_seconds{service=%s,quantile=%q} %s\n", q(svc), quantile, f(v))
		}
		fmt.Fprintf(bw, "e2e_rpc_duration_seconds_sum{service=%s} %s\n", q(svc), f(float64(n)*1.25*float64(i+1)))
		fmt.Fprintf(bw, "e2e_rpc_duration_seconds_count{service=%s} %d\n", q(svc), n*int64(i+2))
	}
}

// q quotes a label value as the text format wants: only backslash, double
// quote and newline are escaped.
func q(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v) + `"`
}
