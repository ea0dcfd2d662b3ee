package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// TestWebUI drives the web UI in a real headless Chromium (Debian's
// chromium package; KAIROS_TEST_CHROMIUM names another binary) against an
// adapter on the embedded store behind basic auth: completion in the
// editor, the graph's series and points, the table's values, the
// explorer's series counts and the status page. Any JavaScript error in the
// console fails it. The web config also turns TLS on: the pages, their
// assets and their API calls are served over it like every other path.
// With KAIROS_UI_SCREENSHOTS=<dir> it also saves the three pages as PNG
// there (scripts/ui.sh screenshots).
func TestWebUI(t *testing.T) {
	chrome := chromiumOrSkip(t)
	webUI(t, chrome, func(dir string) storageArgs { return embeddedStorage(filepath.Join(dir, "data")) }, true, os.Getenv("KAIROS_UI_SCREENSHOTS"))
}

// TestWebUICassandra is TestWebUI on a Cassandra node: the explorer's
// counts come from Cassandra's row_keys, and the status page lists the node
// as the driver sees it.
func TestWebUICassandra(t *testing.T) {
	chrome := chromiumOrSkip(t)
	addr, ks := cassandratest.Keyspace(t)
	webUI(t, chrome, func(string) storageArgs { return cassandraStorage(addr, ks) }, false, "")
}

func chromiumOrSkip(t *testing.T) string {
	chrome := os.Getenv("KAIROS_TEST_CHROMIUM")
	if chrome == "" {
		chrome, _ = exec.LookPath("chromium")
	}
	if chrome == "" {
		cassandratest.SkipUnlessCI(t, "no chromium on PATH and KAIROS_TEST_CHROMIUM unset (Debian: apt-get install chromium)")
	}
	return chrome
}

