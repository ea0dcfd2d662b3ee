package kairosstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sync/errgroup"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/translate"
)

// rowIndex is the listing of one row_keys partition (metric, row time) held
// in memory and indexed by tag pair, Prometheus-postings style, so that a
// query for one host of a metric with a million series does not list the
// million entries again (phase 2 of the read, §7.4). It is a cache, so it
// only ever proposes candidates: the read checks each one against
// row_keys before using it (Store.cachedRowKeys), which makes entries that
// another writer deleted invisible at once. Entries another writer added
// become visible when the partition is listed again (refreshLater), at the
// latest when the listing expires (Options.IndexCacheTTL); entries this
// process writes are added as they are written (noteWritten).
//
// Everything above mu is immutable once built.
type rowIndex struct {
	types []string // distinct data types
	names []string // distinct tag names
	// Entry e has type types[entType[e]] and the tag pairs
	// entPairs[entOff[e]:entOff[e+1]].
	entType  []uint16
	entOff   []uint32
	entPairs []uint32
	// Pair p is names[pairName[p]] = pairValue[p]; the entries holding it
	// are post[postOff[p]:postOff[p+1]].
	pairName  []uint32
	pairValue []string
	postOff   []uint32
	post      []uint32
	byName    map[string][]uint32 // pair ids of a tag name, sorted by value
	hashes    []uint64            // entryHash of every entry, sorted
	bytes     int64
	listedAt  time.Time // when the listing started
	// refreshing is set once a listing to replace this one has started.
	refreshing atomic.Bool

	mu        sync.Mutex
	extra     []rowEntry // written by this process after the listing
	extraHash map[uint64]bool
	stale     bool // too many extras: list again
}

// rowEntry is one row_keys entry whose strings the holder owns.
type rowEntry struct {
	dataType string
	tags     []codec.Tag
}

// maxExtra is how many entries written after the listing a rowIndex takes
// before it is listed again: extras are matched one by one.
const maxExtra = 4096

// entryHash identifies a row_keys entry whatever the order of its tags: the
// sum of its pairs' hashes and its type's.
func entryHash(seed maphash.Seed, dataType string, tags []codec.Tag) uint64 {
	h := maphash.String(seed, dataType)
	for _, t := range tags {
		h += pairHash(seed, t.Name, t.Value)
	}
	return h
}

func pairHash(seed maphash.Seed, name, value string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(name)
	h.WriteByte(0)
	h.WriteString(value)
	// Spread the bits so that sums of pair hashes stay distinct.
	return h.Sum64() * 0x9e3779b97f4a7c15
}

// rowIndexBuilder builds a rowIndex from a listing, in a goroutine of its
// own beside the query that lists: the query copies each entry's bytes
// into a chunk (add) and goes on, so that a cold query does not wait for
// the interning and hashing (about 1.7 µs per entry of 10 tags).
type rowIndexBuilder struct {
	seed     maphash.Seed
	listedAt time.Time
	// The listing's side.
	chunk    []byte
	ch       chan []byte
	complete bool // set before ch is closed
	// The building goroutine's side.
	x         *rowIndex
	typeID    map[string]uint16
	nameID    map[string]uint32
	pairID    []map[string]uint32 // by name id
	hashes    []uint64
	pairH     []uint64
	prevNames []uint32 // the previous entry's name ids: entries mostly share names, in the same order
	tags      []codec.Tag
	tooMany   bool  // too large to keep: the rest is skipped
	maxBytes  int64 // the most a kept listing may weigh
	// pending are entries written while the listing ran (Store.noteWritten),
	// guarded by Store.fillMu.
	pending []rowEntry
}

// chunkBytes is the size of the chunks the listing hands the builder;
// builderBacklog chunks may wait, which bounds the memory of a builder
// that falls behind (the listing then waits for it).
const (
	chunkBytes     = 1 << 20
	builderBacklog = 16
)

func newRowIndexBuilder(seed maphash.Seed, now time.Time) *rowIndexBuilder {
	return &rowIndexBuilder{
		seed:     seed,
		listedAt: now,
		ch:       make(chan []byte, builderBacklog),
		x:        &rowIndex{entOff: []uint32{0}, byName: map[string][]uint32{}},
		typeID:   map[string]uint16{},
		nameID:   map[string]uint32{},
	}
}

