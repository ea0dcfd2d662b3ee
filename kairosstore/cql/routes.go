package cql

import (
	"hash/maphash"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/kairos-remote/kairos-adapter/internal/lru"
)

// routeCache remembers the replica host of data_points partition keys for
// groupReplicas. Asking the driver's token-aware policy costs about six
// allocations and a microsecond per key, once per sample in Prometheus's
// shape (BenchmarkWriteSteady), and a series keeps its partition for a whole
// row window.
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
