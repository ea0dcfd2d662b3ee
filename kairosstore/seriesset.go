package kairosstore

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
)

// seriesSet yields the series in label order without reading a sample:
// Prometheus's engine collects every series of a selector before it
// evaluates any, so samples read in Next would all be in memory at once. A
// series' samples are read when its Iterator is asked for and belong to
// that iterator, released when the caller moves it on to another series (as
// the engine and the remote-read handler do). Reads of the next series run
// ahead of the consumer, a bounded number of them, so that the store's
// latency overlaps the consumer's work. A series may turn out to have no
// sample in the range (a row overlapping it need not hold one): its
// iterator is then empty.
type seriesSet struct {
	ctx        context.Context
	s          *Store
	refs       []*index.Series
	start, end int64
	budget     *sampleBudget // nil: unlimited
	chunked    bool          // reads encode chunks (readChunks), not samples
	planned    *plannedRead  // non-nil: reads follow a read plan (rollupread.go)
	next       int           // the series Next yields next
	cur        *lazySeries

	reads    *sync.WaitGroup // the querier's: every read launched
	mu       sync.Mutex
	ahead    map[int]chan fetched // reads launched and not taken yet, by series
	launched int                  // reads of series [0, launched) were launched
	// lastLen is the sample count of the last series read. The series of
	// one query mostly share a scrape interval, so it sizes the next
	// series' slices once instead of growing them sample by sample, and
	// it narrows the read-ahead depth for long series.
	lastLen atomic.Int64
	// measured: a read has completed and set lastLen. Until then reads
	// ahead are not launched: each would grow its samples from nothing,
	// and copying them as they grow was a large part of a raw year
	// panel's CPU (BENCHMARKS.md, "Issue #31, second pass").
	measured atomic.Bool
}

// maxSizeHint caps the preallocation from lastLen, so that one long series
// cannot make every following short one allocate 1 MiB.
const maxSizeHint = 1 << 16

// fetched is one series read: its samples, or in a chunked set its chunks.
type fetched struct {
	series *listSeries
	chks   []chunks.Meta
	err    error
}

func newSeriesSet(ctx context.Context, s *Store, refs []*index.Series, start, end int64, reads *sync.WaitGroup, chunked bool, planned *plannedRead) *seriesSet {
	// The rows of a metric whose own name ends in ExemplarSuffix hold no
	// sample: such a series is known empty without a read.
	refs = slices.DeleteFunc(refs, func(ref *index.Series) bool {
		return !slices.ContainsFunc(ref.Rows, func(r index.Row) bool { return r.DataType != codec.TypeExemplar })
	})
	for _, ref := range refs {
		// In row order the samples of a one-type series come sorted.
		// Sorted here, once, because a series may be read twice at once
		// (asked for again while a read ahead of it still runs).
		slices.SortFunc(ref.Rows, func(a, b index.Row) int {
			return cmp.Or(cmp.Compare(a.RowTime, b.RowTime), strings.Compare(a.DataType, b.DataType))
		})
	}
	ss := &seriesSet{ctx: ctx, s: s, refs: refs, start: start, end: end, budget: budgetOf(ctx), chunked: chunked, planned: planned, ahead: map[int]chan fetched{}, reads: reads}
	// A read of rollups sizes nothing by lastLen, and on Cassandra waiting
	// for the first series alone is a series' round trips in a row: its
	// reads ahead start with it.
	if planned != nil && planned.rolled && !chunked {
		ss.measured.Store(true)
	}
	ss.mu.Lock()
	ss.fill(0)
	ss.mu.Unlock()
	return ss
}

// fill launches reads from series from on until the read-ahead depth is
// reached. Called with mu held.
func (ss *seriesSet) fill(from int) {
	depth := int64(ss.s.opts.ReadConcurrency)
	if !ss.measured.Load() {
		depth = 1
	}
	n := ss.lastLen.Load()
	if n > 0 {
		depth = max(1, min(depth, ss.s.opts.ReadAheadSamples/n))
	}
	// Reads ahead never go past what the query may still load: beyond its
	// limit they would be work and memory thrown away, inside a request
	// that is being refused.
	switch left := ss.budget.left(); {
	case left <= 0:
		depth = 0
	case n > 0:
		depth = min(depth, max(1, left/n))
	}
	ss.launched = max(ss.launched, from)
	for ss.launched < len(ss.refs) && int64(len(ss.ahead)) < depth {
		ss.ahead[ss.launched] = ss.launch(ss.launched)
		ss.launched++
	}
}

