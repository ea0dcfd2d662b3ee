package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// importScrapeFor is how long the Prometheus of the import tests scrapes:
// three minutes of data at 1 s ("scrapes for some minutes", issue #32).
const importScrapeFor = 3 * time.Minute

// TestImportMatchesPrometheus: a real Prometheus scrapes the e2e targets
// for a minute and takes a snapshot through its admin API; the snapshot is
// imported (import tsdb) into a fresh store on each engine, and the same
// range is imported over remote read from that Prometheus (import
// remote-read); each adapter then answers the e2e's PromQL expression
// table exactly as that Prometheus does. A remote-read import killed with
// SIGKILL midway and run again skips the slices it recorded and ends in the
// same answers.
func TestImportMatchesPrometheus(t *testing.T) {
	promBin := envOrSkip(t, "KAIROS_TEST_PROMETHEUS", "the Prometheus server binary printed by scripts/prometheus.sh")
	target := httptest.NewServer(&scrapeTarget{})
	t.Cleanup(target.Close)
	native := httptest.NewServer(&nativeTarget{})
	t.Cleanup(native.Close)
	config := fmt.Sprintf(`
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
    convert_classic_histograms_to_nhcb: true
    static_configs:
      - targets: [%q]
`, strings.TrimPrefix(target.URL, "http://"), strings.TrimPrefix(native.URL, "http://"))
	promDir := t.TempDir()
	prom := startPrometheusIn(t, promBin, "prometheus", promDir, config, "--web.enable-admin-api")
	began := time.Now()
	time.Sleep(importScrapeFor)
	end := time.Now().Add(-time.Second).Truncate(time.Second)

	resp, err := http.Post(prom+"/api/v1/admin/tsdb/snapshot", "", nil)
	require.NoError(t, err)
	var snap struct {
		Status string `json:"status"`
		Data   struct {
			Name string `json:"name"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&snap))
	resp.Body.Close()
	require.Equal(t, "success", snap.Status)
	snapDir := filepath.Join(promDir, "data", "snapshots", snap.Data.Name)

	rrArgs := []string{"import", "remote-read", "--url=" + prom + "/api/v1/read",
		"--start=" + strconv.FormatInt(began.Unix(), 10), "--end=" + strconv.FormatInt(end.Unix(), 10), "--slice=10s"}
	queries := e2eQueries(true)
	var rrSamples int // of a whole remote-read import
	for _, engine := range []string{"embedded", "cassandra"} {
		t.Run(engine+"/tsdb", func(t *testing.T) {
			storage := importStorage(t, engine)
			runImport(t, storage, "import", "tsdb", snapDir)
			ad := startAdapter(t, "", storage)
			compareE2EQueries(t, prom, ad.url(""), queries, end)
		})
		t.Run(engine+"/remote-read", func(t *testing.T) {
			storage := importStorage(t, engine)
			out := runImport(t, storage, rrArgs...)
			sum := importSummary(t, out)
			require.Zero(t, sum["skipped_done_before"])
			rrSamples = sum["samples"]
			ad := startAdapter(t, "", storage)
			compareE2EQueries(t, prom, ad.url(""), queries, end)
		})
	}
	t.Run("embedded/remote-read_killed", func(t *testing.T) {
		storage := importStorage(t, "embedded")
		// Slow, so that SIGKILL lands midway: after the first slice
		// recorded, long before the last.
		p := startProcess(t, "import", adapterBin, append(append(rrArgs, "--rate=500", "--log.level=debug"), storage...)...)
		deadline := time.Now().Add(2 * time.Minute)
		// The first slices may hold nothing (before the first scrape).
		sliceWithData := regexp.MustCompile(`Slice imported.* samples=[1-9]`)
		for !sliceWithData.MatchString(p.out.String()) {
			require.False(t, p.exited(), "the import ended before a slice was done:\n%s", p.out.String())
			require.True(t, time.Now().Before(deadline), "no slice imported in 2 min:\n%s", p.out.String())
			time.Sleep(20 * time.Millisecond)
		}
		require.Equal(t, -1, p.stop(t, syscall.SIGKILL), "the import was not killed midway:\n%s", p.out.String())
		sum := importSummary(t, runImport(t, storage, rrArgs...))
		require.Positive(t, sum["skipped_done_before"], "the rerun redid every slice")
		require.Positive(t, sum["units"], "the killed run had done every slice")
		// The slices skipped held samples: the rerun wrote fewer.
		require.Positive(t, sum["samples"])
		require.Less(t, sum["samples"], rrSamples, "the slices skipped were empty: the test shows no resume")
		ad := startAdapter(t, "", storage)
		compareE2EQueries(t, prom, ad.url(""), queries, end)
	})
}

// importSummary is the numbers of an import's "Import done" line.
func importSummary(t *testing.T, out string) map[string]int {
	t.Helper()
	line := lastLine(out, "Import done")
	sum := map[string]int{}
	for _, m := range regexp.MustCompile(` (units|skipped_done_before|series|samples|refused)=(\d+)`).FindAllStringSubmatch(line, -1) {
		sum[m[1]], _ = strconv.Atoi(m[2])
	}
	require.Len(t, sum, 5, "no summary in %q", line)
	return sum
}

func importStorage(t *testing.T, engine string) storageArgs {
	if engine == "cassandra" {
		return cassandraStorage(cassandratest.Keyspace(t))
	}
	return embeddedStorage(t.TempDir())
}

// runImport runs an import to its end, requires exit status 0 and returns
// its output.
func runImport(t *testing.T, storage storageArgs, args ...string) string {
	t.Helper()
	p := startProcess(t, "import", adapterBin, append(args, storage...)...)
	code := p.wait(t, 5*time.Minute)
	require.Equal(t, 0, code, "%s:\n%s", strings.Join(args, " "), p.out.String())
	t.Logf("%s: %s", strings.Join(args[:2], " "), lastLine(p.out.String(), "Import done"))
	return p.out.String()
}
