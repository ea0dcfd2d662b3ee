package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// cassandraNode is a Cassandra node of one test's own, started by
// scripts/cassandra.sh in a private run dir, for tests that must stop it or
// run it with other settings than the shared node of KAIROS_TEST_CASSANDRA.
type cassandraNode struct {
	runDir string
	opts   nodeOptions
	addr   string // host:port of CQL
}

// nodeOptions select the variants of scripts/cassandra.sh.
type nodeOptions struct {
	// auth enables password authentication (superuser cassandra/cassandra).
	auth bool
	// tlsDir, when set, enables client TLS only, with the node's key and
	// certificate chain in tlsDir/node.pem and the CA in tlsDir/ca.pem.
	tlsDir string
}

// privateNodes serializes private nodes: each takes about 1.5 GiB, and the
// machine runs the shared node besides.
var privateNodes sync.Mutex

// scriptTimeout bounds one cassandra.sh call: its own start timeout is
// 180 s, a stop takes at most 40 s.
const scriptTimeout = 4 * time.Minute

// startCassandraNode starts a private node and stops it, removing its data,
// when the test ends. Like the other Cassandra tests it runs only when Cassandra tests
// are enabled (KAIROS_TEST_CASSANDRA, set by scripts/test.sh), and it is
// skipped, or fails under CI=true, when this machine cannot run a node
// (no Java 17).
func startCassandraNode(t *testing.T, opts nodeOptions) *cassandraNode {
	t.Helper()
	envOrSkip(t, "KAIROS_TEST_CASSANDRA", "Cassandra tests are enabled by scripts/test.sh")
	n := &cassandraNode{runDir: t.TempDir(), opts: opts}
	if out, err := n.script("check"); err != nil {
		cassandratest.SkipUnlessCI(t, "cannot run a private Cassandra node: %v\n%s", err, out)
	}

	privateNodes.Lock()
	// Registered first, so it runs last: after the node is stopped.
	t.Cleanup(privateNodes.Unlock)
	t.Cleanup(func() {
		if out, err := n.script("stop"); err != nil {
			t.Errorf("stopping the private Cassandra node: %v\n%s", err, out)
		}
	})
	n.guard(t)

	out, err := n.script("start")
	require.NoError(t, err, "scripts/cassandra.sh start:\n%s", out)
	n.addr = parseNodeEnv(t, out)
	return n
}

// stopKeep stops the node and keeps its data for restart.
func (n *cassandraNode) stopKeep(t *testing.T) {
	t.Helper()
	out, err := n.script("stop", "--keep")
	require.NoError(t, err, "scripts/cassandra.sh stop --keep:\n%s", out)
}

// restart starts the node again on the same data and ports.
func (n *cassandraNode) restart(t *testing.T) {
	t.Helper()
	out, err := n.script("restart")
	require.NoError(t, err, "scripts/cassandra.sh restart:\n%s", out)
	require.Equal(t, n.addr, parseNodeEnv(t, out), "a restart must keep the address")
}

// script runs scripts/cassandra.sh on the node's run dir and returns its
// stdout and stderr together.
func (n *cassandraNode) script(args ...string) (string, error) {
	auth := "0"
	if n.opts.auth {
		auth = "1"
	}
	return runCassandraScript([]string{"KAIROS_RUN_DIR=" + n.runDir, "CASSANDRA_AUTH=" + auth, "CASSANDRA_TLS_DIR=" + n.opts.tlsDir}, scriptTimeout, args...)
}

// runCassandraScript runs scripts/cassandra.sh with env added to the test's
// environment, killing it after timeout, and returns its stdout and stderr
// together.
func runCassandraScript(env []string, timeout time.Duration, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join("..", "scripts", "cassandra.sh"), args...)
	cmd.Env = append(os.Environ(), env...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("scripts/cassandra.sh %s did not finish within %v", strings.Join(args, " "), timeout)
	}
}

// guard starts a watchdog that stops the node if this test binary dies
// without running its cleanups (a -timeout panic, a kill): the JVM runs in
// its own session, so nothing else would end it. It polls the test's PID
// rather than waiting for a signal, and has its own session, so that a
// Ctrl-C reaching the test does not kill it first.
func (n *cassandraNode) guard(t *testing.T) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "scripts", "cassandra.sh"))
	require.NoError(t, err)
	cmd := exec.Command("bash", "-c", `while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$0" stop`,
		script, strconv.Itoa(os.Getpid()))
	cmd.Env = append(os.Environ(), "KAIROS_RUN_DIR="+n.runDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	require.NoError(t, cmd.Start(), "starting the node's watchdog")
	// Cleanups run in reverse: this one, registered after the stop,
	// ends the watchdog before the node is stopped normally.
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// parseNodeEnv finds KAIROS_TEST_CASSANDRA=host:port in cassandra.sh's output.
func parseNodeEnv(t *testing.T, out string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if addr, ok := strings.CutPrefix(line, "KAIROS_TEST_CASSANDRA="); ok {
			return strings.TrimSpace(addr)
		}
	}
	t.Fatalf("no KAIROS_TEST_CASSANDRA=... in the output of scripts/cassandra.sh:\n%s", out)
	return ""
}

// nodeLogTail returns the end of the node's system log, for failure messages.
func (n *cassandraNode) nodeLogTail() string {
	logs, _ := filepath.Glob(filepath.Join(n.runDir, "run.*", "logs", "system.log"))
	if len(logs) == 0 {
		return "(no system.log)"
	}
	b, _ := os.ReadFile(logs[0])
	if i := len(b) - 8000; i > 0 {
		b = b[i:]
		if j := bytes.IndexByte(b, '\n'); j >= 0 {
			b = b[j+1:]
		}
	}
	return string(b)
}
