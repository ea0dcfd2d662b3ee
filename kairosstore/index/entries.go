package index

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// EntriesByType calls fn with the number of row_keys entries of metric (as
// stored) of each data type, in each row window that overlaps start..end
// (ms): from the kept listing when one is held (cached), else by listing
// the partition, which is not kept. What the web UI's metrics explorer
// shows; no sample is read. Rows indexed only under the non-finite side
// index are not counted.
func (x *Index) EntriesByType(ctx context.Context, metric string, start, end int64, fn func(rowTime int64, dataType string, entries int, cached bool)) error {
	rts, err := x.rowTimes(ctx, metric, start, end)
	if err != nil {
		return err
	}
	for _, rt := range rts {
		if l := x.heldListing(metric, rt); l != nil {
			n := make([]int, len(l.types))
			for _, t := range l.entType {
				n[t]++
			}
			for i, t := range l.types {
				fn(rt, t, n[i], true)
			}
			l.mu.Lock()
			for _, e := range l.extra {
				fn(rt, e.dataType, 1, true)
			}
			l.mu.Unlock()
			continue
		}
		byType := map[string]int{}
		t0 := time.Now()
		err := x.r.RowKeys(ctx, metric, rt, func(dataType string, _ []codec.Tag) error {
			if _, ok := byType[dataType]; !ok {
				dataType = strings.Clone(dataType)
			}
			byType[dataType]++
			return nil
		})
		x.observe("row_keys", t0)
		if err != nil {
			return fmt.Errorf("read row_keys of %q: %w", metric, err)
		}
		for t, n := range byType {
			fn(rt, t, n, false)
		}
	}
	return nil
}

// heldListing is the kept listing of (metric, rowTime) without counting a
// lookup: the explorer's reads are not the queries the counter measures.
func (x *Index) heldListing(metric string, rowTime int64) *listing {
	if x.listings == nil {
		return nil
	}
	if l, ok := x.listings.Get(partitionKey(metric, rowTime)); ok && !l.isStale() {
		return l
	}
	return nil
}

// Listings is the number of kept row_keys listings.
func (x *Index) Listings() int {
	if x.listings == nil {
		return 0
	}
	return x.listings.Len()
}

// ListingBytes is the weight of the kept row_keys listings, the bytes that
// Options.ListingBytes bounds.
func (x *Index) ListingBytes() int64 {
	if x.listings == nil {
		return 0
	}
	return x.listings.Weight()
}
