// Package heappeak measures what a piece of code costs on the heap, for the
// tests that bound a request's memory.
package heappeak

import "runtime"

// Measure runs fn after a collection and returns how far the heap rose above
// where it was before, sampled continuously while fn runs, and the bytes
// allocated meanwhile. The rise counts garbage the collector has not reached
// yet; the allocations bound it whatever the collector's timing.
func Measure(fn func()) (rise int64, allocated uint64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var peak uint64
	done, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
			select {
			case <-done:
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	fn()
	close(done)
	<-sampled
	runtime.ReadMemStats(&after)
	return int64(peak) - int64(before.HeapAlloc), after.TotalAlloc - before.TotalAlloc
}
