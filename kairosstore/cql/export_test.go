package cql

import gocql "github.com/apache/cassandra-gocql-driver/v2"

// Test hooks for the external tests and benchmarks of this package.

// Grouping names a write grouping strategy for tests.
type Grouping = grouping

// The strategies behind Write and Delete.
const (
	GroupSingles    = groupSingles
	GroupPartitions = groupPartitions
	GroupReplicas   = groupReplicas
)

// SetGrouping switches the grouping of e; call it before e is shared.
func SetGrouping(e *Engine, g Grouping) { e.grouping = g }

// ReplicaOf is the host ID groupReplicas batches a data_points key under.
func ReplicaOf(e *Engine, key []byte) string { return replicaOf(e.router(), e.set.keyspace, key) }

// CachedReplicaOf is the replica groupReplicas uses, through the route cache.
func CachedReplicaOf(e *Engine, key []byte) string {
	return e.routes.replica(e.router(), e.set.keyspace, key)
}

// WithBatchObserver returns c with a batch observer for the driver.
func WithBatchObserver(c Config, o gocql.BatchObserver) Config {
	c.batchObserver = o
	return c
}
