// Package lru is the adapter's one in-memory cache type. The caches of what
// the adapter wrote or looked up (index rows and metadata written,
// translated series, series handles, replica routes) are each a Cache, so
// all of them follow the same two rules. The 2.0 symbol numbering
// (adapter/seriescache.go) is a table, not a cache, and keeps its own.
package lru

import (
	"sync"
	"time"
)

// Cache maps keys to values under one policy:
//
//   - Size. Entries live in two generations of at most size entries each.
//     When the current generation is full it becomes the old one and the
//     previous old one is dropped, in O(1). A hit in the old generation
//     moves the entry to the current one, so the cache holds at most
//     2×size entries, and at least the size entries most recently added
//     or hit.
//   - Age. An entry is a miss from maxAge after it was added; a hit does
//     not extend it. The adapter's caches remember facts about a database
//     that other writers change behind its back (an index row exists, a
//     partition lives on a host), and maxAge is how long such a fact is
//     trusted.
//
// It is safe for concurrent use. A lookup reads the clock once and takes a
// read lock; only a hit in the old generation takes the write lock.
type Cache[K comparable, V any] struct {
	size   int64 // of a generation, in weight units
	weigh  func(V) int64
	maxAge time.Duration
	now    func() time.Time
	base   time.Time // ages are durations since base: monotonic with time.Now

	mu        sync.RWMutex
	cur, old  map[K]entry[V]
	curWeight int64
}

type entry[V any] struct {
	v     V
	added time.Duration // since base
}

// New returns a cache of two generations of size entries whose entries
// expire maxAge after they were added, by the clock now (nil: time.Now).
// size and maxAge must be positive.
func New[K comparable, V any](size int, maxAge time.Duration, now func() time.Time) *Cache[K, V] {
	if size <= 0 || maxAge <= 0 {
		panic("lru: size and maxAge must be positive")
	}
	if now == nil {
		now = time.Now
	}
	return &Cache[K, V]{size: int64(size), weigh: func(V) int64 { return 1 }, maxAge: maxAge, now: now, base: now(), cur: map[K]entry[V]{}}
}

// NewWeighted returns a cache like New whose generations hold values of at
// most size weight in all, as weigh tells (bytes, say), instead of size
// entries: it holds at most 2×size. A value heavier than size is not kept.
func NewWeighted[K comparable, V any](size int64, maxAge time.Duration, now func() time.Time, weigh func(V) int64) *Cache[K, V] {
	c := New[K, V](1, maxAge, now)
	c.size, c.weigh = size, weigh
	return c
}

func (c *Cache[K, V]) clock() time.Duration { return c.now().Sub(c.base) }

func (c *Cache[K, V]) fresh(e entry[V], now time.Duration) bool {
	return now-e.added < c.maxAge
}

// Get returns the value of k, if it was added less than maxAge ago.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	now := c.clock()
	c.mu.RLock()
	e, ok := c.cur[k]
	inOld := false
	if !ok {
		e, ok = c.old[k]
		inOld = ok
	}
	c.mu.RUnlock()
	if !ok || !c.fresh(e, now) {
		var zero V
		return zero, false
	}
	if inOld {
		c.promote(k, e)
	}
	return e.v, true
}

// GetBytes is Get for a key given as bytes. The key is converted in the
// map index itself, which Go does without allocating: callers look up
// encoded row keys and labels they hold as []byte.
func GetBytes[V any](c *Cache[string, V], k []byte) (V, bool) {
	now := c.clock()
	c.mu.RLock()
	e, ok := c.cur[string(k)]
	inOld := false
	if !ok {
		e, ok = c.old[string(k)]
		inOld = ok
	}
	c.mu.RUnlock()
	if !ok || !c.fresh(e, now) {
		var zero V
		return zero, false
	}
	if inOld {
		c.promote(string(k), e)
	}
	return e.v, true
}

