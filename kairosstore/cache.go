package kairosstore

import (
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// DefaultIndexCacheSize is the entries per generation of each cache when
// Options.IndexCacheSize is not set. A generational cache keeps every entry
// of a working set only up to one generation's size: 100,000 series sent
// round-robin, as Prometheus's shards send them, missed almost every lookup
// at KairosDB's 50,000, and every request then wrote its series' index rows
// again and translated their labels again (BENCHMARKS.md, "Issue #31,
// second pass").
const DefaultIndexCacheSize = 200_000

// defaultIndexCacheTTL is how long the store trusts that an index row it
// wrote still exists, when Options.IndexCacheTTL is not set.
const defaultIndexCacheTTL = 5 * time.Minute

// The store remembers index rows it has written, so it writes each once per
// IndexCacheTTL rather than with every sample (§5.7). Every cache is an
// lru.Cache with IndexCacheSize entries per generation (at most twice that
// in all) and entries that expire IndexCacheTTL after they were added.
//
// The caches are only an optimisation over idempotent writes: an entry is
// added after the engine confirmed the write, so a failed write is always
// retried. The keyspace is shared with KairosDB and other adapters, which
// delete row windows and metrics (row_keys, row_key_time_index,
// string_index) behind this process's back. Samples written after such a
// delete reach data_points but no reader finds them until the index rows
// are written again, which the expiry bounds: the first request of that
// series that starts IndexCacheTTL or more after this process last wrote
// them writes them again. A delete through Store.Delete takes effect at
// once instead. Store.meta, the metadata stored per family, follows the
// same rule with at most maxCachedFamilies entries per generation.
//
// README's Sizing section lists every cache of the adapter with what an
// entry costs, as BenchmarkIndexCacheMemory and its siblings measure it.
//
// seriesRow.indexedAt is one more, free cache: the series' current row
// remembers when its index rows were confirmed (a stamp), so that the write
// path skips the caches altogether for a row known indexed. It follows the
// same rule through Store.fresh.

// stamp is the store's clock as a number that orders events: nanoseconds
// since Open, plus one so that a zero stamp (a row never indexed) is older
// than any event. It reads opts.Now, so tests move it.
func (s *Store) stamp() int64 {
	return int64(s.opts.Now().Sub(s.born)) + 1
}

// fresh reports whether index rows confirmed by a write that started at
// stamp may be taken as still there at now: written after the last delete
// through this store, and less than IndexCacheTTL ago.
func (s *Store) fresh(stamp, now int64) bool {
	return stamp > s.indexClearedAt.Load() && now-stamp < int64(s.opts.IndexCacheTTL)
}

// forgetIndex makes every index row count as not written: the next sample
// of each row writes them again. It runs after a delete removed index
// rows; marks confirmed by writes that overlapped the delete are void too,
// as their stamps are older than the delete's.
func (s *Store) forgetIndex() {
	s.indexClearedAt.Store(s.stamp())
	s.rowKeys.Clear()
	s.metricRows.Clear()
	s.idx.Forget()
}

// maxInternedNames bounds Store.names per generation: metric names, not
// series, so a few thousand cover most senders; past that, names are
// interned by the generation and only cost more cache misses.
const maxInternedNames = 4096

// internName returns name, as the string of the series before it with that
// metric name when there is one: the appender reads and hashes the metric
// name of every series it appends (noteTime), and a name held once per
// series was a cache miss on each series' labels.
func (s *Store) internName(name string) string {
	if n, ok := s.names.Get(name); ok {
		return n
	}
	name = strings.Clone(name) // not the series' labels, which it would pin
	s.names.Add(name, name)
	return name
}

// lookupSeries returns the series of ls, translating and caching it on a
// miss. ls may alias a buffer the caller reuses: a new entry takes a copy.
// Entries are keyed by the label set's hash and verified with labels.Equal;
// on a hash collision the newer series takes the slot, which costs the
// other one a translation, never a wrong row.
func (s *Store) lookupSeries(ls labels.Labels) (*series, error) {
	h := ls.Hash()
	if sr, ok := s.series.Get(h); ok && labels.Equal(sr.ls, ls) {
		s.refs.put(sr)
		return sr, nil
	}
	sr := &series{ls: ls.Copy()}
	sr.name = s.internName(sr.ls.Get(model.MetricNameLabel))
	metric, tags, err := s.mapper.Split(sr.ls, nil)
	if err != nil {
		return nil, err
	}
	codec.SortTags(tags)
	sr.metric, sr.tags = metric, tags
	s.series.Add(h, sr)
	s.refs.put(sr)
	return sr, nil
}
