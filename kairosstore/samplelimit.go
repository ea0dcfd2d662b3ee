package kairosstore

import (
	"context"
	"math"
	"sync/atomic"

	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
)

// ErrTooManySamples fails the reads of a query past the limit given with
// WithSampleLimit. It is storeerr's, so that the query API recognises it
// without importing the store.
var ErrTooManySamples = storeerr.ErrTooManySamples

type sampleLimitKey struct{}

// sampleBudget counts the samples the reads of one query loaded.
type sampleBudget struct {
	limit int64
	used  atomic.Int64
}

// budgetStep is how many samples a read counts at once: one atomic add per
// budgetStep samples, and a read overshoots the limit by less than that.
const budgetStep = 1024

// WithSampleLimit returns a context under which the series read by every
// Select given it together load at most limit samples (0: no limit); past
// it their iterators fail with ErrTooManySamples. The query API gives each
// PromQL query one (main.go passes this function as its
// Options.SampleLimit): it is how --query.max-samples bounds a PromQL query,
// so that the samples a query holds are bounded whatever the engine keeps
// of them. Counted are the samples inside the querier's
// range, as read: a series iterated twice counts twice.
func WithSampleLimit(ctx context.Context, limit int) context.Context {
	if limit <= 0 {
		return ctx
	}
	return context.WithValue(ctx, sampleLimitKey{}, &sampleBudget{limit: int64(limit)})
}

func budgetOf(ctx context.Context) *sampleBudget {
	b, _ := ctx.Value(sampleLimitKey{}).(*sampleBudget)
	return b
}

// left is how many samples the query may still load; no budget is no
// limit.
func (b *sampleBudget) left() int64 {
	if b == nil {
		return math.MaxInt64
	}
	return b.limit - b.used.Load()
}

// take counts n more samples, failing once the total is over the limit.
func (b *sampleBudget) take(n int64) error {
	if b == nil || n == 0 || b.used.Add(n) <= b.limit {
		return nil
	}
	return ErrTooManySamples
}