func (ss *seriesSet) launch(i int) chan fetched {
	ch := make(chan fetched, 1)
	ref := ss.refs[i]
	// With room for a few more samples than the last series had: one
	// more would double the slices.
	n := ss.lastLen.Load()
	hint := int(min(n+n/8, maxSizeHint))
	ss.reads.Add(1)
	ss.s.readers.run(func() {
		defer ss.reads.Done()
		// A read runs on its own goroutine, where a panic (a cell no codec
		// expected, written by another process, or a bug) would end the
		// process, not just this query; it fails the series' read instead.
		defer func() {
			if p := recover(); p != nil {
				ch <- fetched{err: recovered.Err(ss.s.log, "read of "+ref.Labels.String(), p)}
			}
		}()
		if ss.chunked {
			chks, n, err := ss.s.readChunks(ss.ctx, ref, ss.start, ss.end, hint, ss.budget)
			if err == nil {
				ss.lastLen.Store(int64(n))
				ss.measured.Store(true)
			}
			ch <- fetched{chks: chks, err: err}
			return
		}
		var series *listSeries
		var err error
		if ss.planned != nil {
			series, err = ss.s.readPlanned(ss.ctx, ref, ss.planned, hint, ss.budget)
		} else {
			series, err = ss.s.readSeries(ss.ctx, ref, ss.start, ss.end, hint, ss.budget)
		}
		if err == nil {
			ss.lastLen.Store(int64(len(series.ts)))
			ss.measured.Store(true)
		}
		ch <- fetched{series: series, err: err}
	})
	return ch
}

// readerIdle is how long a reader goroutine waits for another read before
// it ends.
const readerIdle = time.Second

// readers runs the reads ahead on goroutines that stay for readerIdle after
// a read, for the next one: a read's stack grows to the depth of Pebble's
// iterators, which a new goroutine per read grew (and copied) again each
// time (BENCHMARKS.md, "The raw read path, in bulk"). There are never more
// of them than reads running at once, and none once reads stop. A read
// recovers its own panics (launch).
type readers struct {
	once sync.Once
	idle chan func() // unbuffered: a send succeeds only if a reader waits
}

// run runs f on an idle reader, or on a new one.
func (rs *readers) run(f func()) {
	rs.once.Do(func() { rs.idle = make(chan func()) })
	select {
	case rs.idle <- f:
	default:
		go rs.reader(f)
	}
}

func (rs *readers) reader(f func()) {
	t := time.NewTimer(readerIdle)
	defer t.Stop()
	for {
		f()
		f = nil // not kept while idle
		t.Reset(readerIdle)
		select {
		case f = <-rs.idle:
		case <-t.C:
			return
		}
	}
}

// take returns the samples of series i: the read launched ahead of it, or
// a new one when there is none (a series asked for again, or out of order).
// Reads ahead of series before i are dropped: the consumer moved past them.
func (ss *seriesSet) take(i int) fetched {
	ss.mu.Lock()
	ch, ok := ss.ahead[i]
	if !ok {
		ch = ss.launch(i)
	}
	for j := range ss.ahead {
		if j <= i {
			delete(ss.ahead, j)
		}
	}
	measured := ss.measured.Load()
	if measured {
		ss.fill(i + 1)
	}
	ss.mu.Unlock()
	select {
	case r := <-ch:
		if !measured {
			ss.mu.Lock()
			ss.fill(i + 1)
			ss.mu.Unlock()
		}
		return r
	case <-ss.ctx.Done():
		return fetched{err: ss.ctx.Err()}
	}
}

func (ss *seriesSet) Next() bool {
	if ss.next >= len(ss.refs) {
		return false
	}
	ss.cur = &lazySeries{set: ss, i: ss.next, lset: ss.refs[ss.next].Labels}
	ss.next++
	return true
}

func (ss *seriesSet) At() storage.Series                { return ss.cur }
func (ss *seriesSet) Err() error                        { return nil }
func (ss *seriesSet) Warnings() annotations.Annotations { return nil }

// lazySeries is one series of a seriesSet; it holds no sample.
type lazySeries struct {
	set  *seriesSet
	i    int
	lset labels.Labels
}

func (l *lazySeries) Labels() labels.Labels { return l.lset }

// Iterator reads the series' samples (or takes them from the read ahead)
// into an iterator; reusing it hands the samples of the series it iterated
// before to later reads (chunkenc.Iterator's contract: the caller is done
// with it). A read error is the iterator's Err.
func (l *lazySeries) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	li, ok := it.(*listIterator)
	if ok {
		l.set.s.recycle(li.s)
		li.s = nil
	} else {
		li = &listIterator{}
	}
	r := l.set.take(l.i)
	if r.err != nil {
		r.series = &listSeries{lset: l.lset}
	}
	li.reset(r.series, r.err)
	return li
}
