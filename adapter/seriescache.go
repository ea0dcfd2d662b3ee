package adapter

import (
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/kairos-remote/kairos-adapter/internal/lru"
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
// them, to the store's handle on it. It is an lru.Cache, bounded like the
// store's caches: size entries per generation, each trusted for ttl. A miss
// only costs decoding the labels once more. A handle never vouches for index
// rows: the store checks its own marks behind it, so a delete through the
// store takes effect for handles kept here too.
type seriesCache struct {
	c *lru.Cache[string, any]
}

func newSeriesCache(size int, ttl time.Duration) *seriesCache {
	return &seriesCache{c: lru.New[string, any](size, ttl, nil)}
}

// lookup appends to refs the handle of each key: nil for a nil key or an
// unknown series. A request's series are looked up together under one read
// lock, so concurrent requests do not wait for each other.
func (c *seriesCache) lookup(refs []any, keys [][]byte) []any {
	return lru.AppendBytes(c.c, refs, keys)
}

func (c *seriesCache) put(key []byte, ref any) {
	c.c.Add(string(key), ref)
}

// symbolTable numbers the symbols of 2.0 requests the same way across
// requests, so that a 2.0 series' cache key is its label refs renumbered,
// four bytes a symbol, instead of its label strings: refs alone only mean
// something within one request. It holds at most max symbols; when full it
// starts over in a new generation, which is part of every key, so a number
// given out again never names a series of the old generation.
type symbolTable struct {
	mu  sync.Mutex
	max int
	gen uint32
	ids map[string]uint32
}

func newSymbolTable(max int) *symbolTable {
	return &symbolTable{max: max, ids: map[string]uint32{}}
}

// resolve appends the number of each symbol to dst, and returns them with
// their generation.
func (t *symbolTable) resolve(dst []uint32, symbols []string) ([]uint32, uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ids)+len(symbols) > t.max {
		t.ids = map[string]uint32{}
		t.gen++
	}
	for _, s := range symbols {
		id, ok := t.ids[s]
		if !ok {
			id = uint32(len(t.ids))
			t.ids[strings.Clone(s)] = id // s points into the request buffer
		}
		dst = append(dst, id)
	}
	return dst, t.gen
}

// appendSymbolKey appends the cache key of a 2.0 series: a 0 byte (1.0 keys
// start with the tag of a label field, 0x0a, so the two never meet), the
// generation, and the numbers of its label refs.
func appendSymbolKey(dst []byte, gen uint32, refs []uint32, ids []uint32) []byte {
	n := len(dst)
	dst = slices.Grow(dst, 5+4*len(refs))[:n+5+4*len(refs)]
	dst[n] = 0
	binary.LittleEndian.PutUint32(dst[n+1:], gen)
	k := dst[n+5:]
	for _, r := range refs {
		binary.LittleEndian.PutUint32(k, ids[r])
		k = k[4:]
	}
	return dst
}
