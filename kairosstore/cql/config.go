package cql

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/lz4"
	"github.com/apache/cassandra-gocql-driver/v2/snappy"
)

// Defaults applied by Open to zero fields of Config. The keyspace,
// replication and consistency defaults are KairosDB's (docs/kairosdb-layout.md §1.1,
// §11), so an adapter and a KairosDB with default settings share one keyspace.
const (
	DefaultKeyspace         = "kairosdb"
	DefaultReplication      = "{'class': 'SimpleStrategy','replication_factor' : 1}"
	DefaultWriteConsistency = "QUORUM"
	DefaultReadConsistency  = "ONE"
	DefaultTimeout          = 10 * time.Second
	DefaultConnectTimeout   = 5 * time.Second
	DefaultPageSize         = 5000
	DefaultMaxInFlight      = 128
	DefaultQueueTimeout     = 5 * time.Second
	DefaultReconnect        = time.Second
	DefaultCompression      = "snappy"
)

// Config is the plain configuration of the Cassandra engine.
type Config struct {
	// Hosts are the contact points, host[:port] (port 9042 when omitted).
	Hosts []string
	// Keyspace must match [A-Za-z0-9_]{1,48}. It is folded to lower case, as
	// CQL folds the unquoted name in KairosDB's DDL (§1.1).
	Keyspace string
	// Replication is a CQL map literal pasted verbatim into CREATE KEYSPACE.
	Replication string
	// WriteConsistency is used for data and index inserts and service_index
	// writes; ReadConsistency for reads, deletes, schema and spec statements
	// (§11). Names as in CQL: ONE, QUORUM, LOCAL_QUORUM, ...
	WriteConsistency, ReadConsistency string
	// LocalDC, when set, routes to that data centre first.
	LocalDC string
	// Username and Password enable password authentication when Username is set.
	Username, Password string
	// TLS enables TLS when non-nil.
	TLS *tls.Config
	// Timeout bounds one request on the client; ConnectTimeout bounds dialing
	// and connection setup.
	Timeout, ConnectTimeout time.Duration
	// TableOptions maps a table name to the suffix appended after a single
	// space to its CREATE TABLE, e.g. "WITH compaction = {...}" (§1.2).
	TableOptions map[string]string
	// PageSize is the fetch size of reads.
	PageSize int
	// MaxInFlight bounds the requests (statements or batches) the engine
	// has outstanding at once, all Write and Delete calls together. It is
	// the ceiling of an adaptive limit (overload.go): a request slower than
	// SlowRequest, or failing with an overload symptom, halves the limit.
	MaxInFlight int
	// SlowRequest is the latency from which a request counts as a sign of
	// overload; 0 (or negative) means latency never does (only errors), as
	// --cassandra.slow-request=0 says.
	SlowRequest time.Duration
	// QueueTimeout is how long a request waits for a slot under the limit
	// before its Write or Delete fails as unavailable (503).
	QueueTimeout time.Duration
	// ReconnectInterval is how often the driver tries to reconnect to a host
	// it marked down.
	ReconnectInterval time.Duration
	// Compression of the native protocol: "lz4", "snappy" or "none"; empty
	// means DefaultCompression.
	Compression string

	// batchObserver sees every batch the driver sends; for tests.
	batchObserver gocql.BatchObserver
}

// keyspaceName is the identifier rule for keyspaces: Cassandra's own limit of
// 48 characters, and nothing that would need quoting.
var keyspaceName = regexp.MustCompile(`^[A-Za-z0-9_]{1,48}$`)

// settings is Config after defaults and validation.
type settings struct {
	hosts       []string
	port        int
	keyspace    string
	replication string
	write, read gocql.Consistency
	pageSize    int
	maxInFlight int
	slow        time.Duration
	queueWait   time.Duration
	tableOpts   map[string]string
}

func (c Config) settings() (settings, error) {
	s := settings{
		keyspace:    strings.ToLower(orDefault(c.Keyspace, DefaultKeyspace)),
		replication: orDefault(c.Replication, DefaultReplication),
		pageSize:    c.PageSize,
		maxInFlight: c.MaxInFlight,
		slow:        c.SlowRequest,
		queueWait:   c.QueueTimeout,
		tableOpts:   c.TableOptions,
	}
	var err error
	if s.hosts, s.port, err = splitHosts(c.Hosts); err != nil {
		return s, err
	}
	if !keyspaceName.MatchString(s.keyspace) {
		return s, fmt.Errorf("cassandra: invalid keyspace name %q: must match [A-Za-z0-9_]{1,48}", c.Keyspace)
	}
	if s.write, err = parseConsistency("write", orDefault(c.WriteConsistency, DefaultWriteConsistency)); err != nil {
		return s, err
	}
	if s.read, err = parseConsistency("read", orDefault(c.ReadConsistency, DefaultReadConsistency)); err != nil {
		return s, err
	}
	switch orDefault(c.Compression, DefaultCompression) {
	case "lz4", "snappy", "none":
	default:
		return s, fmt.Errorf("cassandra: unknown compression %q: want lz4, snappy or none", c.Compression)
	}
	for name := range c.TableOptions {
		if !knownTable(name) {
			return s, fmt.Errorf("cassandra: table options for unknown table %q", name)
		}
	}
	if s.pageSize <= 0 {
		s.pageSize = DefaultPageSize
	}
	if s.maxInFlight <= 0 {
		s.maxInFlight = DefaultMaxInFlight
	}
	if s.queueWait <= 0 {
		s.queueWait = DefaultQueueTimeout
	}
	return s, nil
}

