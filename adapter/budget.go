package adapter

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/golang/snappy"
)

// writeCostPerDecodedByte is what one byte of a decoded remote-write body
// costs the adapter while the request is in flight: the decoded body, the
// decoded series, the store's pending cells and the engine's requests, and
// the garbage the collector has not returned yet. Measured as the rise of
// the adapter's peak RSS under 8 concurrent requests of 466,000 samples
// (73.9 MB decoded in all) on the Cassandra engine: 1,125 MiB, 16 bytes per
// decoded byte (BENCHMARKS.md, "Writes in flight"); 20 leaves a quarter for
// the collector's timing.
const writeCostPerDecodedByte = 20

// With the default budget, 1 GiB (config/flags.go): a request of
// Prometheus's default 2,000 samples (0.4 MB decoded with 10 labels a
// series) is estimated at 8 MB, so 32 concurrent ones
// (--web.max-concurrent-writes) take 250 MB and never meet the budget; a
// maximum-size request (32 MiB decoded) is estimated at 640 MiB, so a burst
// of them is served one at a time, beside smaller ones.

// writeCost is the estimate a write request reserves from the budget before
// it is decoded: its compressed body, which it already holds, plus
// writeCostPerDecodedByte per byte of its snappy-declared decoded size. A
// declared size that decodeSnappy will refuse (corrupt, or over limit) adds
// nothing: that request is answered 4xx before it allocates.
func writeCost(compressed []byte, limit int64) int64 {
	cost := int64(len(compressed))
	if n, err := snappy.DecodedLen(compressed); err == nil && int64(n) <= limit {
		cost += writeCostPerDecodedByte * int64(n)
	}
	return cost
}

// announcedCost is what a request reserves before its body is read: its
// Content-Length, or nothing when it has none or readBody will refuse it.
func announcedCost(r *http.Request, limit int64) int64 {
	if r.ContentLength <= 0 || r.ContentLength > limit {
		return 0
	}
	return r.ContentLength
}

// byteBudget bounds the estimated bytes of the requests in flight. Like the
// concurrency slots (requestSlots) it never queues: a request that does not fit is
// answered 503 at once and Prometheus retries it with backoff. A request
// larger than the whole budget is served when it is alone, since
// --web.max-request-bytes already admitted it and refusing it for ever would
// make Prometheus retry it for ever. A nil budget admits everything.
type byteBudget struct {
	mu    sync.Mutex
	limit int64
	used  int64
}

func newByteBudget(limit int64) *byteBudget {
	if limit <= 0 {
		return nil
	}
	return &byteBudget{limit: limit}
}

// reservation is what one request holds of a budget.
type reservation struct {
	b *byteBudget
	n int64
}

// reserve takes n bytes, or reports false and takes nothing.
func (b *byteBudget) reserve(n int64) (*reservation, bool) {
	r := &reservation{b: b}
	return r, r.growTo(n)
}

// growTo raises the reservation to n bytes (never lowers it), or reports
// false and keeps what it held. Beyond the limit it succeeds only when this
// reservation is all that is in flight.
func (r *reservation) growTo(n int64) bool {
	if r.b == nil || n <= r.n {
		return true
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	extra := n - r.n
	if b.used+extra > b.limit && b.used != r.n {
		return false
	}
	b.used += extra
	r.n = n
	return true
}

// release gives back everything the reservation holds; it may be called
// more than once.
func (r *reservation) release() {
	if r.b == nil || r.n == 0 {
		return
	}
	r.b.mu.Lock()
	r.b.used -= r.n
	r.b.mu.Unlock()
	r.n = 0
}

// inUse is the bytes reserved now.
func (b *byteBudget) inUse() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// overBudget is the answer to a write the budget has no room for: 503, which
// Prometheus retries with backoff, counted and not logged one by one, as the
// concurrency limit's.
func (h *writeHandler) overBudget(cost int64) writeResult {
	h.m.limitRejections.WithLabelValues("write_bytes").Inc()
	return writeResult{
		status: http.StatusServiceUnavailable,
		msg: fmt.Sprintf("write requests in flight would exceed the %d bytes budget (this one is estimated at %d bytes); retry later or raise --web.max-write-bytes-in-flight",
			h.budget.limit, cost),
		quiet: true,
	}
}
