package index

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/translate"
)

// listing is the listing of one row_keys partition (metric, row time) held
// in memory and indexed by tag pair, Prometheus-postings style, so that a
// query for one host of a metric with a million series does not list the
// million entries again (phase 2 of the read, §7.4). It is a cache, so it
// only ever proposes candidates: the read checks each one against
// row_keys before using it (Index.keptRowKeys), which makes entries that
// another writer deleted invisible at once. Entries another writer added
// become visible when the partition is listed again (refreshLater), at the
// latest when the listing expires (Options.TTL); entries this
// process writes are added as they are written (NoteWritten).
//
// Everything above mu is immutable once built.
type listing struct {
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
	extra     []entry // written by this process after the listing
	extraHash map[uint64]bool
	stale     bool // too many extras: list again
}

// entry is one row_keys entry whose strings the holder owns.
type entry struct {
	dataType string
	tags     []codec.Tag
}

// maxExtra is how many entries written after the listing a listing takes
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

// listingBuilder builds a listing from a listing, in a goroutine of its
// own beside the query that lists: the query copies each entry's bytes
// into a chunk (add) and goes on, so that a cold query does not wait for
// the interning and hashing, which cost more than the listing itself.
type listingBuilder struct {
	seed     maphash.Seed
	listedAt time.Time
	// The listing's side.
	chunk    []byte
	ch       chan []byte
	complete bool // set before ch is closed
	// The building goroutine's side.
	l         *listing
	typeID    map[string]uint16
	nameID    map[string]uint32
	pairID    []map[string]uint32 // by name id
	hashes    []uint64
	pairH     []uint64
	prevNames []uint32 // the previous entry's name ids: entries mostly share names, in the same order
	tags      []codec.Tag
	tooMany   bool  // too large to keep: the rest is skipped
	maxBytes  int64 // the most a kept listing may weigh
	// pending are entries written while the listing ran (Index.NoteWritten),
	// guarded by Index.fillMu.
	pending []entry
}

// chunkBytes is the size of the chunks the listing hands the builder;
// builderBacklog chunks may wait, which bounds the memory of a builder
// that falls behind (the listing then waits for it).
const (
	chunkBytes     = 1 << 20
	builderBacklog = 16
)

func newListingBuilder(seed maphash.Seed, now time.Time) *listingBuilder {
	return &listingBuilder{
		seed:     seed,
		listedAt: now,
		ch:       make(chan []byte, builderBacklog),
		l:        &listing{entOff: []uint32{0}, byName: map[string][]uint32{}},
		typeID:   map[string]uint16{},
		nameID:   map[string]uint32{},
	}
}

