package kairosstore

import "sync"

// cache remembers index rows this process has stored, so each is written once
// per (series, row window) rather than with every sample (§5.7). It is only an
// optimisation over idempotent writes: entries are added after the engine
// confirmed the write, so a failed write is always retried.
//
// Two generations bound it to 2×size entries with O(1) work: when the current
// map fills up it becomes the old one and the previous old one is dropped;
// a hit in the old generation moves the key forward, so keys in use survive.
type cache struct {
	mu       sync.Mutex
	size     int
	cur, old map[string]struct{}
}

func newCache(size int) *cache {
	return &cache{size: size, cur: make(map[string]struct{}, size)}
}

// has reports whether key was stored. It takes []byte so that callers can
// look up without allocating a string.
func (c *cache) has(key []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.cur[string(key)]; ok {
		return true
	}
	if _, ok := c.old[string(key)]; ok {
		c.addLocked(string(key))
		return true
	}
	return false
}

func (c *cache) add(keys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		c.addLocked(k)
	}
}

func (c *cache) addLocked(k string) {
	if len(c.cur) >= c.size {
		c.old, c.cur = c.cur, make(map[string]struct{}, c.size)
	}
	c.cur[k] = struct{}{}
}

// clear forgets everything, for deletes that remove index rows (§8 step 4).
func (c *cache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur, c.old = make(map[string]struct{}, c.size), nil
}