// add copies one listed entry for the builder. Its strings may alias the
// engine's buffers.
func (b *rowIndexBuilder) add(dataType string, tags []codec.Tag) {
	c := b.chunk
	c = binary.AppendUvarint(c, uint64(len(dataType)))
	c = append(c, dataType...)
	c = binary.AppendUvarint(c, uint64(len(tags)))
	for _, t := range tags {
		c = binary.AppendUvarint(c, uint64(len(t.Name)))
		c = append(c, t.Name...)
		c = binary.AppendUvarint(c, uint64(len(t.Value)))
		c = append(c, t.Value...)
	}
	b.chunk = c
	if len(c) >= chunkBytes {
		b.ch <- c
		b.chunk = make([]byte, 0, chunkBytes+chunkBytes/8)
	}
}

// done hands over the last chunk and tells the builder whether the listing
// completed.
func (b *rowIndexBuilder) done(complete bool) {
	if len(b.chunk) > 0 {
		b.ch <- b.chunk
	}
	b.chunk = nil
	b.complete = complete
	close(b.ch)
}

// consume reads the entries of one chunk (the encoding of add).
func (b *rowIndexBuilder) consume(c []byte) {
	str := func() string {
		n, k := binary.Uvarint(c)
		s := aliasString(c[k : k+int(n)])
		c = c[k+int(n):]
		return s
	}
	for len(c) > 0 {
		dataType := str()
		n, k := binary.Uvarint(c)
		c = c[k:]
		b.tags = b.tags[:0]
		for range n {
			name := str()
			b.tags = append(b.tags, codec.Tag{Name: name, Value: str()})
		}
		b.addEntry(dataType, b.tags)
	}
}

// aliasString is b as a string without a copy; valid while b is.
func aliasString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func (b *rowIndexBuilder) addEntry(dataType string, tags []codec.Tag) {
	x := b.x
	if b.tooMany {
		return
	}
	if len(x.entType) == 1<<32-1 || len(x.entPairs)+len(tags) >= 1<<32-1 {
		b.tooMany = true
		return
	}
	if len(x.entType)%1024 == 0 && b.estimate() > b.maxBytes {
		// It could not be kept: stop spending memory on it.
		b.tooMany = true
		*x = rowIndex{}
		b.pairID, b.hashes, b.pairH = nil, nil, nil
		return
	}
	if !translate.Readable(tags) {
		return // no read returns it
	}
	t, ok := b.typeID[dataType]
	if !ok {
		if len(x.types) == 1<<16-1 {
			b.tooMany = true
			return
		}
		t = uint16(len(x.types))
		dataType = strings.Clone(dataType)
		x.types = append(x.types, dataType)
		b.typeID[dataType] = t
	}
	h := maphash.String(b.seed, x.types[t])
	for i, tag := range tags {
		var n uint32
		if i < len(b.prevNames) && x.names[b.prevNames[i]] == tag.Name {
			n = b.prevNames[i]
		} else {
			n, ok = b.nameID[tag.Name]
			if !ok {
				n = uint32(len(x.names))
				name := strings.Clone(tag.Name)
				x.names = append(x.names, name)
				b.nameID[name] = n
				b.pairID = append(b.pairID, map[string]uint32{})
			}
			if i < len(b.prevNames) {
				b.prevNames[i] = n
			} else {
				b.prevNames = append(b.prevNames, n)
			}
		}
		p, ok := b.pairID[n][tag.Value]
		if !ok {
			p = uint32(len(x.pairValue))
			value := strings.Clone(tag.Value)
			x.pairName = append(x.pairName, n)
			x.pairValue = append(x.pairValue, value)
			b.pairH = append(b.pairH, pairHash(b.seed, x.names[n], value))
			b.pairID[n][value] = p
		}
		h += b.pairH[p]
		x.entPairs = append(x.entPairs, p)
	}
	x.entType = append(x.entType, t)
	x.entOff = append(x.entOff, uint32(len(x.entPairs)))
	b.hashes = append(b.hashes, h)
}

// estimate is a lower bound of the weight of the listing built so far.
func (b *rowIndexBuilder) estimate() int64 {
	x := b.x
	return 8*int64(len(x.entPairs)) + 16*int64(len(x.entType)) + 40*int64(len(x.pairValue))
}

