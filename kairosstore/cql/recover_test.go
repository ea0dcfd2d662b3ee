package cql_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
)

// gate is a TCP proxy in front of the test node that can refuse new
// connections and cut the open ones: what an overloaded node looks like to
// the driver, whose connection setup and heartbeats time out.
type gate struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	pass  int // new connections still to forward; <0: all
	conns []net.Conn
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &gate{ln: ln, target: target, pass: -1}
	t.Cleanup(func() {
		_ = ln.Close()
		g.setPass(0, true)
	})
	go g.serve()
	return g
}

func (g *gate) addr() string { return g.ln.Addr().String() }

func (g *gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		if g.pass == 0 {
			g.mu.Unlock()
			_ = c.Close()
			continue
		}
		if g.pass > 0 {
			g.pass--
		}
		g.mu.Unlock()
		up, err := net.Dial("tcp", g.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		g.mu.Lock()
		g.conns = append(g.conns, c, up)
		g.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
	}
}

// setPass forwards the next n new connections (n < 0: all) and refuses the
// rest; cut closes the open ones first.
func (g *gate) setPass(n int, cut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pass = n
	if cut {
		for _, c := range g.conns {
			_ = c.Close()
		}
		g.conns = nil
	}
}

// passed reports whether the connections setPass allowed went through.
func (g *gate) passed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pass == 0
}

// TestServesAgainAfterHostMarkedDown reproduces the state the driver was
// left in after a write storm (issue #16): the pool of the only host could
// not be refilled while the node was overloaded, so the driver marked the
// host down, but its control connection had reconnected; nothing then
// retried the host for up to a minute (the driver's default
// ReconnectInterval) although the node served again, and every request
// failed at once with "no hosts available in the pool". The engine must
// serve again within seconds of the node.
func TestServesAgainAfterHostMarkedDown(t *testing.T) {
	if testing.Short() {
		cassandratest.SkipUnlessCI(t, "takes 15 s or more")
	}
	addr, ks := cassandratest.Keyspace(t)
	g := newGate(t, addr)
	cfg := testConfig(g.addr(), ks)
	cfg.Timeout, cfg.ConnectTimeout = 2*time.Second, time.Second
	e, err := cql.Open(t.Context(), cfg, nil)
	require.NoError(t, err)
	defer e.Close()
	require.NoError(t, e.Setup(t.Context()))
	batch := workload(time.Now().UnixMilli(), 10, 1)
	require.NoError(t, e.Write(t.Context(), batch))

	// The node stops answering: every connection is cut and none is
	// accepted, until the driver has given the host up. Then one
	// connection gets through: when the control connection takes it, the
	// pool, refilled after it, does not get through (three attempts a
	// second apart, the driver's default reconnection policy), and the
	// driver marks the host down again. When the pool takes it instead,
	// the host is simply up: the scenario is set up again.
	var ready error
	for attempt := 1; attempt <= 4; attempt++ {
		g.setPass(0, true)
		require.Eventually(t, func() bool { return errors.Is(e.Ready(t.Context()), gocql.ErrNoConnections) }, 30*time.Second, 100*time.Millisecond,
			"the driver did not give the host up with every connection cut")
		g.setPass(1, false)
		require.Eventually(t, func() bool { return g.passed() }, 30*time.Second, 50*time.Millisecond,
			"the control connection did not reconnect")
		time.Sleep(8 * time.Second)
		if ready = e.Ready(t.Context()); errors.Is(ready, gocql.ErrNoConnections) {
			break
		}
		t.Logf("attempt %d: the connection let through went to the pool, not the control connection; again", attempt)
	}
	require.ErrorIs(t, ready, gocql.ErrNoConnections, "the host is not down after its pool failed to refill")

	// The node serves again.
	g.setPass(-1, false)
	back := time.Now()
	require.Eventually(t, func() bool { return e.Ready(t.Context()) == nil }, 15*time.Second, 100*time.Millisecond,
		"the engine did not serve again within 15 s of the node")
	t.Logf("serving again %v after the node", time.Since(back).Round(100*time.Millisecond))
	require.NoError(t, e.Write(t.Context(), batch))
}
