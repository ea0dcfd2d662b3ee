package kairosstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	ks "github.com/kairos-remote/kairos-adapter/kairosstore"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// inFlightEngine records how many data_points slices are read at once.
type inFlightEngine struct {
	engine.Engine
	mu      sync.Mutex
	calls   int
	cur     int
	maxLate int // the most in flight when a slice after the first burst starts
	burst   int
}

func (e *inFlightEngine) Cells(ctx context.Context, key []byte, lo, hi uint32, fn func(uint32, []byte) error) error {
	e.mu.Lock()
	e.calls++
	e.cur++
	if e.calls > e.burst {
		e.maxLate = max(e.maxLate, e.cur)
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.cur--
		e.mu.Unlock()
	}()
	time.Sleep(2 * time.Millisecond) // a slow node, so that reads overlap
	return e.Engine.Cells(ctx, key, lo, hi, fn)
}

// TestReadAheadShrinksForLongSeries checks that once series are known to be
// long, the series set reads fewer of them ahead: readAheadSamples/length,
// plus the one the consumer waits for.
func TestReadAheadShrinksForLongSeries(t *testing.T) {
	const nSeries, perSeries, concurrency = 40, 50, 16
	// The first Next launches one more before any length is known.
	eng := &inFlightEngine{Engine: openPebble(t), burst: concurrency + 1}
	s := openStore(t, eng, ks.Options{ReadConcurrency: concurrency, ReadAheadSamples: 2 * perSeries}) // a window of two series
	data := map[string][]sample{}
	for i := range nSeries {
		ls := lbl("__name__", "long", "i", fmt.Sprintf("%02d", i))
		for k := range int64(perSeries) {
			data[ls] = append(data[ls], sample{k * 1000, bits(float64(i*perSeries) + float64(k))})
		}
	}
	write(t, s, data)

	got := read(t, s, 0, hour-1, eq("__name__", "long"))
	require.Equal(t, sortByLabels(t, expect(data, 0, hour-1, nil)), got)
	require.Equal(t, nSeries, eng.calls)
	require.LessOrEqual(t, eng.maxLate, 3)
}