// finish builds the postings and returns the index, or nil when the
// partition is too large to index.
func (b *rowIndexBuilder) finish() *rowIndex {
	x := b.x
	if b.tooMany {
		return nil
	}
	// Postings in CSR form: count, prefix sums, fill.
	x.postOff = make([]uint32, len(x.pairValue)+1)
	for _, p := range x.entPairs {
		x.postOff[p+1]++
	}
	for i := 1; i < len(x.postOff); i++ {
		x.postOff[i] += x.postOff[i-1]
	}
	x.post = make([]uint32, len(x.entPairs))
	fill := slices.Clone(x.postOff[:len(x.pairValue)])
	for e := range x.entType {
		for _, p := range x.entPairs[x.entOff[e]:x.entOff[e+1]] {
			x.post[fill[p]] = uint32(e)
			fill[p]++
		}
	}
	for p, n := range x.pairName {
		name := x.names[n]
		x.byName[name] = append(x.byName[name], uint32(p))
	}
	for _, ids := range x.byName {
		slices.SortFunc(ids, func(a, b uint32) int { return strings.Compare(x.pairValue[a], x.pairValue[b]) })
	}
	slices.Sort(b.hashes)
	x.hashes = b.hashes
	x.bytes = 4*int64(len(x.entPairs)+len(x.post)+len(x.entOff)+len(x.postOff)+2*len(x.pairName)) +
		2*int64(len(x.entType)) + 8*int64(len(x.hashes)) + 256
	for _, v := range x.pairValue {
		x.bytes += 16 + int64(len(v))
	}
	x.bytes += 48 * int64(len(x.byName)) // map entries and slice headers
	x.extraHash = map[uint64]bool{}
	x.listedAt = b.listedAt
	return x
}

// has reports whether the listing or the extras hold an entry of hash h.
// The caller holds x.mu.
func (x *rowIndex) has(h uint64) bool {
	_, ok := slices.BinarySearch(x.hashes, h)
	return ok || x.extraHash[h]
}

// addExtra adds an entry this process wrote, unless the index has it.
// Its strings may alias the caller's buffers.
func (x *rowIndex) addExtra(seed maphash.Seed, dataType string, tags []codec.Tag) {
	h := entryHash(seed, dataType, tags)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.has(h) {
		return
	}
	if len(x.extra) >= maxExtra {
		x.stale = true
		return
	}
	tags = cloneTags(tags)
	codec.SortTags(tags)
	x.extra = append(x.extra, rowEntry{strings.Clone(dataType), tags})
	x.extraHash[h] = true
}

func (x *rowIndex) isStale() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.stale
}

// extras is what this process wrote after the listing, so far.
func (x *rowIndex) extras() []rowEntry {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.extra
}

// match calls fn with every entry that passes plan's tag matchers, and
// returns how many entries it looked at. Strings passed to fn belong to the
// index and stay valid. It narrows by the one tag name whose matching pairs
// hold the fewest entries; with no such name it looks at every entry.
func (x *rowIndex) match(plan translate.Plan, fn func(dataType string, tags []codec.Tag)) int {
	var (
		best     [][]uint32 // posting lists of the narrowest name
		bestSize = -1
	)
	consider := func(pairs []uint32) {
		size := 0
		for _, p := range pairs {
			size += int(x.postOff[p+1] - x.postOff[p])
		}
		if bestSize >= 0 && size >= bestSize {
			return
		}
		best, bestSize = best[:0], size
		for _, p := range pairs {
			best = append(best, x.post[x.postOff[p]:x.postOff[p+1]])
		}
	}
	for name, values := range plan.TagValues {
		ids := x.byName[name]
		var pairs []uint32
		for _, v := range values {
			i, ok := slices.BinarySearchFunc(ids, v, func(p uint32, v string) int { return strings.Compare(x.pairValue[p], v) })
			if ok {
				pairs = append(pairs, ids[i])
			}
		}
		consider(pairs)
	}
	if bestSize < 0 {
		// No literal values: a matcher that refuses "" still requires the
		// tag, so only the pairs of its name it accepts can match.
		for _, lm := range plan.TagMatchers() {
			if lm.Matches("") {
				continue
			}
			var pairs []uint32
			for _, p := range x.byName[lm.Name] {
				if lm.Matches(x.pairValue[p]) {
					pairs = append(pairs, p)
				}
			}
			consider(pairs)
		}
	}
	var tags []codec.Tag
	try := func(e uint32) {
		tags = tags[:0]
		for _, p := range x.entPairs[x.entOff[e]:x.entOff[e+1]] {
			tags = append(tags, codec.Tag{Name: x.names[x.pairName[p]], Value: x.pairValue[p]})
		}
		if plan.MatchTags(tags) {
			codec.SortTags(tags)
			fn(x.types[x.entType[e]], tags)
		}
	}
	n := 0
	if bestSize < 0 {
		for e := range x.entType {
			try(uint32(e))
		}
		n = len(x.entType)
	} else {
		for _, list := range best {
			for _, e := range list {
				try(e)
			}
		}
		n = bestSize
	}
	extra := x.extras()
	for _, e := range extra {
		if plan.MatchTags(e.tags) {
			fn(e.dataType, e.tags)
		}
	}
	return n + len(extra)
}

