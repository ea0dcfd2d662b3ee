package kairosstore

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestReadersReuseAndEnd: reads one after another run on one reader
// goroutine, reads at once each on their own, and every reader ends once
// no read came for readerIdle.
func TestReadersReuseAndEnd(t *testing.T) {
	var rs readers
	base := runtime.NumGoroutine()
	ids := map[string]bool{}
	for range 50 {
		done := make(chan struct{})
		rs.run(func() { ids[goroutineID()] = true; close(done) })
		<-done
		// The reader is back waiting before the next read only after
		// it returned from f; give it the moment.
		for i := 0; i < 100 && runtime.NumGoroutine() > base+1; i++ {
			time.Sleep(time.Millisecond)
		}
	}
	if len(ids) > 2 {
		t.Fatalf("50 reads in a row ran on %d goroutines: readers were not reused", len(ids))
	}
	if n := runtime.NumGoroutine(); n > base+1 {
		t.Fatalf("%d goroutines after 50 reads in a row, %d before", n, base)
	}
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 8 {
		wg.Add(1)
		rs.run(func() { defer wg.Done(); <-release })
	}
	if n := runtime.NumGoroutine(); n < base+8 {
		t.Fatalf("%d goroutines with 8 reads blocked, %d before", n, base)
	}
	close(release)
	wg.Wait()
	deadline := time.Now().Add(readerIdle + 5*time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Fatalf("%d goroutines %v after the last read, %d before", n, readerIdle, base)
	}
}

// goroutineID is the number of the calling goroutine, from its stack's
// first line ("goroutine N [running]:").
func goroutineID() string {
	var b [64]byte
	f := strings.Fields(string(b[:runtime.Stack(b[:], false)]))
	return f[1]
}
