package index

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/translate"
)

// maxVerify is the most cached candidates a query checks one by one with
// point reads of row_keys; a query selecting more lists the partition
// again, which then costs less than the point reads.
const maxVerify = 256

// maxBuilding is how many listings are built into kept ones at once.
const maxBuilding = 2

// keptResult is what a lookup of Index.listings found.
type keptResult int

const (
	keptMiss    keptResult = iota
	keptHit                // answered from the listing
	keptTooMany            // a listing, but more than maxVerify candidates
)

// keptRowKeys answers phase 2 of (metric, rowTime) from Index.listings
// when it holds a listing: each candidate is checked against row_keys, so
// an entry deleted by another writer since the listing is not used. Unless
// it returns keptHit the caller lists the partition; n is how many cached
// entries were looked at. add gets each entry's tags sorted, in a slice of
// its own, and strings the listing holds unchanged for as long as it
// lives: it may keep both.
func (x *Index) keptRowKeys(ctx context.Context, metric string, rowTime int64, plan translate.Plan, add func(string, []codec.Tag)) (n int, res keptResult, err error) {
	l := x.keptListing(metric, rowTime)
	if l == nil {
		return 0, keptMiss, nil
	}
	var cands []entry
	n = l.match(plan, func(dataType string, tags []codec.Tag) {
		if len(cands) <= maxVerify {
			tags = slices.Clone(tags)
			codec.SortTags(tags) // as the memo's keys want them
			cands = append(cands, entry{dataType, tags})
		}
	})
	if len(cands) > maxVerify {
		x.m.ListingLookups.WithLabelValues("too_many").Inc()
		return n, keptTooMany, nil
	}
	x.m.ListingLookups.WithLabelValues("hit").Inc()
	x.refreshLater(metric, rowTime, l)
	exists, err := x.checkRowKeys(ctx, metric, rowTime, cands)
	if err != nil {
		return n, keptMiss, err
	}
	for i, c := range cands {
		if exists[i] {
			add(c.dataType, c.tags)
		}
	}
	return n, keptHit, nil
}

// keptListing is the kept listing of (metric, rowTime), or nil.
func (x *Index) keptListing(metric string, rowTime int64) *listing {
	if x.listings == nil {
		return nil
	}
	l, ok := x.listings.Get(partitionKey(metric, rowTime))
	if !ok || l.isStale() {
		x.m.ListingLookups.WithLabelValues("miss").Inc()
		return nil
	}
	return l
}

// startFill returns a builder for the listing of (metric, rowTime) about
// to run, or nil when no listing is to be kept. Entries written from now
// until the built listing is in the cache are handed to it (NoteWritten),
// so it misses none of this process's writes.
func (x *Index) startFill(metric string, rowTime int64) *listingBuilder {
	return x.startFillOf(metric, rowTime, false)
}

func (x *Index) startFillOf(metric string, rowTime int64, refresh bool) *listingBuilder {
	if x.listings == nil {
		return nil
	}
	key := partitionKey(metric, rowTime)
	if _, again := x.listedOnce.Get(key); !again && !refresh {
		// Building costs more CPU than the listing itself (README,
		// "Cached listings"); a partition listed once may never be read
		// again, so it is kept from its second listing on.
		x.listedOnce.Add(key, struct{}{})
		return nil
	}
	x.fillMu.Lock()
	defer x.fillMu.Unlock()
	if x.fills[key] != nil {
		return nil // another query is listing it
	}
	select {
	case x.building <- struct{}{}:
	default:
		// Each build holds up to twice its listing's weight for a moment;
		// a few at a time bound that.
		return nil
	}
	b := newListingBuilder(x.seed, x.opts.Now())
	b.maxBytes = x.opts.ListingBytes / 2
	x.fills[key] = b
	go func() {
		defer func() { <-x.building }()
		for c := range b.ch {
			b.consume(c)
		}
		var l *listing
		if b.complete {
			l = b.finish()
		}
		x.fillMu.Lock()
		defer x.fillMu.Unlock()
		delete(x.fills, key)
		if l == nil {
			return
		}
		for _, e := range b.pending {
			l.addExtra(x.seed, e.dataType, e.tags)
		}
		x.listings.Add(key, l)
	}()
	return b
}

// refreshLater lists (metric, rowTime) again in the background once its
// kept listing l is past half its life, so that a partition read often
// (a dashboard refreshed every minute) is always answered from memory,
// with no staleness beyond Options.TTL.
func (x *Index) refreshLater(metric string, rowTime int64, l *listing) {
	if x.opts.Now().Sub(l.listedAt) < x.opts.TTL/2 || !l.refreshing.CompareAndSwap(false, true) {
		return
	}
	b := x.startFillOf(metric, rowTime, true)
	if b == nil {
		return
	}
	go func() {
		var err error
		// Recovered, a panic leaves the listing unkept, as an error does.
		defer recovered.Into(&err, x.opts.Logger, "a row_keys listing")
		ctx, cancel := context.WithTimeout(context.Background(), x.opts.TTL/2)
		defer cancel()
		err = x.listRowKeys(ctx, metric, rowTime, b, func(string, []codec.Tag) {}) // a failed listing is not kept
	}()
}

// endFill ends the listing b; the builder keeps it when it is complete.
func (x *Index) endFill(b *listingBuilder, complete bool) {
	if b != nil {
		b.done(complete)
	}
}

// NoteWritten adds row_keys entries this process wrote to the listings held
// and being built, so that a cached listing never hides a series this
// process stored. Tags may alias the caller's buffers.
func (x *Index) NoteWritten(rows []engine.IndexedRowKey) {
	if x.listings == nil {
		return
	}
	keys := make([]string, len(rows))
	for i, r := range rows {
		keys[i] = partitionKey(r.Metric, r.RowTime)
	}
	// One lock for the request's rows; a listing being built is rare.
	x.fillMu.Lock()
	if len(x.fills) > 0 {
		for i, r := range rows {
			if b := x.fills[keys[i]]; b != nil {
				b.pending = append(b.pending, entry{strings.Clone(r.DataType), cloneTags(r.Tags)})
			}
		}
	}
	x.fillMu.Unlock()
	for i, r := range rows {
		if l, ok := x.listings.Get(keys[i]); ok {
			l.addExtra(x.seed, r.DataType, r.Tags)
		}
	}
}

// partitionKey names the row_keys partition (metric, rowTime).
func partitionKey(metric string, rowTime int64) string {
	return string(binary.BigEndian.AppendUint64([]byte(metric+"\x00"), uint64(rowTime)))
}

// Forget drops every kept listing: a delete removed entries, which the
// label lookups, as they do not check kept entries, would list until the
// listing expires.
func (x *Index) Forget() {
	if x.listings != nil {
		x.listings.Clear()
	}
}
