package e2e

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// TestCassandraStallAnswers503 freezes the adapter's Cassandra node (SIGSTOP
// of its JVM: requests time out, as on a node swamped by new series, issue
// #16) and requires that remote writes and reads are answered 503, which
// Prometheus retries with backoff, never 500; and that once the node runs
// again the adapter writes and reads again within seconds, without a
// restart.
func TestCassandraStallAnswers503(t *testing.T) {
	if testing.Short() {
		cassandratest.SkipUnlessCI(t, "starts a private Cassandra node")
	}
	node := startCassandraNode(t, nodeOptions{})
	ad := startAdapter(t, "", storageArgs{
		"--storage=cassandra",
		"--cassandra.hosts=" + node.addr,
		"--cassandra.keyspace=e2e_stall",
		"--cassandra.write-consistency=ONE",
		"--cassandra.read-consistency=ONE",
		"--cassandra.timeout=2s",
		"--cassandra.connect-timeout=2s",
	})
	t0 := time.Now().UnixMilli()
	written := func(i int) []series {
		return []series{{
			Labels:  labels.FromStrings("__name__", "e2e_stall", "i", strconv.Itoa(i)),
			Samples: []sample{{T: t0 + int64(i), Bits: math.Float64bits(float64(i))}},
		}}
	}
	q := readQuery{Start: t0 - 1000, End: t0 + 60_000, Matchers: []*labels.Matcher{mustMatcher(labels.MatchEqual, "__name__", "e2e_stall")}}
	mustWrite(t, ad, false, written(0))

	jvm := nodePID(t, node)
	require.NoError(t, syscall.Kill(jvm, syscall.SIGSTOP))
	stopped := true
	// kill returns once the stop is queued; a JVM thread already running
	// may still answer a request before it stops (one CI run got a 204).
	require.Eventually(t, func() bool { return allStopped(t, jvm) }, 10*time.Second, 10*time.Millisecond,
		"the node's threads did not all stop within 10 s of SIGSTOP")
	resume := func() {
		if stopped {
			require.NoError(t, syscall.Kill(jvm, syscall.SIGCONT))
			stopped = false
		}
	}
	t.Cleanup(resume) // a frozen JVM would not stop on the cleanup's TERM

	for i := 1; i <= 2; i++ {
		res := remoteWrite(t, ad, i == 2, written(i))
		require.Equal(t, http.StatusServiceUnavailable, res.Status, "write %d to a frozen node: %s", i, res.Body)
	}
	status, body := remoteReadStatus(t, ad, q)
	require.Equal(t, http.StatusServiceUnavailable, status, "read from a frozen node: %s", body)

	resume()
	back := time.Now()
	require.Eventually(t, func() bool {
		return remoteWrite(t, ad, false, written(3)).Status == http.StatusNoContent
	}, 20*time.Second, 200*time.Millisecond, "no write succeeded within 20 s of the node running again")
	t.Logf("writing again %v after the node", time.Since(back).Round(100*time.Millisecond))
	// Writes that timed out may still be applied once the node runs: a
	// 503 confirms nothing, and the retry rewrites the same cells.
	var got []string
	for _, s := range remoteReadSeries(t, ad, prompb.ReadRequest_SAMPLES, q)[0] {
		got = append(got, s.Labels.Get("i"))
	}
	require.Subset(t, got, []string{"0", "3"}, "series 0 and 3 read back")
}

// nodePID is the PID of the node's JVM, which cassandra.sh records.
func nodePID(t *testing.T, n *cassandraNode) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(n.runDir, "run.*", "pid"))
	require.NoError(t, err)
	require.Len(t, files, 1, "the node's pid file")
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// allStopped reports whether every thread of process pid is stopped (or
// gone), by the state field of /proc/PID/task/TID/stat.
func allStopped(t *testing.T, pid int) bool {
	t.Helper()
	stats, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "stat"))
	require.NoError(t, err)
	require.NotEmpty(t, stats, "no threads of PID %d", pid)
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		// The state follows the command's closing parenthesis.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false
		}
		switch b[i+2] {
		case 'T', 't', 'Z', 'X':
		default:
			return false
		}
	}
	return true
}

// remoteReadStatus sends a SAMPLES read and returns the answer's status and
// body, whatever the status.
func remoteReadStatus(t *testing.T, a *adapter, q readQuery) (int, string) {
	t.Helper()
	pq := &prompb.Query{StartTimestampMs: q.Start, EndTimestampMs: q.End}
	for _, m := range q.Matchers {
		pq.Matchers = append(pq.Matchers, &prompb.LabelMatcher{Type: matchTypes[m.Type], Name: m.Name, Value: m.Value})
	}
	body, err := (&prompb.ReadRequest{Queries: []*prompb.Query{pq}}).Marshal()
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, a.url("/api/v1/read"), bytes.NewReader(snappy.Encode(nil, body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Read-Version", "0.1.0")
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
