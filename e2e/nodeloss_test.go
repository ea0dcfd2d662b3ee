package e2e

// TestNodeLoss runs a three-node Cassandra cluster (scripts/cassandra.sh in
// cluster mode, CASSANDRA_NODES=3, on 127.0.0.1-3) with 1 GiB heaps: it needs
// about 4.5 GiB of RAM (measured: 4.4 GiB RSS for the three nodes, ~1.48 GiB
// each) on top of the adapter and the test, and takes about two minutes on
// 2 cores (30 s to start the cluster, 40 s of load, restarts and stops).

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// The load of TestNodeLoss: nodeLossRate remote-write requests a second of
// nodeLossSeries series with one sample each, for nodeLossBefore through the
// healthy cluster and nodeLossDuring after node 2 was killed.
const (
	nodeLossSeries   = 200
	nodeLossRate     = 10
	nodeLossBefore   = 20 * time.Second
	nodeLossDuring   = 20 * time.Second
	nodeLossInFlight = 16
	// nodeLossStep is the time between the samples of one series, one per
	// request.
	nodeLossStep = int64(100)
)

// nodeLossT0 is the timestamp of request 0's samples.
var nodeLossT0 = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// TestNodeLoss kills (SIGKILL) one node of three under a steady remote-write
// load, with replication factor 3 and QUORUM writes and reads, and requires:
// every remote write answered 204, before, during and after the loss;
// remote reads answering, and returning every acknowledged sample, during
// the loss; and, once the node is back, every sample written readable at
// QUORUM, also with another node stopped (so QUORUM reads do not depend on
// hints or repair having brought the killed node up to date).
func TestNodeLoss(t *testing.T) {
	if testing.Short() {
		cassandratest.SkipUnlessCI(t, "runs a three-node Cassandra cluster")
	}
	began := time.Now()
	c := startCluster(t, 3)
	rss := c.rssKB(t)

	ad := startAdapter(t, "", storageArgs{
		"--storage=cassandra",
		"--cassandra.hosts=" + c.hosts,
		"--cassandra.keyspace=e2e_nodeloss",
		"--cassandra.replication={'class': 'SimpleStrategy', 'replication_factor': 3}",
		"--cassandra.write-consistency=QUORUM",
		"--cassandra.read-consistency=QUORUM",
		"--cassandra.timeout=10s",
	})

	ld := &nodeLossLoad{ad: ad, done: make(chan struct{}), results: map[int]nodeLossResult{}}
	ld.start()
	t.Cleanup(ld.stop) // before the adapter stops, also on failure

	// Through the healthy cluster; reads meanwhile.
	reads := 0
	readUntil := func(end time.Time) {
		for time.Now().Before(end) {
			ld.checkRead(t, ad)
			reads++
			time.Sleep(time.Second)
		}
	}
	readUntil(time.Now().Add(nodeLossBefore))
	if r := c.rssKB(t); r > rss {
		rss = r
	}

	out, err := c.script("stop-node", "2", "--kill")
	require.NoError(t, err, "killing node 2:\n%s", out)
	killed := time.Now()
	ld.setPhase(1)
	readsBefore := reads
	readUntil(killed.Add(nodeLossDuring))
	readsDuring := reads - readsBefore
	ld.stop()

	sent, failed := ld.summary()
	for phase, name := range []string{"before the loss", "during the loss"} {
		if failed[phase] > 0 {
			t.Errorf("%s: %d of %d remote writes failed: %v", name, failed[phase], sent[phase], ld.failures(phase, 10))
		}
	}
	require.False(t, t.Failed(), "remote writes failed")
	require.Positive(t, sent[1], "no remote write during the loss")

	startNode := time.Now()
	out, err = c.script("start-node", "2")
	require.NoError(t, err, "starting node 2 again:\n%s", out)
	restartTook := time.Since(startNode)
	n := ld.requests()
	ld.checkAll(t, ad, n, "node 2 back")

	out, err = c.script("stop-node", "3")
	require.NoError(t, err, "stopping node 3:\n%s", out)
	ld.checkAll(t, ad, n, "node 2 back, node 3 stopped")

	t.Logf("cluster of 3 nodes with 1 GiB heaps: %.2f GiB RSS in all (highest of two measurements)", float64(rss)/(1<<20))
	t.Logf("remote writes of %d series each: %d before the loss, %d during the %.0fs loss of node 2 (%.1f/s); failed: %d before, %d during",
		nodeLossSeries, sent[0], sent[1], nodeLossDuring.Seconds(), float64(sent[1])/nodeLossDuring.Seconds(), failed[0], failed[1])
	t.Logf("remote reads at QUORUM during the loss: %d, all answered with every acknowledged sample", readsDuring)
	t.Logf("node 2 started again and seen UP by the others in %.1fs; %d samples read back at QUORUM twice (node 2 back; then node 3 stopped): identical",
		restartTook.Seconds(), n*nodeLossSeries)
	t.Logf("test duration %.0fs", time.Since(began).Seconds())
}

