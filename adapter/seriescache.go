package adapter

import (
	"sync"

	"github.com/prometheus/prometheus/model/labels"
)

// refAppender is an Appender that hands out handles on series, so that a
// series seen before is appended to without decoding its labels again.
// Prometheus sends every series again with each scrape, so in steady state
// almost every series of a request is one the adapter has seen.
type refAppender interface {
	// Ref returns a handle on the series of ls, valid for the life of the
	// store and usable by any of its appenders. The error is Append's.
	Ref(ls labels.Labels) (any, error)
	// AppendRef appends a float sample to the series of ref; the error is
	// Append's.
	AppendRef(ref any, t int64, v float64) error
}

// seriesCache maps the encoded labels of a series, as a request carries
// them, to the store's handle on it. It is bounded like the store's caches:
// two generations of size entries, where a hit in the old one moves the
// entry forward. A miss only costs decoding the labels once more.
type seriesCache struct {
	mu       sync.Mutex
	size     int
	cur, old map[string]any
}

func newSeriesCache(size int) *seriesCache {
	return &seriesCache{size: size, cur: make(map[string]any, size)}
}

func (c *seriesCache) get(key []byte) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ref, ok := c.cur[string(key)]; ok {
		return ref
	}
	if ref, ok := c.old[string(key)]; ok {
		c.putLocked(string(key), ref)
		return ref
	}
	return nil
}

func (c *seriesCache) put(key []byte, ref any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(string(key), ref)
}

func (c *seriesCache) putLocked(key string, ref any) {
	if len(c.cur) >= c.size {
		c.old, c.cur = c.cur, make(map[string]any, c.size)
	}
	c.cur[key] = ref
}
