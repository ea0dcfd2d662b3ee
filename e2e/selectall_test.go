package e2e

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// TestSelectorsThatSelectEverything compares the adapter with a real
// Prometheus, both holding data: a remote-read query without matchers
// selects nothing on both, and a real selector still selects. Then
// delete_series refuses every selector whose matchers all match the empty
// string (400, nothing deleted).
func TestSelectorsThatSelectEverything(t *testing.T) {
	promBin := envOrSkip(t, "KAIROS_TEST_PROMETHEUS", "the Prometheus server binary printed by scripts/prometheus.sh")
	addr, keyspace := cassandratest.Keyspace(t)
	a := startAdapter(t, "", append(cassandraStorage(addr, keyspace), "--web.enable-admin-api"))
	now := time.Now().UnixMilli()
	var written []series
	for i := range 3 {
		written = append(written, series{
			Labels:  labels.FromStrings("__name__", "select_all", "job", "j", "i", fmt.Sprint(i)),
			Samples: []sample{{now - 1000, math.Float64bits(float64(i))}},
		})
	}
	mustWrite(t, a, false, written)

	// Prometheus scrapes the adapter, so it holds series of its own.
	prom := startPrometheus(t, promBin, "prometheus", fmt.Sprintf(
		"global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: adapter\n    static_configs: [{targets: [%q]}]\n", a.addr),
		"--web.enable-admin-api")
	promAsAdapter := &adapter{addr: strings.TrimPrefix(prom, "http://")}
	require.Eventually(t, func() bool {
		status, body, err := httpGet(prom + "/api/v1/query?query=up")
		return err == nil && status == http.StatusOK && strings.Contains(body, `"job":"adapter"`)
	}, time.Minute, 200*time.Millisecond, "Prometheus never scraped the adapter")

	all := readQuery{Start: now - time.Hour.Milliseconds(), End: now + time.Hour.Milliseconds(),
		Matchers: []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")}}
	none := readQuery{Start: all.Start, End: all.End}
	for _, rt := range []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS} {
		for name, target := range map[string]*adapter{"prometheus": promAsAdapter, "adapter": a} {
			got := remoteReadSeries(t, target, rt, none, all)
			require.Empty(t, got[0], "%s, %v: a query without matchers selects nothing", name, rt)
			require.NotEmpty(t, got[1], "%s, %v: {__name__=~\".+\"} selects the stored series", name, rt)
		}
	}

	// Prometheus 3.13's own delete_series does not check this (it answers
	// 204 to {} and deletes nothing, and deletes everything for
	// {job=~".*"}); the adapter applies the rule Prometheus applies to the
	// match[] of /api/v1/series, so a typo cannot wipe a shared keyspace.
	for _, sel := range []string{`{}`, `{job=~".*"}`, `{__name__=~".*",job=""}`, `{job!="x"}`} {
		resp, err := http.PostForm(a.url("/api/v1/admin/tsdb/delete_series"), url.Values{"match[]": {sel}})
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "delete_series %s", sel)
		require.Contains(t, string(body), "match[] must contain at least one non-empty matcher")
	}
	got := remoteReadSeries(t, a, prompb.ReadRequest_SAMPLES, readQuery{Start: all.Start, End: all.End,
		Matchers: []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "select_all")}})
	require.Len(t, got[0], len(written), "a refused delete removed series")
}
