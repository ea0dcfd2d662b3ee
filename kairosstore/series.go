package kairosstore

import (
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// series is what the write path derives from one label set. Prometheus
// sends every series again with each scrape, so keeping this across requests
// turns the translation and row-key encoding of a sample into a map lookup.
// Everything in it is immutable except the pointer to the current row.
type series struct {
	ref    atomic.Uint64 // its storage.SeriesRef in the store's refTable
	ls     labels.Labels // the appender's own copy
	metric string
	// name is ls's metric name, which Options.OnChange reports, interned
	// (Store.internName): reading it from ls for every sample, then
	// hashing the series' own copy, were cache misses on each series'
	// labels, 5 % of a known sample's CPU (BENCHMARKS.md, "Issue #31: known
	// series, less CPU per sample").
	name   string
	tags   []codec.Tag // sorted by name; the strings alias ls
	double atomic.Pointer[seriesRow]
}

// seriesRow is the kairos_double row of a series in one row window. Cells of
// many requests share its key, so the key is never modified.
type seriesRow struct {
	rowTime int64
	key     []byte
	// indexedAt is the stamp (Store.stamp) of the write that confirmed the
	// row's index rows, 0 before one did, so that requests skip the index
	// caches altogether while it is fresh (Store.fresh).
	indexedAt atomic.Int64
}

// doubleRow returns the series' kairos_double row for rowTime, encoding its
// key only when the series enters a new row window.
func (s *series) doubleRow(rowTime int64) *seriesRow {
	if r := s.double.Load(); r != nil && r.rowTime == rowTime {
		return r
	}
	r := &seriesRow{
		rowTime: rowTime,
		key:     codec.AppendRowKey(nil, codec.RowKey{Metric: s.metric, RowTime: rowTime, DataType: codec.TypeDouble, Tags: s.tags}),
	}
	// Concurrent requests may each store their own row: both keys are
	// equal, and the loser's index rows are merely written once more.
	s.double.Store(r)
	return r
}

// refTable resolves the refs the write path hands out (Appender.Append) to
// their series without a lock. Refs are given out in turn, and a ref lives
// in slot ref mod the table's size: the table is a ring of the series last
// given a ref, and a ref stays valid until as many newer ones as the table
// has slots were given out. After that it is unknown, the caller passes the
// labels again, and lookupSeries gives the series a new ref. The table
// holds pointers only, as many as the series cache can hold, so it bounds
// what the refs kept by callers can pin.
type refTable struct {
	last  atomic.Uint64
	slots []atomic.Pointer[series]
}

func newRefTable(size int) *refTable {
	return &refTable{slots: make([]atomic.Pointer[series], size)}
}

func (t *refTable) slot(ref storage.SeriesRef) *atomic.Pointer[series] {
	return &t.slots[uint64(ref)%uint64(len(t.slots))]
}

// get returns the series of ref, nil when the table no longer holds it.
func (t *refTable) get(ref storage.SeriesRef) *series {
	if s := t.slot(ref).Load(); s != nil && storage.SeriesRef(s.ref.Load()) == ref {
		return s
	}
	return nil
}

// put makes s resolvable: its ref stays when the table still holds it;
// otherwise it gets the next one, in the slot of the series given a ref
// longest ago. A series that had lost its slot thus never takes that slot
// back from the series holding it now.
func (t *refTable) put(s *series) {
	if ref := storage.SeriesRef(s.ref.Load()); ref != 0 && t.slot(ref).Load() == s {
		return
	}
	ref := storage.SeriesRef(t.last.Add(1))
	s.ref.Store(uint64(ref))
	t.slot(ref).Store(s)
}
