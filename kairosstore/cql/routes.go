package cql

import (
	"hash/maphash"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
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
// write. Entries are bounded like the store's caches, two generations of
// routeCacheSize, and all are dropped every routeCacheTTL so that a changed
// ring is followed.
type routeCache struct {
	mu       sync.Mutex
	seed     maphash.Seed
	cur, old map[uint64]string
	since    time.Time
}

const (
	routeCacheSize = 1 << 17
	routeCacheTTL  = 5 * time.Minute
)

func newRouteCache() *routeCache {
	return &routeCache{seed: maphash.MakeSeed()}
}

// replica returns the host of key, asking policy on a miss.
func (c *routeCache) replica(policy gocql.HostSelectionPolicy, keyspace string, key []byte) string {
	h := maphash.Bytes(c.seed, key)
	c.mu.Lock()
	if c.cur == nil || time.Since(c.since) > routeCacheTTL {
		c.cur, c.old, c.since = make(map[uint64]string), nil, time.Now()
	}
	host, ok := c.cur[h]
	if !ok {
		if host, ok = c.old[h]; ok {
			c.putLocked(h, host)
		}
	}
	c.mu.Unlock()
	if ok {
		return host
	}
	host = replicaOf(policy, keyspace, key)
	c.mu.Lock()
	c.putLocked(h, host)
	c.mu.Unlock()
	return host
}

func (c *routeCache) putLocked(h uint64, host string) {
	if len(c.cur) >= routeCacheSize {
		c.old, c.cur = c.cur, make(map[uint64]string)
	}
	c.cur[h] = host
}