// nodeLossResult is the outcome of one remote write.
type nodeLossResult struct {
	phase  int
	status int
	err    string
}

// nodeLossLoad sends request i, for i = 0, 1, ..., every 1/nodeLossRate s,
// at most nodeLossInFlight at once; request i carries the sample at
// nodeLossT0 + i*nodeLossStep of every series.
type nodeLossLoad struct {
	ad       *adapter
	done     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	mu      sync.Mutex
	phase   int
	next    int
	results map[int]nodeLossResult
}

func (l *nodeLossLoad) start() {
	client := &http.Client{Timeout: 2 * time.Minute}
	sem := make(chan struct{}, nodeLossInFlight)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(time.Second / nodeLossRate)
		defer tick.Stop()
		for {
			select {
			case <-l.done:
				return
			case <-tick.C:
			}
			select {
			case <-l.done:
				return
			case sem <- struct{}{}:
			}
			l.mu.Lock()
			i, phase := l.next, l.phase
			l.next++
			l.mu.Unlock()
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				defer func() { <-sem }()
				body := snappy.Encode(nil, encodeWriteV1(nodeLossRequest(i)))
				status, err := postWrite(client, l.ad, body)
				r := nodeLossResult{phase: phase, status: status}
				if err != nil {
					r.err = errorKind(err)
				}
				l.mu.Lock()
				l.results[i] = r
				l.mu.Unlock()
			}()
		}
	}()
}

// stop ends the load and waits for the requests in flight.
func (l *nodeLossLoad) stop() {
	l.stopOnce.Do(func() { close(l.done) })
	l.wg.Wait()
}

func (l *nodeLossLoad) setPhase(p int) {
	l.mu.Lock()
	l.phase = p
	l.mu.Unlock()
}

// requests is the number of requests sent; call after stop.
func (l *nodeLossLoad) requests() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// summary counts the requests sent and failed (not 204) by phase.
func (l *nodeLossLoad) summary() (sent, failed [2]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.results {
		sent[r.phase]++
		if r.status != http.StatusNoContent {
			failed[r.phase]++
		}
	}
	return sent, failed
}

// failures describes up to limit failed requests of a phase.
func (l *nodeLossLoad) failures(phase, limit int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i, r := range l.results {
		if r.phase == phase && r.status != http.StatusNoContent && len(out) < limit {
			out = append(out, fmt.Sprintf("request %d: status %d %s", i, r.status, r.err))
		}
	}
	return out
}

// acked returns the requests answered 204 so far.
func (l *nodeLossLoad) acked() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for i, r := range l.results {
		if r.status == http.StatusNoContent {
			out = append(out, i)
		}
	}
	return out
}

func nodeLossValue(i, k int) float64 { return float64(i)*1000 + float64(k) + 0.25 }

func nodeLossLabels(k int) labels.Labels {
	return labels.FromStrings("__name__", "e2e_nodeloss", "job", "e2e_nodeloss", "s", strconv.Itoa(k))
}

func nodeLossRequest(i int) []series {
	out := make([]series, nodeLossSeries)
	for k := range out {
		out[k] = series{Labels: nodeLossLabels(k), Samples: []sample{{T: nodeLossT0 + int64(i)*nodeLossStep, Bits: math.Float64bits(nodeLossValue(i, k))}}}
	}
	return out
}

// checkRead reads series s="0" and requires every sample acknowledged
// before the read.
func (l *nodeLossLoad) checkRead(t *testing.T, ad *adapter) {
	t.Helper()
	acked := l.acked()
	q := readQuery{Start: nodeLossT0, End: nodeLossT0 + time.Hour.Milliseconds(), Matchers: []*labels.Matcher{
		mustMatcher(labels.MatchEqual, "job", "e2e_nodeloss"), mustMatcher(labels.MatchEqual, "s", "0")}}
	got := remoteReadSeries(t, ad, prompb.ReadRequest_SAMPLES, q)[0]
	have := map[int64]uint64{}
	for _, s := range got {
		for _, smp := range s.Samples {
			have[smp.T] = smp.Bits
		}
	}
	for _, i := range acked {
		bits, ok := have[nodeLossT0+int64(i)*nodeLossStep]
		if !ok || bits != math.Float64bits(nodeLossValue(i, 0)) {
			t.Fatalf("remote read misses the acknowledged sample of request %d (present %v, bits %#x); it returned %d samples for %d acknowledged requests",
				i, ok, bits, len(have), len(acked))
		}
	}
}

