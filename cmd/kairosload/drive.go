package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// outcome is what sending one request came to.
type outcome struct {
	ok      bool
	kind    string // HTTP status code, or an error class; counted per kind
	samples int    // samples confirmed stored (ok only)
}

// driveResult sums up a run.
type driveResult struct {
	requests int
	samples  int64
	elapsed  time.Duration
	lat      latencyHist
	kinds    map[string]int
	early    bool // the pre-built requests ran out before --duration
}

// drive sends requests 0..n-1 from conc workers, each sending one at a time,
// until they are all sent or d has passed. A request in flight at the
// deadline still completes, so every answer is counted.
func drive(ctx context.Context, n, conc int, d time.Duration, send func(ctx context.Context, i int) outcome) driveResult {
	var (
		next     atomic.Int64
		mu       sync.Mutex
		res      = driveResult{kinds: map[string]int{}}
		wg       sync.WaitGroup
		deadline = time.Now().Add(d)
	)
	start := time.Now()
	for range conc {
		wg.Go(func() {
			var lat latencyHist
			kinds := map[string]int{}
			var samples int64
			reqs := 0
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := int(next.Add(1) - 1)
				if i >= n {
					break
				}
				t0 := time.Now()
				o := send(ctx, i)
				lat.observe(time.Since(t0))
				kinds[o.kind]++
				reqs++
				if o.ok {
					samples += int64(o.samples)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.lat.merge(&lat)
			for k, v := range kinds {
				res.kinds[k] += v
			}
			res.samples += samples
			res.requests += reqs
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.early = int(next.Load()) >= n && res.elapsed < d
	return res
}

// kinds formats outcome counts as code:count,code:count.
func (r driveResult) kindList() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.kinds)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, r.kinds[k]))
	}
	return strings.Join(parts, ",")
}

func (r driveResult) report(mode string, prebuiltOnly bool, logger *slog.Logger, extra ...any) {
	if r.early && prebuiltOnly {
		logger.Warn("All pre-built requests were sent before --duration ended; raise --prebuilt or --requests for a longer run", "requests", r.requests)
	}
	kv := []any{
		"requests", r.requests,
		"samples", r.samples,
		"elapsed_s", fmt.Sprintf("%.1f", r.elapsed.Seconds()),
		"samples_per_s", fmt.Sprintf("%.0f", float64(r.samples)/r.elapsed.Seconds()),
		"p50_ms", fmt.Sprintf("%.1f", ms(r.lat.quantile(0.5))),
		"p99_ms", fmt.Sprintf("%.1f", ms(r.lat.quantile(0.99))),
		"max_ms", fmt.Sprintf("%.1f", ms(r.lat.max)),
		"outcomes", r.kindList(),
	}
	printResult(mode, append(kv, extra...)...)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