// maxVerify is the most cached candidates a query checks one by one with
// point reads of row_keys; a query selecting more lists the partition
// again, which then costs less than the point reads.
const maxVerify = 256

// maxBuilding is how many listings are built into kept ones at once.
const maxBuilding = 2

// cacheResult is what a lookup of Store.rowIndexes found.
type cacheResult int

const (
	cacheMiss    cacheResult = iota
	cacheHit                 // answered from the listing
	cacheTooMany             // a listing, but more than maxVerify candidates
)

// cachedRowKeys answers phase 2 of (metric, rowTime) from Store.rowIndexes
// when it holds a listing: each candidate is checked against row_keys, so
// an entry deleted by another writer since the listing is not used. Unless
// it returns cacheHit the caller lists the partition; n is how many cached
// entries were looked at.
func (s *Store) cachedRowKeys(ctx context.Context, metric string, rowTime int64, plan translate.Plan, add func(string, []codec.Tag)) (n int, res cacheResult, err error) {
	x := s.keptListing(metric, rowTime)
	if x == nil {
		return 0, cacheMiss, nil
	}
	var cands []rowEntry
	n = x.match(plan, func(dataType string, tags []codec.Tag) {
		if len(cands) <= maxVerify {
			cands = append(cands, rowEntry{dataType, slices.Clone(tags)})
		}
	})
	if len(cands) > maxVerify {
		s.m.rowIndexLookups.WithLabelValues("too_many").Inc()
		return n, cacheTooMany, nil
	}
	s.m.rowIndexLookups.WithLabelValues("hit").Inc()
	s.refreshLater(metric, rowTime, x)
	exists := make([]bool, len(cands))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.ReadConcurrency)
	for i, c := range cands {
		g.Go(func() (err error) {
			exists[i], err = s.eng.RowKeyExists(gctx, metric, rowTime, c.dataType, c.tags)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return n, cacheMiss, fmt.Errorf("check row_keys of %q: %w", metric, err)
	}
	for i, c := range cands {
		if exists[i] {
			add(c.dataType, c.tags)
		}
	}
	return n, cacheHit, nil
}

// keptListing is the kept listing of (metric, rowTime), or nil.
func (s *Store) keptListing(metric string, rowTime int64) *rowIndex {
	if s.rowIndexes == nil {
		return nil
	}
	x, ok := s.rowIndexes.Get(metricRowKey(metric, rowTime))
	if !ok || x.isStale() {
		s.m.rowIndexLookups.WithLabelValues("miss").Inc()
		return nil
	}
	return x
}

// startFill returns a builder for the listing of (metric, rowTime) about
// to run, or nil when no listing is to be kept. Entries written from now
// until the built listing is in the cache are handed to it (noteWritten),
// so it misses none of this process's writes.
func (s *Store) startFill(metric string, rowTime int64) *rowIndexBuilder {
	return s.startFillOf(metric, rowTime, false)
}

func (s *Store) startFillOf(metric string, rowTime int64, refresh bool) *rowIndexBuilder {
	if s.rowIndexes == nil {
		return nil
	}
	key := metricRowKey(metric, rowTime)
	if _, again := s.listedOnce.Get(key); !again && !refresh {
		// Building costs about three times the adapter's CPU of the
		// listing itself; a partition listed once may never be read
		// again, so it is kept from its second listing on.
		s.listedOnce.Add(key, struct{}{})
		return nil
	}
	s.fillMu.Lock()
	defer s.fillMu.Unlock()
	if s.fills[key] != nil {
		return nil // another query is listing it
	}
	select {
	case s.building <- struct{}{}:
	default:
		// Each build holds up to twice its listing's weight for a moment;
		// a few at a time bound that.
		return nil
	}
	b := newRowIndexBuilder(s.seed, s.opts.Now())
	b.maxBytes = s.opts.RowKeysCacheBytes / 2
	s.fills[key] = b
	go func() {
		defer func() { <-s.building }()
		for c := range b.ch {
			b.consume(c)
		}
		var x *rowIndex
		if b.complete {
			x = b.finish()
		}
		s.fillMu.Lock()
		defer s.fillMu.Unlock()
		delete(s.fills, key)
		if x == nil {
			return
		}
		for _, e := range b.pending {
			x.addExtra(s.seed, e.dataType, e.tags)
		}
		s.rowIndexes.Add(key, x)
	}()
	return b
}

// refreshLater lists (metric, rowTime) again in the background once its
// kept listing x is past half its life, so that a partition read often
// (a dashboard refreshed every minute) is always answered from memory,
// with no staleness beyond IndexCacheTTL.
func (s *Store) refreshLater(metric string, rowTime int64, x *rowIndex) {
	if s.opts.Now().Sub(x.listedAt) < s.opts.IndexCacheTTL/2 || !x.refreshing.CompareAndSwap(false, true) {
		return
	}
	b := s.startFillOf(metric, rowTime, true)
	if b == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.IndexCacheTTL/2)
		defer cancel()
		_ = s.listRowKeys(ctx, metric, rowTime, b, func(string, []codec.Tag) {}) // a failed listing is not kept
	}()
}