// checkAll reads every series and requires exactly the samples of requests
// 0..n-1.
func (l *nodeLossLoad) checkAll(t *testing.T, ad *adapter, n int, when string) {
	t.Helper()
	q := readQuery{Start: nodeLossT0, End: nodeLossT0 + time.Hour.Milliseconds(), Matchers: []*labels.Matcher{
		mustMatcher(labels.MatchEqual, "job", "e2e_nodeloss")}}
	got := remoteReadSeries(t, ad, prompb.ReadRequest_SAMPLES, q)[0]
	require.Len(t, got, nodeLossSeries, "%s: series read", when)
	for _, s := range got {
		k, err := strconv.Atoi(s.Labels.Get("s"))
		require.NoError(t, err, "%s: series %s", when, s.Labels)
		require.Equal(t, nodeLossLabels(k), s.Labels, when)
		var bad []string
		for i := 0; i < n || i < len(s.Samples); i++ {
			want := sample{T: nodeLossT0 + int64(i)*nodeLossStep, Bits: math.Float64bits(nodeLossValue(i, k))}
			switch {
			case i >= len(s.Samples):
				bad = append(bad, fmt.Sprintf("missing %v", want))
			case i >= n:
				bad = append(bad, fmt.Sprintf("extra %v", s.Samples[i]))
			case s.Samples[i] != want:
				bad = append(bad, fmt.Sprintf("sample %d: got %v, want %v", i, s.Samples[i], want))
			}
			if len(bad) == 5 {
				break
			}
		}
		if len(bad) > 0 {
			t.Fatalf("%s: series %s: %d samples read, %d written; first differences:\n%s", when, s.Labels, len(s.Samples), n, strings.Join(bad, "\n"))
		}
	}
}

// cassandraCluster is a cluster of the test's own, started by
// scripts/cassandra.sh in cluster mode.
type cassandraCluster struct {
	runDir string
	nodes  int
	hosts  string // the adapter's --cassandra.hosts
}

// startCluster starts a cluster of n nodes and stops it, removing its data,
// when the test ends. It is skipped, or fails under CI=true, when Cassandra
// tests are not enabled or this machine cannot run the cluster (no Java 17,
// or 127.0.0.2.. cannot be bound).
func startCluster(t *testing.T, n int) *cassandraCluster {
	t.Helper()
	envOrSkip(t, "KAIROS_TEST_CASSANDRA", "Cassandra tests are enabled by scripts/test.sh")
	c := &cassandraCluster{runDir: t.TempDir(), nodes: n}
	if out, err := c.script("check"); err != nil {
		cassandratest.SkipUnlessCI(t, "cannot run a %d-node Cassandra cluster: %v\n%s", n, err, out)
	}

	// One private node or cluster at a time (see privateNodes).
	privateNodes.Lock()
	t.Cleanup(privateNodes.Unlock)
	t.Cleanup(func() {
		if out, err := c.script("stop"); err != nil {
			t.Errorf("stopping the Cassandra cluster: %v\n%s", err, out)
		}
	})
	// The watchdog's plain "stop" stops the whole cluster of the run dir.
	(&cassandraNode{runDir: c.runDir}).guard(t)

	out, err := c.script("start")
	require.NoError(t, err, "CASSANDRA_NODES=%d scripts/cassandra.sh start:\n%s", n, out)
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "KAIROS_TEST_CASSANDRA_HOSTS="); ok {
			c.hosts = strings.TrimSpace(v)
		}
	}
	require.NotEmpty(t, c.hosts, "no KAIROS_TEST_CASSANDRA_HOSTS=... in the output of scripts/cassandra.sh start:\n%s", out)
	return c
}

// rssKB is the RSS of the running nodes together, in kB.
func (c *cassandraCluster) rssKB(t *testing.T) int64 {
	t.Helper()
	var sum int64
	for i := 1; i <= c.nodes; i++ {
		b, err := os.ReadFile(filepath.Join(c.runDir, fmt.Sprintf("node%d", i), "pid"))
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		sum += procStatusKB(t, pid, "VmRSS")
	}
	return sum
}

// script runs scripts/cassandra.sh on the cluster's run dir; a cluster takes
// longer than one node.
func (c *cassandraCluster) script(args ...string) (string, error) {
	env := []string{"KAIROS_RUN_DIR=" + c.runDir, "CASSANDRA_NODES=" + strconv.Itoa(c.nodes), "CASSANDRA_AUTH=0", "CASSANDRA_TLS_DIR="}
	return runCassandraScript(env, 2*scriptTimeout, args...)
}
