// Package readhint carries how the store reads one selector, as the query
// API decided from the expression around it (queryapi/rollups.go), to the
// store (kairosstore/rollupread.go): in the context of that selector's
// Select, never in its matchers, so that no answer can carry it (absent()
// and friends build their labels from the matchers). The shard of a
// sharded query travels in storage.SelectHints.ShardIndex and ShardCount,
// where Prometheus carries it.
package readhint

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/kairos-remote/kairos-adapter/rollup"
)

// Hint is how the store reads one selector.
type Hint struct {
	// Aggregate and Resolution choose the rollup series to read; the zero
	// Resolution means raw samples. For Count over raw samples the store
	// returns 1 for each sample, so the query's sum_over_time (the query
	// API rewrites count_over_time to it) counts them; for Counter it
	// returns a running sum of increases, resets applied. For Avg it
	// returns one point per bucket, at its end: the bucket's mean
	// (rollup.Mean), from the sum and count rollups where written and from
	// the raw samples elsewhere, so that avg_over_time over windows of
	// exactly one bucket is the mean of that bucket.
	Aggregate  rollup.Aggregate
	Resolution rollup.Resolution
	// WindowMillis > 0 limits the cells read to the windows the engine
	// evaluates: (t-W, t] for t = Start+W-1+k*Step (the SelectHints' Start
	// and Step), so a long range at a long step does not read every cell in
	// between. W is the selector's range, or the lookback delta for an
	// instant selector (whose hints' Range is 0).
	WindowMillis int64
}

// String is h for a person (tests, logs): "max@1h,windows=3600000".
func (h Hint) String() string {
	var parts []string
	if h.Resolution != 0 {
		parts = append(parts, string(h.Aggregate)+"@"+h.Resolution.String())
	} else if h.Aggregate != "" {
		parts = append(parts, string(h.Aggregate)+"@raw")
	}
	if h.WindowMillis > 0 {
		parts = append(parts, "windows="+strconv.FormatInt(h.WindowMillis, 10))
	}
	return strings.Join(parts, ",")
}

type key struct{}

// With is ctx carrying h for one Select.
func With(ctx context.Context, h Hint) context.Context {
	return context.WithValue(ctx, key{}, h)
}

// From is the hint ctx carries; the zero Hint (an ordinary read) if none.
func From(ctx context.Context) Hint {
	h, _ := ctx.Value(key{}).(Hint)
	return h
}

// Query is what the parts and shards of one query share: the frontend
// evaluates a range query as many evaluations, each of which selects the
// same series again, and the store keeps what it learned about them here
// (kairosstore/index: the row_keys entries it checked) for the next one.
// It lives as long as the query's context, so nothing in it outlives the
// query: whatever the store keeps is at most as old as the query.
type Query struct {
	mu   sync.Mutex
	vals map[any]any
}

type queryKey struct{}

// WithQuery is ctx carrying a new Query, or ctx itself when it carries one
// already (a shard inside a part shares its query's).
func WithQuery(ctx context.Context) context.Context {
	if QueryFrom(ctx) != nil {
		return ctx
	}
	return context.WithValue(ctx, queryKey{}, &Query{vals: map[any]any{}})
}

// QueryFrom is the Query ctx carries, nil if none.
func QueryFrom(ctx context.Context) *Query {
	q, _ := ctx.Value(queryKey{}).(*Query)
	return q
}

// Value is q's value under key, made by mk the first time it is asked for.
// Keys are the callers' own types, as for context values. A nil q makes a
// value each time: a query outside the frontend shares nothing.
func (q *Query) Value(key any, mk func() any) any {
	if q == nil {
		return mk()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	v, ok := q.vals[key]
	if !ok {
		v = mk()
		q.vals[key] = v
	}
	return v
}
