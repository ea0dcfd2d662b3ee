package queryapi

import "context"

// gate bounds the queries evaluated at once (--query.max-concurrency). It is
// the engine's QueryTracker without Prometheus's file of active queries: a
// query waits for a slot until its context ends, as in Prometheus.
type gate chan struct{}

func newGate(n int) gate { return make(gate, n) }

func (g gate) GetMaxConcurrent() int { return cap(g) }

func (g gate) Insert(ctx context.Context, _ string) (int, error) {
	select {
	case g <- struct{}{}:
		return 0, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (g gate) Delete(int) { <-g }

func (g gate) Close() error { return nil }
