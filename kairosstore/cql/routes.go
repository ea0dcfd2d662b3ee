package cql

import (
	"hash/maphash"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/kairos-remote/kairos-adapter/internal/lru"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// routeCache remembers the replica host of data_points partition keys for
// groupReplicas. Asking the driver's token-aware policy costs allocations and
// time per key, once per sample in Prometheus's shape (BENCHMARKS.md,
// BenchmarkWriteSteady), and a series keeps its partition for a whole row
// window.
//
// Keys are 64-bit hashes of the partition key. A collision or a stale entry
// (the ring changed) only sends a batch to a coordinator that is not the
// first replica, which forwards it, as any coordinator does: never a wrong
// write. It is an lru.Cache of two generations of routeCacheSize, whose
// entries expire routeCacheTTL after they were added, so that a changed
// ring is followed.
type routeCache struct {
	seed  maphash.Seed
	hosts *lru.Cache[uint64, string]
}

const (
	routeCacheSize = 1 << 17
	routeCacheTTL  = 5 * time.Minute
)

func newRouteCache() *routeCache {
	return &routeCache{seed: maphash.MakeSeed(), hosts: lru.New[uint64, string](routeCacheSize, routeCacheTTL, nil)}
}

// replica returns the host of key, asking policy on a miss.
func (c *routeCache) replica(policy gocql.HostSelectionPolicy, keyspace string, key []byte) string {
	h := maphash.Bytes(c.seed, key)
	if host, ok := c.hosts.Get(h); ok {
		return host
	}
	host := replicaOf(policy, keyspace, key)
	c.hosts.Add(h, host)
	return host
}

// grouping is how Write and Delete turn statements into requests.
type grouping int

const (
	// groupSingles sends every statement on its own, MaxInFlight at a time
	// (the driver's advice for multi-partition work, gocql doc.go "Batches").
	groupSingles grouping = iota
	// groupPartitions sends one UNLOGGED batch per partition of at most
	// maxBatch statements. Single-partition batches go to a replica and skip
	// Cassandra's batch size limits.
	groupPartitions
	// groupReplicas packs the data_points inserts of many partitions into
	// UNLOGGED batches, one open batch per replica host, as KairosDB does
	// (docs/kairosdb-layout.md §5.6: the first host of the token-aware plan, one
	// batch per host). Prometheus sends one sample per series per request, so
	// groupPartitions sends those as single statements; these batches cut the
	// requests by up to maxReplicaBatch. Index rows are grouped as in
	// groupPartitions.
	groupReplicas
)

// defaultGrouping is the fastest strategy in BenchmarkWrite, on Prometheus's
// shape (one sample per series per Write) and on ten samples per series
// (BENCHMARKS.md, BenchmarkWrite).
const defaultGrouping = groupReplicas

// maxBatch caps the statements of one batch (about KairosDB's
// queue_processor.batch_size of 200 data points per CQLBatch, §5.6, halved to
// keep requests small).
const maxBatch = 100

// maxReplicaBatch and maxReplicaBytes cap a groupReplicas batch: Cassandra
// logs a warning for every batch over batch_size_warn_threshold (5 KiB), and
// the load tool measured 50 data_points statements at about 4 KiB, and 50 per
// batch as the fastest direct-driver strategy (BENCHMARKS.md, "Direct-driver
// strategies (choosing the baseline)").
const (
	maxReplicaBatch = 50
	maxReplicaBytes = 4096
	// cellBytes is what one data_points insert adds to Cassandra's batch
	// size besides its column name and value (about 80 bytes in all for an
	// 8-byte value, per the figures above).
	cellBytes = 68
)

// replicaFunc names the replica host of a data_points key (§5.6).
func (e *Engine) replicaFunc(s *gocql.Session) func(key []byte) string {
	if len(s.GetHosts()) == 1 {
		// One node is the replica of every key: no lookup at all. The
		// route cache's map lookups were a noticeable part of the
		// adapter's CPU on one node (BENCHMARKS.md, "Load tool figures").
		return func([]byte) string { return "" }
	}
	policy, ks := e.router(), e.set.keyspace
	return func(key []byte) string { return e.routes.replica(policy, ks, key) }
}

// group turns statements other than data points into requests: batches per
// partition, or single statements.
func (e *Engine) group(stmts []stmt) []request {
	var reqs []request
	if e.grouping == groupSingles {
		for i := range stmts {
			reqs = append(reqs, request{stmts: stmts[i : i+1 : i+1]})
		}
		return reqs
	}
	for _, g := range byPartition(stmts, func(st stmt) string { return st.part }, maxBatch) {
		reqs = append(reqs, request{stmts: g})
	}
	return reqs
}

// byPartition groups items by partition, in order of first appearance, into
// requests of at most limit items.
func byPartition[T any](items []T, part func(T) string, limit int) [][]T {
	index := make(map[string]int)
	var groups [][]T
	for _, it := range items {
		p := part(it)
		i, ok := index[p]
		if !ok || len(groups[i]) == limit {
			i = len(groups)
			index[p] = i
			groups = append(groups, make([]T, 0, 1))
		}
		groups[i] = append(groups[i], it)
	}
	return groups
}

// byReplica packs data_points inserts into batches per replica host (§5.6),
// of at most maxReplicaBatch cells and maxReplicaBytes estimated bytes, in
// order of first appearance, as cell indexes. replica may not know the ring
// yet: then the host is whatever it picks, and the grouping is only less
// useful, never wrong, since any coordinator can apply any batch.
func byReplica(cells []engine.Cell, replica func(key []byte) string) [][]int32 {
	type open struct {
		req  int // index in reqs
		size int
	}
	var (
		reqs     [][]int32
		batches  = make(map[string]*open)
		lastKey  []byte
		lastHost string
		// Full batches are cut from one backing array, not one each.
		slab []int32
	)
	for i := range cells {
		c := &cells[i]
		size := cellBytes + 4 + len(c.Value)
		// Cells of one series are usually adjacent: look the host up once.
		if lastKey == nil || string(c.Key) != string(lastKey) {
			lastKey, lastHost = c.Key, replica(c.Key)
		}
		b := batches[lastHost]
		if b == nil || len(reqs[b.req]) == maxReplicaBatch || b.size+size > maxReplicaBytes {
			b = &open{req: len(reqs)}
			batches[lastHost] = b
			if len(slab) < maxReplicaBatch {
				slab = make([]int32, maxReplicaBatch*min(64, len(cells)/maxReplicaBatch+1))
			}
			reqs = append(reqs, slab[:0:maxReplicaBatch])
			slab = slab[maxReplicaBatch:]
		}
		reqs[b.req] = append(reqs[b.req], int32(i))
		b.size += size
	}
	return reqs
}

// replicaOf is the ID of the first host of the token-aware plan for a
// data_points partition key (§5.6), or "" when the policy names none.
func replicaOf(policy gocql.HostSelectionPolicy, keyspace string, key []byte) string {
	if policy == nil {
		return ""
	}
	next := policy.Pick(routed{keyspace: keyspace, key: key})
	if next == nil {
		return ""
	}
	if h := next(); h != nil && h.Info() != nil {
		return h.Info().HostID()
	}
	return ""
}

// routed is the least a host selection policy needs to place a data_points
// partition key: the key is the whole (single-column blob) partition key, so
// it is its own routing key and needs no prepared-statement metadata.
type routed struct {
	keyspace string
	key      []byte
}

func (r routed) GetRoutingKey() ([]byte, error) { return r.key, nil }
func (r routed) Keyspace() string               { return r.keyspace }
func (r routed) Table() string                  { return dataPointsTable }
func (r routed) IsIdempotent() bool             { return true }
func (r routed) GetHostID() string              { return "" }
func (r routed) Statement() gocql.Statement     { return nil }
