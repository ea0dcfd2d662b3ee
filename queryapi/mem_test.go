package queryapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/heappeak"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// memStore is an embedded store of 100 series of perSeries samples at 15 s.
func memStore(t *testing.T, perSeries int) *kairosstore.Store {
	t.Helper()
	ctx := context.Background()
	// No purge during the test: its work would count as the query's.
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{PurgeInterval: time.Hour}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	require.NoError(t, eng.Setup(ctx))
	store, err := kairosstore.Open(ctx, eng, kairosstore.Options{}, nil, nil)
	require.NoError(t, err)
	for i := range 100 {
		app := store.NewAppender()
		ls := labels.FromStrings("__name__", "mem_total", "i", fmt.Sprint(i))
		for k := range perSeries {
			_, err := app.Append(0, ls, int64(k)*15_000, float64(k))
			require.NoError(t, err)
		}
		require.NoError(t, app.Commit(ctx))
	}
	// Pebble flushes and compacts what was just written in the
	// background, allocating as it goes: measured, that work counted as
	// the query's and made this test fail 2 runs in 11.
	require.NoError(t, eng.Settle(ctx))
	return store
}

// peakHeapRise serves one request and returns its answer, how far the heap
// rose above where it was before (sampled while the request runs), and the
// bytes allocated meanwhile: the rise counts garbage the collector has not
// reached yet, the allocations bound it whatever the collector's timing.
func peakHeapRise(t *testing.T, h http.Handler, form url.Values) (answer, int64, uint64) {
	var got answer
	rise, alloc := heappeak.Measure(func() { got = get(t, h, http.MethodGet, "/api/v1/query", form) })
	return got, rise, alloc
}

// TestQueryMemoryBoundedBySamples: a query over --query.max-samples is
// refused before its memory follows the data it covers: the heap's rise
// stays within what the limit allows, for a store of 200,000 selected
// samples and one of 1,600,000 alike, and reading the larger one whole would
// take several times that. A higher limit allows more.
func TestQueryMemoryBoundedBySamples(t *testing.T) {
	// Per sample the limit allows, allocated: 16 bytes in the store's
	// read, twice that in the engine's growing copy, and what the embedded
	// engine allocates to read it (measured: 120 to 220 bytes in all, the
	// most under the race detector); constant: the read-ahead window (16
	// series, each with its own Pebble iterator over sstables), the engine,
	// and the answer: measured 0.4 to 3.9 MB under the race detector, once
	// Pebble had settled the store into sstables as a store in use has it.
	const perSample, constant = 256, 6 << 20
	require.Greater(t, 100*16000*16, 3*(5_000*perSample+constant), "the larger store's samples must take several times the bound")
	stores := map[int]*kairosstore.Store{2000: memStore(t, 2000), 16000: memStore(t, 16000)}
	for _, c := range []struct{ perSeries, limit int }{{2000, 5_000}, {16000, 5_000}, {16000, 50_000}} {
		t.Run(fmt.Sprintf("%d samples, limit %d", 100*c.perSeries, c.limit), func(t *testing.T) {
			store := stores[c.perSeries]
			bound := int64(c.limit*perSample + constant)
			h := mount(New(store, withBudget(Options{MaxSamples: c.limit}), nil, prometheus.NewRegistry()), http.NotFoundHandler())
			end := int64(c.perSeries-1) * 15
			form := url.Values{"query": {fmt.Sprintf("mem_total[%ds]", end+1)}, "time": {fmt.Sprint(end)}}
			got, rise, alloc := peakHeapRise(t, h, form)
			t.Logf("heap rose %d bytes, %d allocated (bound %d)", rise, alloc, bound)
			require.Equal(t, http.StatusUnprocessableEntity, got.code, got.body)
			require.LessOrEqual(t, alloc, uint64(bound))
			require.LessOrEqual(t, rise, bound)
		})
	}
}