// AppendBytes appends to dst the value of each key, or the zero V for a nil
// key or a miss. All keys are looked up under one read lock and one reading of
// the clock: a lock per key was a noticeable part of the write path's CPU when
// done for every series of a request (BENCHMARKS.md, BenchmarkPipeline).
func AppendBytes[V any](c *Cache[string, V], dst []V, keys [][]byte) []V {
	var promote []int // fresh hits in the old generation
	now := c.clock()
	c.mu.RLock()
	for i, k := range keys {
		var v V
		if k != nil {
			e, ok := c.cur[string(k)]
			inOld := false
			if !ok {
				e, ok = c.old[string(k)]
				inOld = ok
			}
			if ok && c.fresh(e, now) {
				v = e.v
				if inOld {
					promote = append(promote, i)
				}
			}
		}
		dst = append(dst, v)
	}
	c.mu.RUnlock()
	if len(promote) > 0 {
		c.mu.Lock()
		for _, i := range promote {
			k := string(keys[i])
			if _, ok := c.cur[k]; !ok {
				if e, ok := c.old[k]; ok {
					c.putLocked(k, e)
				}
			}
		}
		c.mu.Unlock()
	}
	return dst
}

// promote moves a hit of the old generation to the current one, keeping the
// time it was added, unless a newer value took its place meanwhile.
func (c *Cache[K, V]) promote(k K, e entry[V]) {
	c.mu.Lock()
	if _, ok := c.cur[k]; !ok {
		c.putLocked(k, e)
	}
	c.mu.Unlock()
}

// Add sets the value of k, which expires maxAge from now.
func (c *Cache[K, V]) Add(k K, v V) {
	e := entry[V]{v: v, added: c.clock()}
	c.mu.Lock()
	c.putLocked(k, e)
	c.mu.Unlock()
}

// AddAll sets the value of every key in keys to v, under one lock.
func (c *Cache[K, V]) AddAll(keys []K, v V) {
	if len(keys) == 0 {
		return
	}
	e := entry[V]{v: v, added: c.clock()}
	c.mu.Lock()
	for _, k := range keys {
		c.putLocked(k, e)
	}
	c.mu.Unlock()
}

func (c *Cache[K, V]) putLocked(k K, e entry[V]) {
	w := c.weigh(e.v)
	if old, ok := c.cur[k]; ok {
		c.curWeight -= c.weigh(old.v)
		delete(c.cur, k)
	}
	if w > c.size {
		delete(c.old, k) // no stale value may outlive a newer one
		return
	}
	if c.curWeight+w > c.size {
		// The full generation's length is the best guess for the next.
		c.old, c.cur = c.cur, make(map[K]entry[V], len(c.cur))
		c.curWeight = 0
	}
	c.cur[k] = e
	c.curWeight += w
}

// Remove drops k.
func (c *Cache[K, V]) Remove(k K) {
	c.mu.Lock()
	if e, ok := c.cur[k]; ok {
		c.curWeight -= c.weigh(e.v)
		delete(c.cur, k)
	}
	delete(c.old, k)
	c.mu.Unlock()
}

// Clear drops every entry.
func (c *Cache[K, V]) Clear() {
	c.mu.Lock()
	c.cur, c.old, c.curWeight = map[K]entry[V]{}, nil, 0
	c.mu.Unlock()
}

// Len is the number of entries held, expired ones included: the memory the
// cache takes, not what it would answer.
func (c *Cache[K, V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.cur) + len(c.old)
}

// Weight is the weight of the entries held, expired ones included: bytes
// for a cache of NewWeighted that weighs bytes, entries for one of New. An
// entry promoted from the old generation counts once. It walks the
// entries: for status pages, not for a hot path.
func (c *Cache[K, V]) Weight() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	w := c.curWeight
	for k, e := range c.old {
		if _, ok := c.cur[k]; !ok {
			w += c.weigh(e.v)
		}
	}
	return w
}
