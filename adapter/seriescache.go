package adapter

import (
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kairos-remote/kairos-adapter/internal/lru"
)

// seriesCache maps the encoded labels of a series, as a request carries
// them, to the store's ref of it (Appender). It is an lru.Cache, bounded like the
// store's caches: size entries per generation, each trusted for ttl. A miss
// only costs decoding the labels once more. A ref never vouches for index
// rows: the store checks its own marks behind it, so a delete through the
// store takes effect for refs kept here too.
type seriesCache struct {
	c *lru.Cache[string, SeriesRef]
}

func newSeriesCache(size int, ttl time.Duration) *seriesCache {
	return &seriesCache{c: lru.New[string, SeriesRef](size, ttl, nil)}
}

// lookup appends to refs the ref of each key: 0 for a nil key or an
// unknown series. A request's series are looked up together under one read
// lock, so concurrent requests do not wait for each other.
func (c *seriesCache) lookup(refs []SeriesRef, keys [][]byte) []SeriesRef {
	return lru.AppendBytes(c.c, refs, keys)
}

func (c *seriesCache) put(key []byte, ref SeriesRef) {
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