func parseConsistency(which, name string) (gocql.Consistency, error) {
	var c gocql.Consistency
	if err := c.UnmarshalText([]byte(strings.ToUpper(strings.TrimSpace(name)))); err != nil {
		return 0, fmt.Errorf("cassandra: invalid %s consistency %q: want one of ANY, ONE, TWO, THREE, QUORUM, ALL, LOCAL_QUORUM, EACH_QUORUM, LOCAL_ONE", which, name)
	}
	return c, nil
}

func knownTable(name string) bool {
	for _, t := range tableDDL() {
		if t.name == name {
			return true
		}
	}
	return false
}

// splitHosts separates the ports from the hosts. The driver dials every host
// it discovers (system.local, system.peers) on one cluster-wide port, so an
// explicit port must be the same on all hosts.
func splitHosts(hosts []string) ([]string, int, error) {
	if len(hosts) == 0 {
		return nil, 0, errors.New("cassandra: no hosts configured")
	}
	names := make([]string, len(hosts))
	port := 0
	for i, h := range hosts {
		name, p, err := net.SplitHostPort(h)
		if err != nil {
			// No port (or a bare IPv6 address): the default port.
			names[i] = strings.Trim(h, "[]")
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return nil, 0, fmt.Errorf("cassandra: host %q: bad port %q", h, p)
		}
		if port != 0 && n != port {
			return nil, 0, fmt.Errorf("cassandra: hosts use ports %d and %d; the driver needs one port for all hosts", port, n)
		}
		names[i], port = name, n
	}
	return names, port, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// newCluster builds the driver configuration. keyspace is empty for the
// bootstrap session that creates the keyspace (§1.1: KairosDB also connects
// without one first).
func newCluster(c Config, s settings, keyspace string, logger *slog.Logger) *gocql.ClusterConfig {
	cl := gocql.NewCluster(s.hosts...)
	if s.port != 0 {
		cl.Port = s.port
	}
	cl.Keyspace = keyspace
	// The session default is the read CL: schema and spec statements run at it
	// in KairosDB (§3.3, §11); writes set the write CL per statement.
	cl.Consistency = s.read
	cl.Timeout = c.Timeout
	if cl.Timeout <= 0 {
		cl.Timeout = DefaultTimeout
	}
	cl.ConnectTimeout = c.ConnectTimeout
	if cl.ConnectTimeout <= 0 {
		cl.ConnectTimeout = DefaultConnectTimeout
	}
	cl.PageSize = s.pageSize
	if c.LocalDC != "" {
		cl.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy(c.LocalDC))
	} else {
		cl.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy())
	}
	// KairosDB's request_retry_count default is 2 (§11). The driver retries
	// only statements marked idempotent, which all of ours are. It retries
	// on the next host of the plan only, so a single node's timeouts are
	// not retried and come back as 503 (overload.go); in a cluster another
	// coordinator may succeed (a QUORUM read timed out on a busy healthy
	// cluster in TestNodeLoss without the retry).
	cl.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 2}
	// The driver marks a host down when it cannot refill the host's pool,
	// and otherwise tries it again only every ReconnectInterval (60 s by
	// default) or when the control connection reconnects to it. After an
	// overload the control connection may have recovered first, leaving the
	// node up but the host down for up to a minute: every request failed
	// at once with "no hosts available in the pool".
	cl.ReconnectInterval = c.ReconnectInterval
	if cl.ReconnectInterval <= 0 {
		cl.ReconnectInterval = DefaultReconnect
	}
	cl.BatchObserver = c.batchObserver
	// Snappy, not KairosDB's LZ4 (§11): LZ4 was slower and allocated more, and
	// snappy cost no more than no compression on loopback (BENCHMARKS.md,
	// BenchmarkCompression). The driver drops the compressor when the server
	// does not offer it.
	switch orDefault(c.Compression, DefaultCompression) {
	case "lz4":
		cl.Compressor = lz4.LZ4Compressor{}
	case "snappy":
		cl.Compressor = &snappy.SnappyCompressor{}
		// Protocol v5 (C* 4+) frames only LZ4, so with snappy negotiate v4,
		// which every supported server speaks.
		cl.ProtoVersion = 4
	}
	if c.Username != "" {
		cl.Authenticator = gocql.PasswordAuthenticator{Username: c.Username, Password: c.Password}
	}
	if c.TLS != nil {
		cl.SslOpts = &gocql.SslOptions{Config: c.TLS, EnableHostVerification: !c.TLS.InsecureSkipVerify}
	}
	if logger != nil {
		cl.Logger = slogLogger{logger.With("component", "gocql")}
	}
	return cl
}