// endFill ends the listing b; the builder keeps it when it is complete.
func (s *Store) endFill(b *rowIndexBuilder, complete bool) {
	if b != nil {
		b.done(complete)
	}
}

// noteWritten adds row_keys entries this process wrote to the listings held
// and being built, so that a cached listing never hides a series this
// process stored. Tags may alias the caller's buffers.
func (s *Store) noteWritten(rows []engine.IndexedRowKey) {
	if s.rowIndexes == nil {
		return
	}
	keys := make([]string, len(rows))
	for i, r := range rows {
		keys[i] = metricRowKey(r.Metric, r.RowTime)
	}
	// One lock for the request's rows; a listing being built is rare.
	s.fillMu.Lock()
	if len(s.fills) > 0 {
		for i, r := range rows {
			if b := s.fills[keys[i]]; b != nil {
				b.pending = append(b.pending, rowEntry{strings.Clone(r.DataType), cloneTags(r.Tags)})
			}
		}
	}
	s.fillMu.Unlock()
	for i, r := range rows {
		if x, ok := s.rowIndexes.Get(keys[i]); ok {
			x.addExtra(s.seed, r.DataType, r.Tags)
		}
	}
}

// values calls fn with the values of tag name over the entries that pass
// plan's tag matchers, each value at least once. Without tag matchers it
// reads them off the pair index instead of the entries.
func (x *rowIndex) values(name string, plan translate.Plan, fn func(value string)) {
	if len(plan.TagMatchers()) > 0 {
		x.match(plan, func(_ string, tags []codec.Tag) {
			for _, t := range tags {
				if t.Name == name {
					fn(t.Value)
				}
			}
		})
		return
	}
	for _, p := range x.byName[name] {
		fn(x.pairValue[p])
	}
	extra := x.extras()
	for _, e := range extra {
		for _, t := range e.tags {
			if t.Name == name {
				fn(t.Value)
			}
		}
	}
}

// tagNames calls fn with the tag names of the entries that pass plan's tag
// matchers, each at least once, and reports whether any entry passed.
func (x *rowIndex) tagNames(plan translate.Plan, fn func(name string)) bool {
	any := false
	if len(plan.TagMatchers()) > 0 {
		x.match(plan, func(_ string, tags []codec.Tag) {
			any = true
			for _, t := range tags {
				fn(t.Name)
			}
		})
		return any
	}
	for _, n := range x.names {
		fn(n)
	}
	extra := x.extras()
	for _, e := range extra {
		for _, t := range e.tags {
			fn(t.Name)
		}
	}
	return len(x.entType) > 0 || len(extra) > 0
}
