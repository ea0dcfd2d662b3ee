package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// The rollup tests run the job with its default resolutions (5m, 1h, 6h:
// units of 6 h) and no --rollup.delay, so a unit is rolled up as soon as
// it ends.
const rollupUnit = 6 * time.Hour

// startRollupAdapter starts an adapter with the rollup job on.
func startRollupAdapter(t testing.TB, storage storageArgs, extra ...string) *adapter {
	t.Helper()
	p, addr := startServer(t, "adapter", adapterBin, "", func(addr string) []string {
		return slices.Concat([]string{"--web.listen-address=" + addr, "--log.level=info", "--rollup.delay=0s"}, extra, storage)
	}, adapterReadyTimeout)
	return &adapter{process: p, addr: addr}
}

// rollupHistory is three days of 1-minute counters up to now, four series
// of each of ten metrics (the job pauses between metrics, so a step of it
// lasts), and l, the end of the latest closed unit. Series job="late" of
// e2e_late_0 lacks the samples of the unit ending at l: lateSamples.
func rollupHistory(now time.Time) (data []series, l int64) {
	end := now.UnixMilli()
	l = end - end%rollupUnit.Milliseconds()
	for m := range 10 {
		for s := range 4 {
			job := strconv.Itoa(s)
			if s == 3 {
				job = "late"
			}
			ser := series{Labels: labels.FromStrings("__name__", fmt.Sprintf("e2e_late_%d", m), "job", job)}
			for ts := l - 3*24*time.Hour.Milliseconds() + 60_000; ts <= end; ts += 60_000 {
				if m == 0 && s == 3 && ts > l-rollupUnit.Milliseconds() && ts <= l {
					continue
				}
				ser.Samples = append(ser.Samples, lateSample(l, ts, float64(s+1+m)))
			}
			data = append(data, ser)
		}
	}
	return data, l
}

// lateSample is the sample at ts of a counter that grows by rate a minute.
func lateSample(l, ts int64, rate float64) sample {
	return sample{ts, math.Float64bits(rate * float64(ts-l+3*24*time.Hour.Milliseconds()) / 60_000)}
}

// lateSamples are the samples of e2e_late_0{job="late"} in the unit ending
// at l, which the job has rolled up without them: every query below
// changes with them.
func lateSamples(l int64) []series {
	s := series{Labels: labels.FromStrings("__name__", "e2e_late_0", "job", "late")}
	for ts := l - rollupUnit.Milliseconds() + 60_000; ts <= l; ts += 60_000 {
		s.Samples = append(s.Samples, lateSample(l, ts, 4))
	}
	return []series{s}
}

// metricsText is the adapter's /metrics page.
func metricsText(t *testing.T, a *adapter) string {
	t.Helper()
	status, body, err := httpGet(a.url("/metrics"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	return body
}

// waitRolledUp waits until a's job has rolled up the unit ending at l at
// every resolution: the first unit it rolls up is the latest closed one,
// and it then backfills the older ones.
func waitRolledUp(t *testing.T, a *adapter, l int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		body := metricsText(t, a)
		for _, r := range []string{"5m", "1h", "6h"} {
			if !strings.Contains(body, `kairos_adapter_rollup_lag_seconds{resolution="`+r+`"}`) {
				return false
			}
		}
		return true
	}, 3*time.Minute, 50*time.Millisecond, "the job rolls up the unit ending at %s", time.UnixMilli(l).UTC())
}

// lateQueries are the questions over the late unit: Grafana's increase
// over a day at a 6 h step, as in the report, a max and a count.
var lateQueries = []string{
	`sum(increase(e2e_late_0[1d]))`,
	`max_over_time(e2e_late_0[6h])`,
	`sum(count_over_time(e2e_late_0[6h]))`,
}

// rangeAnswer is a range query's answer as "labels @t" -> value.
func rangeAnswer(t *testing.T, a *adapter, q string, l int64, msr string) map[string]float64 {
	t.Helper()
	params := url.Values{
		"query": {q}, "step": {"21600"}, "max_source_resolution": {msr},
		"start": {strconv.FormatInt(l/1000-3*21600, 10)}, "end": {strconv.FormatInt(l/1000, 10)},
	}
	status, body, err := httpGet(a.url("/api/v1/query_range?" + params.Encode()))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "%s: %s", q, body)
	var res struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &res), body)
	out := map[string]float64{}
	for _, s := range res.Data.Result {
		for _, p := range s.Values {
			v, err := strconv.ParseFloat(p[1].(string), 64)
			require.NoError(t, err)
			out[fmt.Sprintf("%v @%v", s.Metric, p[0])] = v
		}
	}
	return out
}

