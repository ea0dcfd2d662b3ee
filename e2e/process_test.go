package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// stopTimeout bounds how long a process may take to exit after SIGTERM
// before it is killed. The adapter drains requests for up to 30 s itself.
const stopTimeout = 40 * time.Second

// process is a child process whose output is kept for the test log.
type process struct {
	name string
	// cleanupSignal stops the process at the end of the test.
	cleanupSignal syscall.Signal
	cmd           *exec.Cmd
	out           *syncBuffer
	done          chan struct{} // closed when the process has exited
	err           error         // cmd.Wait's result, valid after done
}

// startProcess starts bin and registers a cleanup that stops it (SIGTERM,
// or p.cleanupSignal, then SIGKILL after stopTimeout) and, if the test
// failed, logs its output.
func startProcess(t testing.TB, name, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cleanupSignal: syscall.SIGTERM, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = sysProcAttr()
	require.NoError(t, p.cmd.Start(), "starting %s", name)
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t, p.cleanupSignal)
		if t.Failed() {
			t.Logf("----- output of %s (%s) -----\n%s----- end of %s -----", name, strings.Join(p.cmd.Args, " "), p.out.String(), name)
		}
	})
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig, waits for the exit (killing the process after
// stopTimeout) and returns the exit code; -1 means killed by a signal.
// Stopping an exited process only returns its code.
func (p *process) stop(t testing.TB, sig syscall.Signal) int {
	t.Helper()
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			t.Errorf("%s did not exit within %v of %v; killing it", p.name, stopTimeout, sig)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	return p.exitCode()
}

// wait waits up to d for the process to exit by itself and returns its exit
// code.
func (p *process) wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s still runs after %v; output:\n%s", p.name, d, p.out.String())
	}
	return p.exitCode()
}

func (p *process) exitCode() int {
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		return -1
	}
	return 0
}

// syncBuffer is a bytes.Buffer safe for the two copiers of stdout and stderr
// and for readers in the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeAddr returns a loopback address with a port nobody listened on a
// moment ago. Another process may take it before ours binds it: callers
// retry on "address already in use".
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// waitReady polls url until it answers 200, the process exits, or timeout.
func waitReady(t testing.TB, p *process, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if p.exited() {
			t.Fatalf("%s exited (code %d) before %s was ready; output:\n%s", p.name, p.exitCode(), url, p.out.String())
		}
		status, body, err := httpGet(url)
		if err == nil && status == http.StatusOK {
			return
		}
		last = fmt.Sprintf("status %d %q err %v", status, body, err)
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not ready within %v (last: %s); output:\n%s", p.name, url, timeout, last, p.out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var quickClient = &http.Client{Timeout: 10 * time.Second}

func httpGet(url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := quickClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// adapter is one running adapter process.
type adapter struct {
	*process
	addr string // host:port
}

func (a *adapter) url(path string) string { return "http://" + a.addr + path }

// storageArgs selects an engine for the adapter.
type storageArgs []string

func embeddedStorage(dir string) storageArgs {
	return storageArgs{"--storage=embedded", "--storage.path=" + dir}
}

func cassandraStorage(addr, keyspace string) storageArgs {
	return storageArgs{
		"--storage=cassandra",
		"--cassandra.hosts=" + addr,
		"--cassandra.keyspace=" + keyspace,
		"--cassandra.write-consistency=ONE",
		"--cassandra.read-consistency=ONE",
		// The test node is shared and slow on a busy machine.
		"--cassandra.timeout=30s",
	}
}

// adapterReadyTimeout is generous: creating the tables of a fresh keyspace
// on a loaded single Cassandra node can take a minute.
const adapterReadyTimeout = 3 * time.Minute

// startAdapter starts the adapter on addr (a free port when empty) and waits
// until /-/ready answers 200.
func startAdapter(t testing.TB, addr string, storage storageArgs) *adapter {
	t.Helper()
	p, addr := startServer(t, "adapter", adapterBin, addr, func(addr string) []string {
		// Rollups off unless a test turns them on: their _rollup
		// metrics would show in the metric listings these tests compare
		// with Prometheus's. The rollup job has tests of its own
		// (rollupjob, adapter).
		args := []string{"--web.listen-address=" + addr, "--log.level=info"}
		if !slices.ContainsFunc(storage, func(a string) bool { return strings.HasPrefix(a, "--rollup.resolutions=") }) {
			args = append(args, "--rollup.resolutions=")
		}
		return append(args, storage...)
	}, adapterReadyTimeout)
	return &adapter{process: p, addr: addr}
}

// startServer starts a server process listening on addr, or on a free
// loopback port when addr is empty, and waits until its /-/ready answers 200.
// args builds the command line for an address. It returns the process and
// its address.
func startServer(t testing.TB, name, bin, addr string, args func(addr string) []string, readyTimeout time.Duration) (*process, string) {
	t.Helper()
	fixed := addr != ""
	for attempt := 1; ; attempt++ {
		if !fixed {
			addr = freeAddr(t)
		}
		p := startProcess(t, name+"@"+addr, bin, args(addr)...)
		if ok := waitListening(t, p, addr); !ok && attempt < 5 {
			// The port was taken between freeAddr and bind, or, on a
			// restart, is still held: try again.
			time.Sleep(500 * time.Millisecond)
			continue
		}
		waitReady(t, p, "http://"+addr+"/-/ready", readyTimeout)
		return p, addr
	}
}

// waitListening reports false when the process exited because addr was in
// use; it returns true as soon as /-/healthy answers 200.
func waitListening(t testing.TB, p *process, addr string) bool {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if p.exited() {
			if strings.Contains(p.out.String(), "address already in use") {
				return false
			}
			t.Fatalf("%s exited (code %d) at start; output:\n%s", p.name, p.exitCode(), p.out.String())
		}
		if status, _, err := httpGet("http://" + addr + "/-/healthy"); err == nil && status == http.StatusOK {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: nothing answers on %s after a minute; output:\n%s", p.name, addr, p.out.String())
	return false
}

// envOrSkip returns the value of the environment variable name. When it is
// unset the test is skipped, or fails under CI=true: CI must never pass by
// skipping.
func envOrSkip(t testing.TB, name, why string) string {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(name))
	if v != "" {
		return v
	}
	cassandratest.SkipUnlessCI(t, "%s is not set (%s): run the tests with scripts/test.sh", name, why)
	return ""
}