// add copies one listed entry for the builder. Its strings may alias the
// engine's buffers.
func (b *listingBuilder) add(dataType string, tags []codec.Tag) {
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
func (b *listingBuilder) done(complete bool) {
	if len(b.chunk) > 0 {
		b.ch <- b.chunk
	}
	b.chunk = nil
	b.complete = complete
	close(b.ch)
}

// consume reads the entries of one chunk (the encoding of add).
func (b *listingBuilder) consume(c []byte) {
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

func (b *listingBuilder) addEntry(dataType string, tags []codec.Tag) {
	l := b.l
	if b.tooMany {
		return
	}
	if len(l.entType) == 1<<32-1 || len(l.entPairs)+len(tags) >= 1<<32-1 {
		b.tooMany = true
		return
	}
	if len(l.entType)%1024 == 0 && b.estimate() > b.maxBytes {
		// It could not be kept: stop spending memory on it.
		b.tooMany = true
		*l = listing{}
		b.pairID, b.hashes, b.pairH = nil, nil, nil
		return
	}
	if !translate.Readable(tags) {
		return // no read returns it
	}
	t, ok := b.typeID[dataType]
	if !ok {
		if len(l.types) == 1<<16-1 {
			b.tooMany = true
			return
		}
		t = uint16(len(l.types))
		dataType = strings.Clone(dataType)
		l.types = append(l.types, dataType)
		b.typeID[dataType] = t
	}
	h := maphash.String(b.seed, l.types[t])
	for i, tag := range tags {
		var n uint32
		if i < len(b.prevNames) && l.names[b.prevNames[i]] == tag.Name {
			n = b.prevNames[i]
		} else {
			n, ok = b.nameID[tag.Name]
			if !ok {
				n = uint32(len(l.names))
				name := strings.Clone(tag.Name)
				l.names = append(l.names, name)
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
			p = uint32(len(l.pairValue))
			value := strings.Clone(tag.Value)
			l.pairName = append(l.pairName, n)
			l.pairValue = append(l.pairValue, value)
			b.pairH = append(b.pairH, pairHash(b.seed, l.names[n], value))
			b.pairID[n][value] = p
		}
		h += b.pairH[p]
		l.entPairs = append(l.entPairs, p)
	}
	l.entType = append(l.entType, t)
	l.entOff = append(l.entOff, uint32(len(l.entPairs)))
	b.hashes = append(b.hashes, h)
}

// estimate is a lower bound of the weight of the listing built so far.
func (b *listingBuilder) estimate() int64 {
	l := b.l
	return 8*int64(len(l.entPairs)) + 16*int64(len(l.entType)) + 40*int64(len(l.pairValue))
}

// finish builds the postings and returns the index, or nil when the
// partition is too large to index.
func (b *listingBuilder) finish() *listing {
	l := b.l
	if b.tooMany {
		return nil
	}
	// Postings in CSR form: count, prefix sums, fill.
	l.postOff = make([]uint32, len(l.pairValue)+1)
	for _, p := range l.entPairs {
		l.postOff[p+1]++
	}
	for i := 1; i < len(l.postOff); i++ {
		l.postOff[i] += l.postOff[i-1]
	}
	l.post = make([]uint32, len(l.entPairs))
	fill := slices.Clone(l.postOff[:len(l.pairValue)])
	for e := range l.entType {
		for _, p := range l.entPairs[l.entOff[e]:l.entOff[e+1]] {
			l.post[fill[p]] = uint32(e)
			fill[p]++
		}
	}
	for p, n := range l.pairName {
		name := l.names[n]
		l.byName[name] = append(l.byName[name], uint32(p))
	}
	for _, ids := range l.byName {
		slices.SortFunc(ids, func(a, b uint32) int { return strings.Compare(l.pairValue[a], l.pairValue[b]) })
	}
	slices.Sort(b.hashes)
	l.hashes = b.hashes
	l.bytes = 4*int64(len(l.entPairs)+len(l.post)+len(l.entOff)+len(l.postOff)+2*len(l.pairName)) +
		2*int64(len(l.entType)) + 8*int64(len(l.hashes)) + 256
	for _, v := range l.pairValue {
		l.bytes += 16 + int64(len(v))
	}
	l.bytes += 48 * int64(len(l.byName)) // map entries and slice headers
	l.extraHash = map[uint64]bool{}
	l.listedAt = b.listedAt
	return l
}

// has reports whether the listing or the extras hold an entry of hash h.
// The caller holds l.mu.
func (l *listing) has(h uint64) bool {
	_, ok := slices.BinarySearch(l.hashes, h)
	return ok || l.extraHash[h]
}

// addExtra adds an entry this process wrote, unless the index has it.
// Its strings may alias the caller's buffers.
func (l *listing) addExtra(seed maphash.Seed, dataType string, tags []codec.Tag) {
	h := entryHash(seed, dataType, tags)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.has(h) {
		return
	}
	if len(l.extra) >= maxExtra {
		l.stale = true
		return
	}
	tags = cloneTags(tags)
	codec.SortTags(tags)
	l.extra = append(l.extra, entry{strings.Clone(dataType), tags})
	l.extraHash[h] = true
}

func (l *listing) isStale() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stale
}

// extras is what this process wrote after the listing, so far.
func (l *listing) extras() []entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.extra
}

// match calls fn with every entry that passes plan's tag matchers, and
// returns how many entries it looked at. Strings passed to fn belong to the
// index and stay valid. It narrows by the one tag name whose matching pairs
// hold the fewest entries; with no such name it looks at every entry.
func (l *listing) match(plan translate.Plan, fn func(dataType string, tags []codec.Tag)) int {
	var (
		best     [][]uint32 // posting lists of the narrowest name
		bestSize = -1
	)
	consider := func(pairs []uint32) {
		size := 0
		for _, p := range pairs {
			size += int(l.postOff[p+1] - l.postOff[p])
		}
		if bestSize >= 0 && size >= bestSize {
			return
		}
		best, bestSize = best[:0], size
		for _, p := range pairs {
			best = append(best, l.post[l.postOff[p]:l.postOff[p+1]])
		}
	}
	for name, values := range plan.TagValues {
		ids := l.byName[name]
		var pairs []uint32
		for _, v := range values {
			i, ok := slices.BinarySearchFunc(ids, v, func(p uint32, v string) int { return strings.Compare(l.pairValue[p], v) })
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
			for _, p := range l.byName[lm.Name] {
				if lm.Matches(l.pairValue[p]) {
					pairs = append(pairs, p)
				}
			}
			consider(pairs)
		}
	}
	var tags []codec.Tag
	try := func(e uint32) {
		tags = tags[:0]
		for _, p := range l.entPairs[l.entOff[e]:l.entOff[e+1]] {
			tags = append(tags, codec.Tag{Name: l.names[l.pairName[p]], Value: l.pairValue[p]})
		}
		if plan.MatchTags(tags) {
			codec.SortTags(tags)
			fn(l.types[l.entType[e]], tags)
		}
	}
	n := 0
	if bestSize < 0 {
		for e := range l.entType {
			try(uint32(e))
		}
		n = len(l.entType)
	} else {
		for _, list := range best {
			for _, e := range list {
				try(e)
			}
		}
		n = bestSize
	}
	extra := l.extras()
	for _, e := range extra {
		if plan.MatchTags(e.tags) {
			fn(e.dataType, e.tags)
		}
	}
	return n + len(extra)
}

// values calls fn with the values of tag name over the entries that pass
// plan's tag matchers, each value at least once. Without tag matchers it
// reads them off the pair index instead of the entries.
func (l *listing) values(name string, plan translate.Plan, fn func(value string)) {
	if len(plan.TagMatchers()) > 0 {
		l.match(plan, func(_ string, tags []codec.Tag) {
			for _, t := range tags {
				if t.Name == name {
					fn(t.Value)
				}
			}
		})
		return
	}
	for _, p := range l.byName[name] {
		fn(l.pairValue[p])
	}
	extra := l.extras()
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
func (l *listing) tagNames(plan translate.Plan, fn func(name string)) bool {
	any := false
	if len(plan.TagMatchers()) > 0 {
		l.match(plan, func(_ string, tags []codec.Tag) {
			any = true
			for _, t := range tags {
				fn(t.Name)
			}
		})
		return any
	}
	for _, n := range l.names {
		fn(n)
	}
	extra := l.extras()
	for _, e := range extra {
		for _, t := range e.tags {
			fn(t.Name)
		}
	}
	return len(l.entType) > 0 || len(extra) > 0
}