// rollupsMatchRaw reports whether every late query answers the same from
// rollups (max_source_resolution=auto) as from raw samples (0), and what
// differs.
func rollupsMatchRaw(t *testing.T, a *adapter, l int64) (bool, string) {
	t.Helper()
	var diffs []string
	for _, q := range lateQueries {
		raw, auto := rangeAnswer(t, a, q, l, "0"), rangeAnswer(t, a, q, l, "auto")
		require.NotEmpty(t, raw, q)
		for k, want := range raw {
			got, ok := auto[k]
			// Rollups hold sums and counters, added in another
			// order than the raw samples are: the last digits may
			// differ. What a lost recomputation leaves is percents.
			if !ok || math.Abs(got-want) > 1e-6*math.Abs(want) {
				diffs = append(diffs, fmt.Sprintf("%s %s: auto %v (present %v), raw %v", q, k, got, ok, want))
			}
		}
		if len(auto) != len(raw) {
			diffs = append(diffs, fmt.Sprintf("%s: %d points from rollups, %d raw", q, len(auto), len(raw)))
		}
	}
	return len(diffs) == 0, strings.Join(diffs, "\n")
}

// requireCaughtUp waits until the rollup answers over the late unit are the
// raw ones, and requires that they were read from rollups.
func requireCaughtUp(t *testing.T, a *adapter, l int64) {
	t.Helper()
	var last string
	ok := false
	deadline := time.Now().Add(4 * time.Minute)
	for !ok && time.Now().Before(deadline) {
		if ok, last = rollupsMatchRaw(t, a, l); !ok {
			time.Sleep(2 * time.Second)
		}
	}
	require.True(t, ok, "rollup answers still differ from raw ones after 4 minutes:\n%s\nlog:\n%s", last, a.out.String())
	// The answers come from the frontend's cache once evaluated; this
	// process has read rollups for them (nothing else here reads
	// through a read plan).
	require.Positive(t, promMetric(t, a.url(""), "kairos_adapter_read_cells_total", `kind="rollup"`),
		"the auto answers were read from rollups")
}

// TestRollupLateWriteSurvivesKill: samples written into a unit the job has
// rolled up already, acknowledged with 204, and the adapter killed with
// SIGKILL at once: after a restart on the same store, the job recomputes
// the unit, and the answers from rollups are the raw ones. Before the
// recomputation marks were stored ahead of the 204, the mark lived in
// memory until the job's next step (which, mid-backfill, comes seconds
// later), and the unit stayed wrong for good.
func TestRollupLateWriteSurvivesKill(t *testing.T) {
	engines := map[string]func(t *testing.T) storageArgs{
		"embedded": func(t *testing.T) storageArgs { return embeddedStorage(t.TempDir()) },
		"cassandra": func(t *testing.T) storageArgs {
			addr, keyspace := cassandratest.Keyspace(t)
			return cassandraStorage(addr, keyspace)
		},
	}
	for name, storage := range engines {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := storage(t)
			// A slow duty cycle: the job is mid-step (pausing between
			// metrics of its backfill) when the late write comes, as a
			// busy job is.
			a := startRollupAdapter(t, st, "--rollup.duty-cycle=0.05")
			data, l := rollupHistory(time.Now())
			for i := range data {
				if i%4 == 0 {
					mustWrite(t, a, false, data[i:i+4])
				}
			}
			waitRolledUp(t, a, l)
			mustWrite(t, a, false, lateSamples(l))
			require.Equal(t, -1, a.stop(t, syscall.SIGKILL), "exit code after SIGKILL")

			a = startRollupAdapter(t, st, "--rollup.duty-cycle=1")
			requireCaughtUp(t, a, l)
		})
	}
}

// TestRollupLateWriteToStandbyKilled: two adapters on one keyspace; the
// late write goes to the one that does not hold the job's lease, which is
// killed with SIGKILL right after the 204. The lease holder finds the mark
// in service_index and recomputes the unit.
func TestRollupLateWriteToStandbyKilled(t *testing.T) {
	addr, keyspace := cassandratest.Keyspace(t)
	st := cassandraStorage(addr, keyspace)
	a := startRollupAdapter(t, st, "--rollup.duty-cycle=1")
	data, l := rollupHistory(time.Now())
	for i := range data {
		if i%4 == 0 {
			mustWrite(t, a, false, data[i:i+4])
		}
	}
	waitRolledUp(t, a, l)
	require.Equal(t, 1.0, promMetric(t, a.url(""), "kairos_adapter_rollup_leader"), "the first adapter holds the lease")
	b := startRollupAdapter(t, st)
	waitRolledUp(t, b, l) // b's job has read the progress: it stands by
	require.Equal(t, 0.0, promMetric(t, b.url(""), "kairos_adapter_rollup_leader"), "the second adapter stands by")

	mustWrite(t, b, false, lateSamples(l))
	require.Equal(t, -1, b.stop(t, syscall.SIGKILL), "exit code after SIGKILL")
	requireCaughtUp(t, a, l)
}
