// Package cassandratest gives tests a real Cassandra node: the one started by
// scripts/test.sh (or scripts/cassandra.sh start), whose address is in the
// KAIROS_TEST_CASSANDRA environment variable as host:port.
//
// When no node is available the tests using it are skipped, except under
// CI=true, where they fail: CI must never pass by skipping the storage tests.
//
// Each test gets its own keyspace (SimpleStrategy, RF 1), dropped when the
// test ends, so tests and test packages may run in parallel on one node.
package cassandratest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// EnvAddr names the environment variable holding the test node's host:port.
const EnvAddr = "KAIROS_TEST_CASSANDRA"

// MaxKeyspaceLen is Cassandra's limit on keyspace names.
const MaxKeyspaceLen = 48

const howTo = "run the tests with scripts/test.sh, or start a node with " +
	"`export \"$(scripts/cassandra.sh start)\"` (stop it with scripts/cassandra.sh stop)"

// ddlTimeout bounds schema changes, which are slow on a busy 2-core machine.
const ddlTimeout = 2 * time.Minute

var reach sync.Map // addr -> error (nil when reachable), probed once per process

// Addr returns the test node's host:port. It skips the test (fails it under
// CI=true) when KAIROS_TEST_CASSANDRA is unset or nothing listens there.
func Addr(t testing.TB) string {
	t.Helper()
	addr := strings.TrimSpace(os.Getenv(EnvAddr))
	if addr == "" {
		unavailable(t, EnvAddr+" is not set")
	}
	if _, _, err := splitAddr(addr); err != nil {
		// A malformed value is a setup mistake: fail even outside CI.
		t.Fatalf("cassandratest: %s=%q: %v", EnvAddr, addr, err)
	}
	v, ok := reach.Load(addr)
	if !ok {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			conn.Close()
		}
		v, _ = reach.LoadOrStore(addr, err)
	}
	if err, _ := v.(error); err != nil {
		unavailable(t, fmt.Sprintf("%s=%s is unreachable: %v", EnvAddr, addr, err))
	}
	return addr
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	SkipUnlessCI(t, "cassandratest: no Cassandra test node (%s): %s", why, howTo)
}

// SkipUnlessCI skips t, or fails it when CI is set to a true value (CI=true,
// CI=1): a test that could not run proves nothing, and CI must never pass
// by skipping one.
func SkipUnlessCI(t testing.TB, format string, args ...any) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("CI is set, so this fails instead of skipping: "+format, args...)
	}
	t.Skipf(format, args...)
}

func splitAddr(addr string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("want host:port: %w", err)
	}
	port, err = strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, port, nil
}

// Cluster returns a driver configuration for the node at addr (host:port),
// bound to keyspace (which may be empty), with settings suited to one local
// test node: consistency ONE, generous timeouts.
func Cluster(addr, keyspace string) *gocql.ClusterConfig {
	host, port, err := splitAddr(addr)
	if err != nil {
		host, port = addr, 9042
	}
	cfg := gocql.NewCluster(host)
	// Port applies to the contact point and to every host found in system.local/peers.
	cfg.Port = port
	cfg.Keyspace = keyspace
	cfg.Consistency = gocql.One
	cfg.Timeout = 30 * time.Second
	cfg.ConnectTimeout = 15 * time.Second
	cfg.NumConns = 1
	cfg.MaxWaitSchemaAgreement = ddlTimeout
	return cfg
}

// Keyspace creates an empty keyspace for this test and drops it when the test
// ends. It returns the node's host:port and the keyspace name.
func Keyspace(t testing.TB) (addr, keyspace string) {
	t.Helper()
	addr = Addr(t)
	keyspace = KeyspaceName(t.Name())

	admin := openSession(t, Cluster(addr, ""))
	create := fmt.Sprintf("CREATE KEYSPACE IF NOT EXISTS %s WITH replication = "+
		"{'class': 'SimpleStrategy', 'replication_factor': 1} AND durable_writes = false", keyspace)
	if err := ddl(admin, create); err != nil {
		admin.Close()
		t.Fatalf("cassandratest: %s: %v", create, err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		drop := "DROP KEYSPACE IF EXISTS " + keyspace
		if err := ddl(admin, drop); err != nil {
			// Not fatal: the node's data dir is thrown away after the run anyway.
			t.Logf("cassandratest: cleanup: %s: %v", drop, err)
		}
	})
	return addr, keyspace
}

// Session opens a session on the test node bound to keyspace (empty for none)
// and closes it when the test ends. Typical use:
//
//	_, ks := cassandratest.Keyspace(t)
//	s := cassandratest.Session(t, ks)
func Session(t testing.TB, keyspace string) *gocql.Session {
	t.Helper()
	s := openSession(t, Cluster(Addr(t), keyspace))
	t.Cleanup(s.Close)
	return s
}

// Exec runs CQL statements in order on s and fails the test on the first
// error. Schema changes wait for schema agreement.
func Exec(t testing.TB, s *gocql.Session, stmts ...string) {
	t.Helper()
	for _, stmt := range stmts {
		if err := ddl(s, stmt); err != nil {
			t.Fatalf("cassandratest: %s: %v", stmt, err)
		}
	}
}

func openSession(t testing.TB, cfg *gocql.ClusterConfig) *gocql.Session {
	t.Helper()
	var s *gocql.Session
	var err error
	// The node may still be settling right after start: retry briefly.
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * time.Second)
		}
		if s, err = cfg.CreateSession(); err == nil {
			return s
		}
	}
	t.Fatalf("cassandratest: connecting to %s:%d (keyspace %q): %v", cfg.Hosts[0], cfg.Port, cfg.Keyspace, err)
	return nil
}

// ddl runs one statement, retrying client-side timeouts (schema changes queue
// up when many tests create keyspaces at once; the statements used here are
// idempotent), then waits for schema agreement.
func ddl(s *gocql.Session, stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), ddlTimeout)
	defer cancel()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		err = s.Query(stmt).Idempotent(true).ExecContext(ctx)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return err
	}
	return s.AwaitSchemaAgreement(ctx)
}

func retryable(err error) bool {
	if errors.Is(err, gocql.ErrTimeoutNoResponse) || errors.Is(err, gocql.ErrNoConnections) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var re gocql.RequestError
	if errors.As(err, &re) {
		switch re.Code() {
		case gocql.ErrCodeWriteTimeout, gocql.ErrCodeReadTimeout, gocql.ErrCodeOverloaded,
			gocql.ErrCodeUnavailable, gocql.ErrCodeServer:
			return true
		}
	}
	return false
}

// KeyspaceName derives a fresh, valid keyspace name from a test name: "t_",
// the lower-cased name with runs of other characters turned into "_", cut so
// that "_" and 8 random hex digits fit within MaxKeyspaceLen.
func KeyspaceName(testName string) string {
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		panic(err)
	}
	tail := "_" + hex.EncodeToString(suffix[:])

	var b strings.Builder
	b.WriteString("t_")
	lastUnderscore := true
	for _, r := range strings.ToLower(testName) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			lastUnderscore = false
		} else if !lastUnderscore {
			b.WriteByte('_')
			lastUnderscore = true
		}
	}
	name := strings.TrimRight(b.String(), "_")
	if limit := MaxKeyspaceLen - len(tail); len(name) > limit {
		name = strings.TrimRight(name[:limit], "_")
	}
	return name + tail
}
