// Package cql implements engine.Engine on Apache Cassandra with
// KairosDB's exact tables and statements (docs/kairosdb-layout.md), through the
// gocql v2 driver.
package cql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// ErrNoKeyspace is returned by data methods while the keyspace does not exist
// yet, that is before Setup.
var ErrNoKeyspace = errors.New("cassandra: keyspace does not exist; run Setup first")

// readyTimeout bounds the health query of Ready.
const readyTimeout = 2 * time.Second

// Engine is a engine.Engine on one Cassandra cluster.
type Engine struct {
	cfg    Config
	set    settings
	logger *slog.Logger

	// grouping decides how Write and Delete send their statements.
	grouping grouping

	// mu guards the sessions. boot has no keyspace; it exists only while the
	// keyspace is missing, so Setup can create it (§1.1). ks is bound to the
	// keyspace and serves everything else; it is set once and never replaced.
	mu   sync.RWMutex
	boot *gocql.Session
	ks   *gocql.Session
	// policy is ks's host selection policy, which groupReplicas asks for the
	// replica of each data_points partition (§5.6).
	policy gocql.HostSelectionPolicy
	routes *routeCache
	// pool sends the requests of every Write and Delete, at most
	// Config.MaxInFlight at once for the process (write.go), and fewer while
	// limit says Cassandra is overloaded (overload.go).
	pool  *pool
	limit *adaptiveLimit
	// reads counts read statements by table: a query's round trips, which
	// its latency on a remote node is made of more than its CPU.
	reads *prometheus.CounterVec
}

var _ engine.Engine = (*Engine)(nil)

// Open connects to the cluster. When the keyspace exists the engine is ready
// for use; otherwise only Setup, Ready and Close work until Setup created it.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*Engine, error) {
	set, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{cfg: cfg, set: set, logger: logger, grouping: defaultGrouping, routes: newRouteCache()}
	e.reads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kairos_adapter", Name: "cassandra_reads_total",
		Help: "Read statements sent to Cassandra, by table (a paged read counts once).",
	}, []string{"table"})

	boot, _, err := e.connect("")
	if err != nil {
		return nil, err
	}
	e.pool = newPool(set.maxInFlight, logger)
	e.limit = newAdaptiveLimit(set.maxInFlight, set.slow, set.queueWait)
	exists, err := keyspaceExists(ctx, boot, set.keyspace)
	if err != nil {
		boot.Close()
		return nil, err
	}
	if !exists {
		e.boot = boot
		return e, nil
	}
	boot.Close()
	if e.ks, e.policy, err = e.connect(set.keyspace); err != nil {
		return nil, err
	}
	return e, nil
}

// connect opens a session and returns it with its host selection policy.
func (e *Engine) connect(keyspace string) (*gocql.Session, gocql.HostSelectionPolicy, error) {
	cl := newCluster(e.cfg, e.set, keyspace, e.logger)
	s, err := cl.CreateSession()
	if err != nil {
		return nil, nil, fmt.Errorf("cassandra: connect to %v (keyspace %q): %w", e.cfg.Hosts, keyspace, err)
	}
	return s, cl.PoolConfig.HostSelectionPolicy, nil
}

// router returns the keyspace session's host selection policy.
func (e *Engine) router() gocql.HostSelectionPolicy {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.policy
}

func keyspaceExists(ctx context.Context, s *gocql.Session, keyspace string) (bool, error) {
	var name string
	err := s.Query(selectKeyspace, keyspace).Idempotent(true).ScanContext(ctx, &name)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("cassandra: look up keyspace %q: %w", keyspace, err)
	}
	return true, nil
}

// session returns the keyspace session, or ErrNoKeyspace before Setup.
func (e *Engine) session() (*gocql.Session, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.ks == nil {
		return nil, ErrNoKeyspace
	}
	return e.ks, nil
}

// Setup creates the keyspace and the tables that are missing (§1.1, §1.2)
// and waits for schema agreement.
func (e *Engine) Setup(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.ks
	if s == nil {
		s = e.boot
	}
	if s == nil {
		return errors.New("cassandra: engine is closed")
	}
	if err := e.ddl(ctx, s, fmt.Sprintf(createKeyspace, e.set.keyspace, e.set.replication)); err != nil {
		return err
	}
	if e.ks == nil {
		// Every node must know the keyspace before the keyspace session's
		// connections USE it.
		if err := s.AwaitSchemaAgreement(ctx); err != nil {
			return fmt.Errorf("cassandra: schema agreement after creating keyspace %q: %w", e.set.keyspace, err)
		}
		ks, policy, err := e.connect(e.set.keyspace)
		if err != nil {
			return err
		}
		e.ks, e.policy = ks, policy
		e.boot.Close()
		e.boot = nil
	}
	for _, t := range tableDDL() {
		// KairosDB appends " " + table_create_with.<table> even when empty (§1.2).
		if err := e.ddl(ctx, e.ks, t.ddl+" "+e.set.tableOpts[t.name]); err != nil {
			return err
		}
	}
	if err := e.ks.AwaitSchemaAgreement(ctx); err != nil {
		return fmt.Errorf("cassandra: schema agreement after creating tables: %w", err)
	}
	return nil
}

func (e *Engine) ddl(ctx context.Context, s *gocql.Session, stmt string) error {
	if err := s.Query(stmt).Idempotent(true).ExecContext(ctx); err != nil {
		first, _, _ := strings.Cut(stmt, "\n")
		return fmt.Errorf("cassandra: %s: %w", first, err)
	}
	return nil
}

// Ready runs a cheap query on the keyspace session.
func (e *Engine) Ready(ctx context.Context) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var version string
	if err := s.Query(selectReleaseVersion).Idempotent(true).ScanContext(ctx, &version); err != nil {
		return fmt.Errorf("cassandra: not ready: %w", err)
	}
	return nil
}

// Close closes the sessions.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.boot != nil {
		e.boot.Close()
		e.boot = nil
	}
	if e.ks != nil {
		e.ks.Close()
	}
	if e.pool != nil {
		e.pool.close()
	}
	return nil
}