func webUI(t *testing.T, chrome string, storage func(dir string) storageArgs, useTLS bool, shots string) {
	const user, password = "ui", "s3cret"
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	require.NoError(t, err)
	webConfig := filepath.Join(dir, "web.yml")
	cfg := fmt.Sprintf("basic_auth_users:\n  %s: %s\n", user, hash)
	client, scheme := &http.Client{Timeout: time.Minute}, "http://"
	if useTLS {
		writeTestPKI(t, dir)
		node := filepath.Join(dir, "node.pem") // key and certificate for 127.0.0.1
		cfg += fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", node, node)
		ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
		require.NoError(t, err)
		roots := x509.NewCertPool()
		require.True(t, roots.AppendCertsFromPEM(ca))
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
		scheme = "https://"
	}
	require.NoError(t, os.WriteFile(webConfig, []byte(cfg), 0o600))
	addr := freeAddr(t)
	url := func(path string) string { return scheme + addr + path }
	st := storage(dir)
	p := startProcess(t, "adapter@"+addr, adapterBin, append([]string{"--web.listen-address=" + addr, "--web.config.file=" + webConfig,
		"--kairosdb.tag-indexed-metrics=ui_cardinality"}, st...)...)
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	get := func(path string, withAuth bool) int {
		req, err := http.NewRequest(http.MethodGet, url(path), nil)
		require.NoError(t, err)
		if withAuth {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Eventually(t, func() bool { return get("/-/ready", true) == http.StatusOK }, adapterReadyTimeout, 200*time.Millisecond, "adapter not ready:\n%s", p.out.String())

	// Basic auth covers every page, asset and endpoint of the UI.
	for _, path := range []string{"/", "/graph", "/explore", "/status", "/static/app.js", "/static/app.css", "/static/index.html",
		"/api/v1/status/metrics", "/api/v1/status/adapter"} {
		require.Equal(t, http.StatusUnauthorized, get(path, false), "%s without credentials", path)
		require.Equal(t, http.StatusOK, get(path, true), "%s with credentials", path)
	}
	if useTLS {
		status, body, err := httpGet("http://" + addr + "/graph")
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, status, "plain HTTP to the TLS port: %s", body)
	}

	// Two series of ui_requests_total every 15 s over the 40 minutes to
	// end, and 100 series of ui_cardinality.
	end := time.Now().Truncate(time.Minute).Add(-time.Minute)
	var ss []series
	for k, inst := range []string{"a", "b"} {
		s := series{Labels: labels.FromStrings("__name__", "ui_requests_total", "job", "api", "instance", inst)}
		for i := range 161 {
			ts := end.Add(time.Duration(i-160) * 15 * time.Second).UnixMilli()
			s.Samples = append(s.Samples, sample{T: ts, Bits: math.Float64bits(float64((k + 1) * i))})
		}
		ss = append(ss, s)
	}
	for i := range 100 {
		ss = append(ss, series{Labels: labels.FromStrings("__name__", "ui_cardinality", "n", fmt.Sprint(i)),
			Samples: []sample{{T: end.UnixMilli(), Bits: math.Float64bits(1)}}})
	}
	writeWithAuth(t, client, url("/api/v1/write"), auth, encodeWriteV1(ss))
	meta, err := (&prompb.WriteRequest{Metadata: []prompb.MetricMetadata{
		{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "ui_requests_total", Help: "Requests served."},
		{Type: prompb.MetricMetadata_GAUGE, MetricFamilyName: "ui_cardinality", Help: "One per n.", Unit: "widgets"},
	}}).Marshal()
	require.NoError(t, err)
	writeWithAuth(t, client, url("/api/v1/write"), auth, meta)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("headless", "new"),
		// The test CA is not the browser's; the Go client above checks the
		// certificate against it.
		chromedp.Flag("ignore-certificate-errors", useTLS))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelTimeout()
	var mu sync.Mutex
	var jsErrors []string
	chromedp.ListenTarget(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				jsErrors = append(jsErrors, "console."+string(ev.Type)+": "+strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			jsErrors = append(jsErrors, "exception: "+ev.ExceptionDetails.Error())
		}
	})
	screenshot := func(name string) {
		if shots == "" {
			return
		}
		var png []byte
		require.NoError(t, chromedp.Run(ctx, chromedp.Sleep(300*time.Millisecond), chromedp.FullScreenshot(&png, 100)))
		require.NoError(t, os.WriteFile(filepath.Join(shots, name), png, 0o644))
	}
	require.NoError(t, chromedp.Run(ctx, network.Enable(), network.SetExtraHTTPHeaders(network.Headers{"Authorization": auth})))

	// The query page: type prefixes, take the completions (metric name,
	// label name, label value: all from the adapter's /api/v1), run.
	endParam := fmt.Sprint(end.Unix())
	var editorText, dataSeries, dataPoints, samplesRead, peakSamples, statsText string
	var legend []string
	complete := func(typed, want string) chromedp.Tasks {
		return chromedp.Tasks{
			// Typed into the focused editor: chromedp's SendKeys reads the
			// node's attributes before taking the node's lock, a data race
			// with the editor's attribute changes that -race reports.
			chromedp.Focus(".cm-content", chromedp.ByQuery),
			chromedp.KeyEvent(typed),
			chromedp.Poll(`document.querySelector('.cm-tooltip-autocomplete li[aria-selected=true] .cm-completionLabel')?.textContent === `+strconv.Quote(want), nil),
			// The editor ignores Enter for 75 ms after the list opens.
			chromedp.Sleep(300 * time.Millisecond),
			pressEnter(), // accepts the completion
		}
	}
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(url("/graph?g0.range_input=30m&g0.step_input=15s&g0.end_input="+endParam)),
		chromedp.WaitVisible(".cm-content", chromedp.ByQuery),
		chromedp.Click(".cm-content", chromedp.ByQuery),
		complete("ui_req", "ui_requests_total"),
		complete("{jo", "job"), // the editor closes the brace
		complete(`="`, "api"),  // and the quote
		chromedp.Text(".cm-content", &editorText, chromedp.ByQuery),
	))
	require.Equal(t, `ui_requests_total{job="api"}`, editorText, "the completions should have written the selector")
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click("#execute", chromedp.ByQuery),
		chromedp.WaitVisible(`#graph[data-series="2"]`, chromedp.ByQuery),
		chromedp.AttributeValue("#graph", "data-series", &dataSeries, nil, chromedp.ByQuery),
		chromedp.AttributeValue("#graph", "data-points", &dataPoints, nil, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll('.u-legend .u-series th')].slice(1).map(e => e.textContent.trim())`, &legend),
		chromedp.WaitVisible("#query-stats", chromedp.ByQuery),
		chromedp.AttributeValue("#query-stats", "data-samples", &samplesRead, nil, chromedp.ByQuery),
		chromedp.AttributeValue("#query-stats", "data-peak", &peakSamples, nil, chromedp.ByQuery),
		chromedp.Text("#query-stats", &statsText, chromedp.ByQuery),
	))
	// 30 minutes at 15 s: 121 steps, each with a sample, for each series.
	require.Equal(t, "242", dataPoints)
	// The query's cost from the stats parameter: the engine read one
	// sample per step and series, and held them all at once.
	require.Equal(t, "242", samplesRead)
	require.Equal(t, "242", peakSamples)
	require.Regexp(t, `^Query time: [0-9.]+ms \(evaluation [0-9.]+ms, queued [0-9.]+ms\)\s+Samples: 242 queried, \d+ read, 242 at peak$`, statsText)
	require.Equal(t, []string{`ui_requests_total{instance="a", job="api"}`, `ui_requests_total{instance="b", job="api"}`}, legend)
	screenshot("ui-query.png")

	var rows []string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click("#tab-table", chromedp.ByQuery),
		chromedp.WaitVisible("#result-table", chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll('#result-table tr')].map(r => [...r.cells].map(c => c.textContent).join(" => "))`, &rows),
	))
	require.Equal(t, []string{`ui_requests_total{instance="a", job="api"} => 160`, `ui_requests_total{instance="b", job="api"} => 320`}, rows)
	var location string
	require.NoError(t, chromedp.Run(ctx, chromedp.Location(&location)))
	require.Contains(t, location, "g0.expr=ui_requests_total%7Bjob%3D%22api%22%7D")
	require.Contains(t, location, "g0.tab=table")

	// Errors are shown as Prometheus shows them.
	var errText string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(url("/graph?g0.expr=sum(&g0.tab=table")),
		chromedp.WaitVisible("#messages .alert-danger", chromedp.ByQuery),
		chromedp.Text("#messages .alert-danger", &errText, chromedp.ByQuery),
	))
	require.Contains(t, errText, "Error executing query: bad_data:")

	// The explorer counts the series written.
	counts := map[string]string{}
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(url("/explore?range=1h&end="+endParam)),
		chromedp.WaitVisible(`tr[data-metric="ui_cardinality"]`, chromedp.ByQuery),
		chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll('#metrics-table tbody tr')].map(r => [r.dataset.metric, ['series', 'tagIndexed', 'type', 'unit', 'help'].map(c => r.querySelector('[data-col=' + c + ']').textContent).join(" ")]))`, &counts),
	))
	// The rollup job (on by default) may have rolled up a unit already:
	// a rollup metric lists fifteen series (three resolutions, five
	// aggregates) per raw series, and is an ordinary metric of the
	// explorer's.
	for name, row := range counts {
		if raw, ok := strings.CutSuffix(name, "_rollup"); ok {
			rawSeries, _, _ := strings.Cut(counts[raw], " ")
			n, err := strconv.Atoi(rawSeries)
			require.NoError(t, err, "%s without %s", name, raw)
			require.True(t, strings.HasPrefix(row, strconv.Itoa(15*n)+" no "), "%s: %q", name, row)
			delete(counts, name)
		}
	}
	require.Equal(t, map[string]string{"ui_cardinality": "100 yes gauge widgets One per n.", "ui_requests_total": "2 no counter  Requests served."}, counts)
	screenshot("ui-explorer.png")
	// Sortable: by name, then by name descending.
	order := func() []string {
		var names []string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`#metrics-table th[data-col="name"]`, chromedp.ByQuery),
			chromedp.Evaluate(`[...document.querySelectorAll('#metrics-table tbody tr')].map(r => r.dataset.metric)`, &names),
		))
		return slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, "_rollup") })
	}
	require.Equal(t, []string{"ui_cardinality", "ui_requests_total"}, order())
	require.Equal(t, []string{"ui_requests_total", "ui_cardinality"}, order())

	// The JSON behind it, as scripts read it.
	var body struct {
		Data struct {
			Metrics []struct {
				Name   string
				Series int
			}
		}
	}
	req, err := http.NewRequest(http.MethodGet, url("/api/v1/status/metrics?metric=ui_cardinality&end="+endParam), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", auth)
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	resp.Body.Close()
	require.Len(t, body.Data.Metrics, 1)
	require.Equal(t, 100, body.Data.Metrics[0].Series)

	var storeInfo, config, hosts, caches, rollups string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(url("/status")),
		chromedp.WaitVisible("#config", chromedp.ByQuery),
		chromedp.Text("#store-info", &storeInfo, chromedp.ByQuery),
		chromedp.Text("#hosts", &hosts, chromedp.ByQuery),
		chromedp.Text("#caches", &caches, chromedp.ByQuery),
		chromedp.Text("#rollups", &rollups, chromedp.ByQuery),
		chromedp.Text("#config", &config, chromedp.ByQuery),
	))
	require.Contains(t, storeInfo, "MILLISECONDS")
	if st[0] == "--storage=cassandra" {
		require.Contains(t, storeInfo, "cassandra")
		require.Regexp(t, `127\.0\.0\.1:\d+\s+\S+\s+\S+\s+UP`, hosts)
		require.Regexp(t, `Cassandra in-flight limit \(adaptive\)\s+128`, caches)
	} else {
		require.Contains(t, storeInfo, "embedded")
		require.Contains(t, hosts, "The embedded store has no hosts.")
		require.NotContains(t, caches, "in-flight limit")
		// The embedded engine's block cache, in bytes against its size.
		require.Regexp(t, `Pebble block cache\s+[0-9.]+ (B|KiB|MiB) of 64\.0 MiB`, caches)
	}
	// The kept listings in bytes against --kairosdb.row-keys-cache-bytes
	// (the query above kept some).
	require.Regexp(t, `Kept row_keys listings\s+[1-9]\d* listings?, [0-9.]+ (B|KiB|MiB) of 512\.0 MiB`, caches)
	require.Contains(t, config, "listen_address: "+addr)
	// The rollup job (on by default) and its progress per resolution: the
	// job may not have written its first unit yet.
	require.Regexp(t, `5m\s+(not started|\d{4}-\d\d-\d\dT[\d:]+Z\s+\d{4}-\d\d-\d\dT[\d:]+Z\s+\d+ s)`, rollups)
	require.Regexp(t, `1h\s+(not started|\d{4}-)`, rollups)
	require.Regexp(t, `Results cache of range queries\s+[0-9.]+ (B|KiB|MiB)`, caches)
	screenshot("ui-status.png")

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, jsErrors, "JavaScript errors in the browser console")
}

// writeWithAuth posts a remote-write 1.0 message through basic auth.
func writeWithAuth(t *testing.T, client *http.Client, url, auth string, body []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(snappy.Encode(nil, body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	req.Header.Set("Authorization", auth)
	resp, err := client.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "remote write: %s", b)
}

// pressEnter presses Enter as a key alone: chromedp's SendKeys also types
// the "\r" it carries, which the editor takes for a line break.
func pressEnter() chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		for _, typ := range []input.KeyType{input.KeyRawDown, input.KeyUp} {
			if err := input.DispatchKeyEvent(typ).WithKey("Enter").WithCode("Enter").WithWindowsVirtualKeyCode(13).Do(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}
