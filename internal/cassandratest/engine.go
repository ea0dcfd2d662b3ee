package cassandratest

import (
	"context"
	"testing"
	"time"

	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
)

// Engine opens the store's Cassandra engine on keyspace of the node at addr
// (from Keyspace), closed when tb ends. It is not set up: tests that open a
// second connection to one keyspace, or test Setup itself, call Setup where
// they need it. Every call is one more adapter's connection.
func Engine(tb testing.TB, addr, keyspace string) *cql.Engine {
	tb.Helper()
	e, err := cql.Open(context.Background(), cql.Config{
		Hosts: []string{addr}, Keyspace: keyspace,
		Replication:      "{'class': 'SimpleStrategy', 'replication_factor': 1}",
		WriteConsistency: "ONE", ReadConsistency: "ONE",
		// The node is shared by every test package and slow on a busy
		// 2-core machine.
		Timeout: 60 * time.Second, ConnectTimeout: 15 * time.Second,
	}, nil)
	if err != nil {
		tb.Fatalf("cassandratest: open the engine on %s/%s: %v", addr, keyspace, err)
	}
	tb.Cleanup(func() {
		if err := e.Close(); err != nil {
			tb.Errorf("cassandratest: close the engine: %v", err)
		}
	})
	return e
}
