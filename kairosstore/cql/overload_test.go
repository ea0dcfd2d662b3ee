package cql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
)

// statusOf is how the adapter answers a store error (adapter's statusOf).
func statusOf(err error) int {
	if errors.Is(err, storeerr.ErrUnavailable) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// TestOverloadErrorsAre503 checks the driver's errors a write storm
// produced (issue #16: server write timeouts, client timeouts, a closed
// connection, no host left in the pool) are answered 503, and errors
// that are not about load still 500, through the wrapping Write does.
func TestOverloadErrorsAre503(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"server write timeout", &gocql.RequestErrWriteTimeout{}, 503},
		{"server read timeout", &gocql.RequestErrReadTimeout{}, 503},
		{"unavailable replicas", &gocql.RequestErrUnavailable{}, 503},
		{"overloaded", &gocql.RequestErrOverloaded{}, 503},
		{"client timeout", gocql.ErrTimeoutNoResponse, 503},
		{"no hosts in the pool", gocql.ErrNoConnections, 503},
		{"connection closed", gocql.ErrConnectionClosed, 503},
		{"heartbeat", errors.New("gocql: heartbeat failed"), 503},
		{"network", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, 503},
		{"queue timeout", errSaturated, 503},
		{"deadline", context.DeadlineExceeded, 503},
		{"invalid", &gocql.RequestErrInvalid{}, 500},
		{"syntax", &gocql.RequestErrSyntax{}, 500},
		{"write failure", &gocql.RequestErrWriteFailure{}, 500},
		{"other", errors.New("boom"), 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f failures
			f.add(10, 1, classify(tc.err))
			f.add(5, 1, nil)
			err := fmt.Errorf("store: %w", f.err("write", 100, 10))
			require.Equal(t, tc.want, statusOf(err), "%v", err)
			require.ErrorIs(t, err, tc.err)
		})
	}
}

// TestLimiterAdapts checks the AIMD limit: an overload error or a slow
// request halves it, once for the requests in flight at the time, and
// successes raise it by one per limit requests, up to the ceiling.
func TestLimiterAdapts(t *testing.T) {
	l := newAdaptiveLimit(16, time.Hour, time.Second)
	var starts []time.Time
	for range 4 {
		s, err := l.acquire(t.Context())
		require.NoError(t, err)
		starts = append(starts, s)
	}
	l.release(starts[0], &gocql.RequestErrWriteTimeout{})
	require.Equal(t, 8, l.Limit())
	// Requests that started before the cut saw the old load: no second cut.
	l.release(starts[1], &gocql.RequestErrWriteTimeout{})
	require.Equal(t, 8, l.Limit())
	s, err := l.acquire(t.Context())
	require.NoError(t, err)
	l.release(s, gocql.ErrTimeoutNoResponse)
	require.Equal(t, 4, l.Limit())
	// A failure that says nothing about load leaves the limit alone.
	l.release(starts[2], &gocql.RequestErrSyntax{})
	require.Equal(t, 4, l.Limit())
	l.release(starts[3], nil)
	for range 4 + 5 {
		s, err := l.acquire(t.Context())
		require.NoError(t, err)
		l.release(s, nil)
	}
	require.Equal(t, 6, l.Limit())

	slow := newAdaptiveLimit(16, time.Nanosecond, time.Second)
	s, err = slow.acquire(t.Context())
	require.NoError(t, err)
	time.Sleep(time.Millisecond)
	slow.release(s, nil)
	require.Equal(t, 8, slow.Limit(), "a slow request must halve the limit")
}

// TestLimiterQueueTimeout checks that a request finding no slot waits at
// most the queue timeout and then fails as saturated (503), and that a
// freed slot goes to the first waiter.
func TestLimiterQueueTimeout(t *testing.T) {
	l := newAdaptiveLimit(1, 0, 50*time.Millisecond)
	s, err := l.acquire(t.Context())
	require.NoError(t, err)
	_, err = l.acquire(t.Context())
	require.ErrorIs(t, err, errSaturated)
	require.Equal(t, 1, l.saturated)
	require.Equal(t, http.StatusServiceUnavailable, statusOf(classify(err)))

	got := make(chan error, 1)
	l2 := newAdaptiveLimit(1, 0, time.Minute)
	s2, err := l2.acquire(t.Context())
	require.NoError(t, err)
	go func() {
		_, err := l2.acquire(t.Context())
		got <- err
	}()
	require.Eventually(t, func() bool {
		l2.mu.Lock()
		defer l2.mu.Unlock()
		return len(l2.queue) == 1
	}, 5*time.Second, time.Millisecond)
	l2.release(s2, nil)
	require.NoError(t, <-got)
	l.release(s, nil)
}

// TestSlowRequestZeroIsOff: 0 means what --cassandra.slow-request=0 says,
// latency never halves the limit, and not a default of the package's.
func TestSlowRequestZeroIsOff(t *testing.T) {
	for _, slow := range []time.Duration{0, -1} {
		s, err := Config{Hosts: []string{"h"}, SlowRequest: slow}.settings()
		require.NoError(t, err)
		l := newAdaptiveLimit(8, s.slow, time.Second)
		_, err = l.acquire(context.Background())
		require.NoError(t, err)
		l.release(time.Now().Add(-time.Hour), nil) // an hour-long request
		require.Equal(t, 8, l.Limit(), "SlowRequest %v: an hour-long request halved the limit", slow)
	}
}
