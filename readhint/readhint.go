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

	"github.com/kairos-remote/kairos-adapter/rollup"
)

// Hint is how the store reads one selector.
type Hint struct {
	// Aggregate and Resolution choose the rollup series to read; the zero
	// Resolution means raw samples. For Count over raw samples the store
	// returns 1 for each sample, so the query's sum_over_time (the query
	// API rewrites count_over_time to it) counts them; for Counter it
	// returns a running sum of increases, resets applied.
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
