package cql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
)

// overloaded reports whether err is a symptom of a cluster that cannot keep
// up or cannot be reached right now, so that the same request may succeed
// later: a server-side timeout or overload, too few live replicas, a request
// the driver gave up waiting for, or no connection to send it on. The
// remote-write contract answers those 503, so Prometheus backs off and
// retries (docs/remote-protocols.md §2.4); anything else is a failure of its
// own (500).
func overloaded(err error) bool {
	if err == nil {
		return false
	}
	if isType[*gocql.RequestErrWriteTimeout](err) || isType[*gocql.RequestErrReadTimeout](err) ||
		isType[*gocql.RequestErrOverloaded](err) || isType[*gocql.RequestErrUnavailable](err) ||
		isType[*gocql.RequestErrBootstrapping](err) {
		return true
	}
	if isType[gocql.RequestError](err) {
		return false // any other answer of the server
	}
	for _, e := range []error{
		context.DeadlineExceeded, errSaturated,
		gocql.ErrTimeoutNoResponse, gocql.ErrConnectionClosed, gocql.ErrNoStreams,
		gocql.ErrNoConnections, gocql.ErrUnavailable,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	// The driver fails the requests of a connection whose heartbeats went
	// unanswered with an error of no type of its own.
	return strings.Contains(err.Error(), "gocql: heartbeat failed")
}

// classify marks err as storeerr.ErrUnavailable when it is an overload
// symptom: a transient state the edges answer so that the sender retries.
func classify(err error) error {
	if overloaded(err) {
		return storeerr.Unavailable(err)
	}
	return err
}

func isType[T error](err error) bool {
	_, ok := errors.AsType[T](err)
	return ok
}

// errSaturated fails a request that found no free slot in the adaptiveLimit
// within the queue timeout.
var errSaturated = errors.New("cassandra: overloaded: no request slot freed within the queue timeout")

// adaptiveLimit bounds the requests the engine has in flight with a limit that
// adapts to Cassandra (additive increase, multiplicative decrease): a
// request that failed with an overload symptom, or took longer than slow,
// halves the limit; every limit requests that did neither raise it by one,
// up to max. Requests wait in FIFO order for a slot, at most queueTimeout;
// then they fail with errSaturated (503) instead of queueing into Cassandra's
// timeouts. With 128 requests in flight a single node facing new series
// timed out writes (BENCHMARKS.md, "New-series ingest at high cardinality").
type adaptiveLimit struct {
	max          int
	slow         time.Duration
	queueTimeout time.Duration

	mu    sync.Mutex
	limit float64
	inUse int
	queue []*waiter
	// cut is when the limit was last halved: a request that started
	// before it saw the old limit's load and does not halve it again.
	cut time.Time
	// saturated counts requests that found no slot in time.
	saturated int
}

// waiter is a request queued for a slot; granted is closed when it has one.
type waiter struct {
	granted chan struct{}
	done    bool
}

// minLimit is the floor of the adaptive limit.
const minLimit = 1

func newAdaptiveLimit(max int, slow, queueTimeout time.Duration) *adaptiveLimit {
	return &adaptiveLimit{max: max, slow: slow, queueTimeout: queueTimeout, limit: float64(max)}
}

// acquire takes a slot, waiting at most queueTimeout, and returns when the
// request started.
func (l *adaptiveLimit) acquire(ctx context.Context) (time.Time, error) {
	l.mu.Lock()
	if len(l.queue) == 0 && l.inUse < l.current() {
		l.inUse++
		l.mu.Unlock()
		return time.Now(), nil
	}
	w := &waiter{granted: make(chan struct{})}
	l.queue = append(l.queue, w)
	l.mu.Unlock()

	timer := time.NewTimer(l.queueTimeout)
	defer timer.Stop()
	var err error
	select {
	case <-w.granted:
		return time.Now(), nil
	case <-timer.C:
		err = fmt.Errorf("%w (%v)", errSaturated, l.queueTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.done {
		// Granted while timing out: use the slot after all.
		return time.Now(), nil
	}
	w.done = true
	if errors.Is(err, errSaturated) {
		l.saturated++
	}
	for i, q := range l.queue {
		if q == w {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			break
		}
	}
	return time.Time{}, err
}

// release frees the slot of a request that started at start and ended
// with err, adapts the limit, and hands free slots to waiters.
func (l *adaptiveLimit) release(start time.Time, err error) {
	now := time.Now()
	congested := overloaded(err) || (l.slow > 0 && now.Sub(start) > l.slow)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inUse--
	switch {
	case congested && start.After(l.cut):
		l.limit = max(minLimit, l.limit/2)
		l.cut = now
	case !congested && err == nil:
		l.limit = min(float64(l.max), l.limit+1/l.limit)
	}
	for len(l.queue) > 0 && l.inUse < l.current() {
		w := l.queue[0]
		l.queue = l.queue[1:]
		w.done = true
		l.inUse++
		close(w.granted)
	}
}

func (l *adaptiveLimit) current() int { return int(l.limit) }

// Limit is the current adaptive limit, for metrics and tests.
func (l *adaptiveLimit) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current()
}

// Collectors are the engine's metrics: the adaptive limit, the requests
// that found no slot within the queue timeout, and the reads by table.
func (e *Engine) Collectors() []prometheus.Collector {
	l := e.limit
	return []prometheus.Collector{
		e.reads,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "kairos_adapter", Name: "cassandra_in_flight_limit",
			Help: "The adaptive limit of Cassandra requests in flight (at most --cassandra.max-in-flight-requests).",
		}, func() float64 { return float64(l.Limit()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "kairos_adapter", Name: "cassandra_queue_timeouts_total",
			Help: "Cassandra requests that found no slot under the in-flight limit within --cassandra.queue-timeout (their remote request was answered 503).",
		}, func() float64 {
			l.mu.Lock()
			defer l.mu.Unlock()
			return float64(l.saturated)
		}),
	}
}
