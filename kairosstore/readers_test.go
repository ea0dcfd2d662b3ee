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
// no read came for readerIdle. Readers are counted from the goroutines'
// stacks, not runtime.NumGoroutine, which other tests' goroutines move.
func TestReadersReuseAndEnd(t *testing.T) {
	var rs readers
	require := func(ok bool, format string, args ...any) {
		t.Helper()
		if !ok {
			t.Fatalf(format, args...)
		}
	}
	// waitIdle waits until every reader is back waiting for a read: a
	// read handed over before that starts a reader of its own, as it
	// should, and the reuse could not be seen.
	waitIdle := func() {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if all, idle := readerGoroutines(); all == idle {
				return
			}
		}
		t.Fatal("a reader never went back to waiting")
	}
	ids := map[string]bool{}
	for range 50 {
		done := make(chan struct{})
		rs.run(func() { ids[goroutineID()] = true; close(done) })
		<-done
		waitIdle()
	}
	require(len(ids) == 1, "50 reads in a row ran on %d goroutines: readers were not reused", len(ids))
	all, _ := readerGoroutines()
	require(all == 1, "%d readers after 50 reads in a row", all)
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 8 {
		wg.Add(1)
		rs.run(func() { defer wg.Done(); <-release })
	}
	all, _ = readerGoroutines()
	require(all == 8, "%d readers with 8 reads blocked", all)
	close(release)
	wg.Wait()
	deadline := time.Now().Add(readerIdle + 5*time.Second)
	for all > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		all, _ = readerGoroutines()
	}
	require(all == 0, "%d readers %v after the last read", all, readerIdle)
}

// readerGoroutines counts the goroutines of readers.reader, started or
// not, and of them those waiting in its select for the next read.
func readerGoroutines() (all, idle int) {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		// A reader not yet started shows only the go statement's wrapper.
		if !strings.Contains(g, "(*readers).reader(") && !strings.Contains(g, "(*readers).run.gowrap") {
			continue
		}
		all++
		if header, _, _ := strings.Cut(g, "\n"); strings.Contains(header, "[select") {
			idle++
		}
	}
	return all, idle
}

// goroutineID is the number of the calling goroutine, from its stack's
// first line ("goroutine N [running]:").
func goroutineID() string {
	var b [64]byte
	f := strings.Fields(string(b[:runtime.Stack(b[:], false)]))
	return f[1]
}
