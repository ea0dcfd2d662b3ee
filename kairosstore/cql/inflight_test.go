package cql_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
)

// spans records when each batch the driver sent was in flight.
type spans struct {
	mu    sync.Mutex
	start []time.Time
	end   []time.Time
}

func (s *spans) ObserveBatch(_ context.Context, b gocql.ObservedBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start = append(s.start, b.Start)
	s.end = append(s.end, b.End)
}

// maxOverlap is the most batches in flight at one instant.
func (s *spans) maxOverlap() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	type ev struct {
		at time.Time
		d  int
	}
	var evs []ev
	for i := range s.start {
		evs = append(evs, ev{s.start[i], 1}, ev{s.end[i], -1})
	}
	// Ends before starts at the same instant: touching is not overlapping.
	slices.SortFunc(evs, func(a, b ev) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d
	})
	n, top := 0, 0
	for _, e := range evs {
		n += e.d
		top = max(top, n)
	}
	return top
}

// TestMaxInFlightIsPerProcess sends concurrent Writes through one engine and
// checks that the driver never had more than MaxInFlight of their batches
// in flight together: the limit holds for the process, not per Write.
func TestMaxInFlightIsPerProcess(t *testing.T) {
	const limit, writes = 3, 6
	addr, ks := cassandratest.Keyspace(t)
	obs := &spans{}
	cfg := testConfig(addr, ks)
	cfg.MaxInFlight = limit
	e, err := cql.Open(t.Context(), cql.WithBatchObserver(cfg, obs), nil)
	require.NoError(t, err)
	defer e.Close()
	require.NoError(t, e.Setup(t.Context()))

	batch := workload(time.Now().UnixMilli(), 1000, 2)
	var wg sync.WaitGroup
	errs := make(chan error, writes)
	for range writes {
		wg.Go(func() { errs <- e.Write(t.Context(), batch) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	obs.mu.Lock()
	sent := len(obs.start)
	obs.mu.Unlock()
	// 2,000 cells in batches of 50, and the index rows, per Write.
	require.GreaterOrEqual(t, sent, writes*40)
	require.LessOrEqual(t, obs.maxOverlap(), limit)
}
