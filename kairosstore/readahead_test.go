package kairosstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	ks "github.com/kairos-remote/kairos-adapter/kairosstore"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/enginetest"
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

// stuckEngine holds every data_points read but those of the row keys
// containing pass until its context ends: a node that stopped answering
// while a query was being abandoned.
type stuckEngine struct {
	engine.Engine
	pass  []byte
	mu    sync.Mutex
	calls int
	cur   int
}

func (e *stuckEngine) Cells(ctx context.Context, key []byte, lo, hi uint32, fn func(uint32, []byte) error) error {
	e.mu.Lock()
	e.calls++
	e.cur++
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.cur--
		e.mu.Unlock()
	}()
	if !bytes.Contains(key, e.pass) {
		<-ctx.Done()
		return ctx.Err()
	}
	return e.Engine.Cells(ctx, key, lo, hi, fn)
}

// TestCloseEndsReadsAhead: a consumer that stops after one series (a
// refused or timed-out query) leaves reads ahead of it; Close must end them
// and return only once none runs, since the engine may be closed next
// (Pebble then reports a leaked reservation). The first part fails where
// Close did not wait, the second where it waited without cancelling.
func TestCloseEndsReadsAhead(t *testing.T) {
	eng := &stuckEngine{Engine: openPebble(t), pass: []byte("i=0:")}
	s := openStore(t, eng, ks.Options{ReadConcurrency: 4})
	data := map[string][]sample{}
	for i := range 10 {
		data[lbl("__name__", "stuck", "i", fmt.Sprint(i))] = []sample{{1000, bits(float64(i))}}
	}
	write(t, s, data)

	q, err := s.Querier(0, hour-1)
	require.NoError(t, err)
	set := q.Select(context.Background(), true, nil, eq("__name__", "stuck"))
	require.True(t, set.Next())
	it := set.At().Iterator(nil)
	require.NotEqual(t, chunkenc.ValNone, it.Next())
	require.NoError(t, it.Err())

	closed := make(chan struct{})
	go func() {
		_ = q.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while reads ahead were stuck")
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	require.Greater(t, eng.calls, 1, "reads ahead were launched")
	require.Zero(t, eng.cur, "reads still running after Close")
}

// TestReadAheadStopsAtTheSampleLimit: once a query has loaded its limit,
// no further series is read ahead of the consumer. Reads ahead launched
// past the limit only cost memory inside a request being refused
// (TestQueryMemoryBoundedBySamples in queryapi saw them exceed its bound).
func TestReadAheadStopsAtTheSampleLimit(t *testing.T) {
	const nSeries, perSeries, limit = 60, 100, 2000
	eng := &inFlightEngine{Engine: openPebble(t)}
	s := openStore(t, eng, ks.Options{ReadConcurrency: 8})
	data := map[string][]sample{}
	for i := range nSeries {
		ls := lbl("__name__", "limited", "i", fmt.Sprintf("%02d", i))
		for k := range int64(perSeries) {
			data[ls] = append(data[ls], sample{k * 1000, bits(float64(k))})
		}
	}
	write(t, s, data)

	q, err := s.Querier(0, hour-1)
	require.NoError(t, err)
	set := q.Select(ks.WithSampleLimit(context.Background(), limit), true, nil, eq("__name__", "limited"))
	var it chunkenc.Iterator
	var read int
	for set.Next() {
		it = set.At().Iterator(it)
		for it.Next() != chunkenc.ValNone {
			read++
		}
		if it.Err() != nil {
			require.ErrorIs(t, it.Err(), ks.ErrTooManySamples)
			break
		}
	}
	require.NoError(t, q.Close())
	require.Less(t, read, nSeries*perSeries)
	// Reads ahead stop where the limit does: the 20 series it allows and
	// the one that goes over it (21 measured; reading on regardless started
	// 27-28, the consumer's position plus the window of 8).
	eng.mu.Lock()
	defer eng.mu.Unlock()
	require.LessOrEqual(t, eng.calls, limit/perSeries+3, "data_points reads started")
}

// indexEngine makes phase 1 of a read wait until want RowTimes reads are in
// flight at once (or give up after a while), and, once failing is set,
// fails the row_keys reads of that metric with errNodeLost and slows the
// others down.
type indexEngine struct {
	engine.Engine
	want    int
	failing string
	mu      sync.Mutex
	cur     int
	most    int
	all     chan struct{}
	once    sync.Once
}

var errNodeLost = errors.New("node lost")

func (e *indexEngine) RowTimes(ctx context.Context, metric string, lo, hi int64, fn func(int64) error) error {
	e.mu.Lock()
	e.cur++
	e.most = max(e.most, e.cur)
	if e.cur == e.want {
		e.once.Do(func() { close(e.all) })
	}
	e.mu.Unlock()
	select {
	case <-e.all:
	case <-time.After(2 * time.Second):
	}
	e.mu.Lock()
	e.cur--
	e.mu.Unlock()
	return e.Engine.RowTimes(ctx, metric, lo, hi, fn)
}

func (e *indexEngine) RowKeys(ctx context.Context, metric string, rt int64, fn func(string, []codec.Tag) error) error {
	e.mu.Lock()
	failing := e.failing
	e.mu.Unlock()
	if metric == failing {
		return errNodeLost
	}
	if failing != "" {
		// Slow, so that the failure comes while these are in flight.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return e.Engine.RowKeys(ctx, metric, rt, fn)
}

// TestIndexPhasesOfMetricsConcurrent: the index reads of a selector over
// many metric names overlap (they ran one name after another), and when
// one fails, its error is what the read reports, not the cancellation of
// the others.
func TestIndexPhasesOfMetricsConcurrent(t *testing.T) {
	const metrics, concurrency = 12, 4
	eng := &indexEngine{Engine: openPebble(t), want: concurrency, all: make(chan struct{})}
	s := openStore(t, eng, ks.Options{ReadConcurrency: concurrency})
	data := map[string][]sample{}
	for i := range metrics {
		data[lbl("__name__", fmt.Sprintf("m%02d", i))] = []sample{{1000, bits(float64(i))}}
	}
	write(t, s, data)
	all := labels.MustNewMatcher(labels.MatchRegexp, "__name__", "m.*")

	got := read(t, s, 0, hour-1, all)
	require.Len(t, got, metrics)
	require.Equal(t, concurrency, eng.most, "RowTimes reads in flight at once")

	eng.mu.Lock()
	eng.failing = "m05"
	eng.mu.Unlock()
	q, err := s.Querier(0, hour-1)
	require.NoError(t, err)
	defer q.Close()
	set := q.Select(context.Background(), true, nil, all)
	require.False(t, set.Next())
	require.ErrorIs(t, set.Err(), errNodeLost)
}

// TestReadPanicFailsTheQuery: a read that panics on its goroutine (reads
// ahead run on their own) fails its series with an error naming the panic,
// in both the sample and the chunk path; the other series read as usual.
// Before the recover, the panic ended the test binary.
func TestReadPanicFailsTheQuery(t *testing.T) {
	s := openStore(t, &enginetest.PanicCells{Engine: openPebble(t), Bad: []byte("i=1:")}, ks.Options{ReadConcurrency: 4})
	data := map[string][]sample{}
	for i := range 3 {
		data[lbl("__name__", "panics", "i", fmt.Sprint(i))] = []sample{{1000, bits(float64(i))}}
	}
	write(t, s, data)

	q, err := s.Querier(0, hour-1)
	require.NoError(t, err)
	set := q.Select(t.Context(), true, nil, eq("__name__", "panics"))
	var errs []string
	for set.Next() {
		it := set.At().Iterator(nil)
		for it.Next() != chunkenc.ValNone {
		}
		if it.Err() != nil {
			errs = append(errs, set.At().Labels().Get("i")+": "+it.Err().Error())
		}
	}
	require.NoError(t, q.Close())
	require.Equal(t, []string{`1: read of {__name__="panics", i="1"} panicked: no codec expected this`}, errs)

	cq, err := s.ChunkQuerier(0, hour-1)
	require.NoError(t, err)
	cset := cq.Select(t.Context(), true, nil, eq("__name__", "panics"))
	errs = errs[:0]
	for cset.Next() {
		it := cset.At().Iterator(nil)
		for it.Next() {
		}
		if it.Err() != nil {
			errs = append(errs, cset.At().Labels().Get("i")+": "+it.Err().Error())
		}
	}
	require.NoError(t, cq.Close())
	require.Equal(t, []string{`1: read of {__name__="panics", i="1"} panicked: no codec expected this`}, errs)
}

// firstAloneEngine records whether another data_points read started while
// the first one ran.
type firstAloneEngine struct {
	engine.Engine
	mu          sync.Mutex
	calls       int
	firstDone   bool
	overlapped  bool
	maxInFlight int
	cur         int
}

func (e *firstAloneEngine) Cells(ctx context.Context, key []byte, lo, hi uint32, fn func(uint32, []byte) error) error {
	e.mu.Lock()
	e.calls++
	first := e.calls == 1
	e.overlapped = e.overlapped || (!first && !e.firstDone)
	e.cur++
	e.maxInFlight = max(e.maxInFlight, e.cur)
	e.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // so that reads launched together overlap
	err := e.Engine.Cells(ctx, key, lo, hi, fn)
	e.mu.Lock()
	e.cur--
	e.firstDone = e.firstDone || first
	e.mu.Unlock()
	return err
}

// TestReadAheadAfterTheFirstLength: reads ahead wait until a first series
// has told how many samples the series of the query hold, so that they size
// their slices instead of growing them from nothing; then they run side by
// side.
func TestReadAheadAfterTheFirstLength(t *testing.T) {
	eng := &firstAloneEngine{Engine: openPebble(t)}
	s := openStore(t, eng, ks.Options{ReadConcurrency: 8})
	data := map[string][]sample{}
	for i := range 20 {
		ls := lbl("__name__", "sized", "i", fmt.Sprintf("%02d", i))
		for k := range int64(100) {
			data[ls] = append(data[ls], sample{k * 1000, bits(float64(k))})
		}
	}
	write(t, s, data)
	require.Equal(t, sortByLabels(t, expect(data, 0, hour-1, nil)), read(t, s, 0, hour-1, eq("__name__", "sized")))
	eng.mu.Lock()
	defer eng.mu.Unlock()
	require.Equal(t, 20, eng.calls)
	require.False(t, eng.overlapped, "a read ahead started before the first read had a length")
	require.Greater(t, eng.maxInFlight, 1, "reads ahead ran side by side after it")
}

// earlyPhasesEngine counts the phase 0 and phase 1 reads in flight (the
// row_key_index read, and the row_key_time_index reads of a metric and of
// its non-finite side index); each waits until want of them are in flight,
// or for a second.
type earlyPhasesEngine struct {
	engine.Engine
	want    int
	mu      sync.Mutex
	cur     int
	most    int
	metrics []string
	all     chan struct{}
	once    sync.Once
}

func (e *earlyPhasesEngine) wait(name string) {
	e.mu.Lock()
	e.cur++
	e.most = max(e.most, e.cur)
	e.metrics = append(e.metrics, name)
	if e.cur == e.want {
		e.once.Do(func() { close(e.all) })
	}
	e.mu.Unlock()
	select {
	case <-e.all:
	case <-time.After(time.Second):
	}
	e.mu.Lock()
	e.cur--
	e.mu.Unlock()
}

func (e *earlyPhasesEngine) RowTimes(ctx context.Context, metric string, lo, hi int64, fn func(int64) error) error {
	e.wait("row_key_time_index " + metric)
	return e.Engine.RowTimes(ctx, metric, lo, hi, fn)
}

func (e *earlyPhasesEngine) LegacyRowKeys(ctx context.Context, metric string, lo, hi []byte, fn func([]byte) error) error {
	e.wait("row_key_index " + metric)
	return e.Engine.LegacyRowKeys(ctx, metric, lo, hi, fn)
}

// TestIndexEarlyPhasesOverlap: a Select's row_key_index read and the
// row_key_time_index reads of the metric and of its non-finite side index
// are in flight at once (they ran one after another, three round trips
// before the first row_keys read), and the series they lead to, with a
// non-finite sample's null row, read as before.
func TestIndexEarlyPhasesOverlap(t *testing.T) {
	eng := &earlyPhasesEngine{Engine: openPebble(t), want: 3, all: make(chan struct{})}
	s := openStore(t, eng, ks.Options{ReadConcurrency: 4})
	write(t, s, map[string][]sample{
		lbl("__name__", "early", "i", "0"): {{1000, bits(1)}, {2000, bits(math.Inf(1))}},
		lbl("__name__", "early", "i", "1"): {{1000, bits(2)}},
	})
	eng.mu.Lock()
	eng.cur, eng.most, eng.metrics = 0, 0, nil
	eng.mu.Unlock()

	got := read(t, s, 0, hour-1, eq("__name__", "early"))
	require.Equal(t, []series{
		{lbl("__name__", "early", "i", "0"), []sample{{1000, bits(1)}, {2000, bits(math.Inf(1))}}},
		{lbl("__name__", "early", "i", "1"), []sample{{1000, bits(2)}}},
	}, got)
	require.ElementsMatch(t, []string{"row_key_index early", "row_key_time_index early", "row_key_time_index early" + ks.NonFiniteSuffix}, eng.metrics)
	require.Equal(t, 3, eng.most, "phase 0 and 1 reads in flight at once")
}
