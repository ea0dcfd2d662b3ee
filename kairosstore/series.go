package kairosstore

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/kairos-remote/kairos-adapter/translate"
)

// series is what the write path derives from one label set. Prometheus
// sends every series again with each scrape, so keeping this across requests
// turns the translation and row-key encoding of a sample into a map lookup.
// Everything in it is immutable except the pointer to the current row.
type series struct {
	ls     labels.Labels // the appender's own copy
	metric string
	tags   []translate.Tag // sorted by name; the strings alias ls
	double atomic.Pointer[seriesRow]
}

// seriesRow is the kairos_double row of a series in one row window. Cells of
// many requests share its key, so the key is never modified.
type seriesRow struct {
	rowTime int64
	key     []byte
	// indexedIn is the Store epoch in which the engine confirmed the row's
	// index rows, so that requests after that skip the index caches
	// altogether. A delete starts a new epoch (Store.epoch).
	indexedIn atomic.Uint64
}

// seriesCache is bounded like cache: two generations of size entries each.
// Entries are keyed by the label set's hash and verified with labels.Equal;
// on a hash collision the newer series takes the slot, which costs the other
// one a translation, never a wrong row.
type seriesCache struct {
	mu       sync.Mutex
	size     int
	cur, old map[uint64]*series
}

func newSeriesCache(size int) *seriesCache {
	return &seriesCache{size: size, cur: make(map[uint64]*series, size)}
}

// get returns the series of ls, translating and caching it on a miss. ls
// may alias a buffer the caller reuses: a new entry takes a copy.
func (c *seriesCache) get(m translate.Mapper, ls labels.Labels) (*series, error) {
	h := ls.Hash()
	c.mu.Lock()
	s := c.cur[h]
	if s == nil {
		if s = c.old[h]; s != nil && labels.Equal(s.ls, ls) {
			c.putLocked(h, s)
		}
	}
	c.mu.Unlock()
	if s != nil && labels.Equal(s.ls, ls) {
		return s, nil
	}
	s = &series{ls: ls.Copy()}
	metric, tags, err := m.Split(s.ls, nil)
	if err != nil {
		return nil, err
	}
	SortTags(tags)
	s.metric, s.tags = metric, tags
	c.mu.Lock()
	c.putLocked(h, s)
	c.mu.Unlock()
	return s, nil
}

func (c *seriesCache) putLocked(h uint64, s *series) {
	if len(c.cur) >= c.size {
		c.old, c.cur = c.cur, make(map[uint64]*series, c.size)
	}
	c.cur[h] = s
}

// doubleRow returns the series' kairos_double row for rowTime, encoding its
// key only when the series enters a new row window.
func (s *series) doubleRow(rowTime int64) *seriesRow {
	if r := s.double.Load(); r != nil && r.rowTime == rowTime {
		return r
	}
	r := &seriesRow{
		rowTime: rowTime,
		key:     AppendRowKey(nil, RowKey{Metric: s.metric, RowTime: rowTime, DataType: TypeDouble, Tags: s.tags}),
	}
	// Concurrent requests may each store their own row: both keys are
	// equal, and the loser's index rows are merely written once more.
	s.double.Store(r)
	return r
}
