package cql

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// boundBlob is a bind value already in its wire form (a blob, or a
// big-endian int or bigint), which the driver takes through a pointer: an
// interface holding a pointer needs no allocation, one holding a []byte or
// an int64 does.
type boundBlob []byte

func (b *boundBlob) MarshalCQL(gocql.TypeInfo) ([]byte, error) { return blob(*b), nil }

// maxJoinedErrors is how many distinct statement errors a failed Write or
// Delete reports in full; the rest are only counted.
const maxJoinedErrors = 3

// call is what the requests of one Write or Delete share.
type call struct {
	cons gocql.Consistency
	ts   int64
	// cells are the batch's cells that requests name by index, writeTime
	// the encoded ts their inserts bind.
	cells     []engine.Cell
	writeTime *boundBlob
}

// job is one request on its way to a worker of the engine's pool, holding
// a slot of limit since start.
type job struct {
	ctx   context.Context
	s     *gocql.Session
	req   request
	call  *call
	fail  *failures
	wg    *sync.WaitGroup
	limit *adaptiveLimit
	start time.Time
}

// pool is the engine's fixed set of workers, one per request the process may
// have in flight (Config.MaxInFlight), shared by every Write and Delete: the
// limit holds for the process, not per remote-write request (with one pool per
// Write, 32 concurrent writes x 64 had 2,048 requests in flight). Fixed
// workers, not a goroutine per request: the driver's snappy compression needs
// a 32 KiB stack table, so every fresh goroutine grew its stack once per
// statement (BENCHMARKS.md, "Load tool figures"); a worker grows its stack,
// and its bind buffers, once for its life.
type pool struct {
	work    chan job
	stop    chan struct{}
	stopped sync.Once
	done    sync.WaitGroup
}

func newPool(n int, log *slog.Logger) *pool {
	p := &pool{work: make(chan job), stop: make(chan struct{})}
	// A panic (in the driver, say) fails its statement as an error does,
	// so that the request answers 5xx, not the process ends with every
	// write in flight.
	run := func(j job, bind *binder) (err error) {
		defer recovered.Into(&err, log, "a Cassandra write")
		return exec(j.ctx, j.s, j.req, j.call, bind)
	}
	for range n {
		p.done.Go(func() {
			var bind binder
			for {
				select {
				case j := <-p.work:
					err := run(j, &bind)
					j.limit.release(j.start, err)
					if err != nil {
						j.fail.add(j.req.len(), 1, classify(err))
					}
					j.wg.Done()
				case <-p.stop:
					return
				}
			}
		})
	}
	return p
}

// close stops the workers once the requests they hold are done.
func (p *pool) close() {
	p.stopped.Do(func() { close(p.stop) })
	p.done.Wait()
}

// errNotSent releases the slot of a request that was never sent, which
// says nothing about Cassandra's load.
var errNotSent = errors.New("cassandra: request not sent")

// errClosed fails requests sent after Close, as the closed session would.
var errClosed = fmt.Errorf("cassandra: engine closed: %w", gocql.ErrSessionClosed)

// run sends reqs through the engine's pool, every request with write
// timestamp c.ts in milliseconds (§5.4, §12 item 1). It waits for every
// request it started, so no bound value is used after it returns, and fails
// if any statement failed.
func (e *Engine) run(ctx context.Context, s *gocql.Session, reqs []request, c call, op string) error {
	if len(reqs) == 0 {
		return nil
	}
	var (
		wg   sync.WaitGroup
		fail failures
	)
	stmts := 0
	for _, r := range reqs {
		stmts += r.len()
	}
	for i, req := range reqs {
		// Once a request failed the call fails whatever the rest does:
		// sending it would only add load to a cluster that may be
		// overloaded. The retry resends all of it (§2.4: idempotent).
		if fail.failed() {
			fail.add(unsent(reqs[i:]), len(reqs)-i, nil)
			break
		}
		start, err := e.limit.acquire(ctx)
		if err == nil {
			wg.Add(1)
			select {
			case e.pool.work <- job{ctx: ctx, s: s, req: req, call: &c, fail: &fail, wg: &wg, limit: e.limit, start: start}:
				continue
			case <-ctx.Done():
				err = ctx.Err()
			case <-e.pool.stop:
				err = errClosed
			}
			wg.Done()
			e.limit.release(start, errNotSent)
		}
		// Count what was never sent, so the caller answers 5xx.
		fail.add(unsent(reqs[i:]), len(reqs)-i, classify(err))
		break
	}
	wg.Wait()
	return fail.err(op, stmts, len(reqs))
}

// unsent is the number of statements of reqs.
func unsent(reqs []request) int {
	n := 0
	for _, r := range reqs {
		n += r.len()
	}
	return n
}

// binder holds a worker's bind values of data_points inserts, reused from
// request to request: the column names (§3.2) and TTLs in wire form, bound by
// pointer (boundBlob), so that binding a cell allocates nothing
// (BENCHMARKS.md, BenchmarkWriteSteady).
type binder struct {
	wire    []byte // 4-byte column name, then 4-byte TTL, per cell
	blobs   []boundBlob
	args    []any
	entries []gocql.BatchEntry
}

// bind returns the bind values of the cells idx of c.cells, five per cell,
// valid until the next bind.
func (w *binder) bind(c *call, idx []int32) []any {
	n := len(idx)
	w.wire = slices.Grow(w.wire[:0], 8*n)[:8*n]
	w.blobs = slices.Grow(w.blobs[:0], 2*n)[:2*n]
	w.args = slices.Grow(w.args[:0], 5*n)[:5*n]
	for k, i := range idx {
		cell := &c.cells[i]
		col, ttl := w.wire[8*k:8*k+4:8*k+4], w.wire[8*k+4:8*k+8:8*k+8]
		binary.BigEndian.PutUint32(col, cell.Column)
		binary.BigEndian.PutUint32(ttl, uint32(cell.TTL))
		w.blobs[2*k], w.blobs[2*k+1] = col, ttl
		a := w.args[5*k : 5*k+5 : 5*k+5]
		a[0], a[1], a[2], a[3], a[4] = (*boundBlob)(&cell.Key), &w.blobs[2*k], (*boundBlob)(&cell.Value), &w.blobs[2*k+1], c.writeTime
	}
	return w.args
}

// exec sends one request: a single statement, or an UNLOGGED batch.
func exec(ctx context.Context, s *gocql.Session, req request, c *call, w *binder) error {
	if req.len() == 1 {
		var q *gocql.Query
		if len(req.stmts) == 1 {
			q = s.Query(req.stmts[0].cql, req.stmts[0].args...)
		} else {
			q = s.Query(insertDataPoint, w.bind(c, req.cells)...)
		}
		return q.Consistency(c.cons).WithTimestamp(c.ts).Idempotent(true).ExecContext(ctx)
	}
	b := s.Batch(gocql.UnloggedBatch).Consistency(c.cons).WithTimestamp(c.ts)
	w.entries = slices.Grow(w.entries[:0], req.len())
	if len(req.cells) > 0 {
		args := w.bind(c, req.cells)
		for k := range req.cells {
			w.entries = append(w.entries, gocql.BatchEntry{Stmt: insertDataPoint, Args: args[5*k : 5*k+5 : 5*k+5], Idempotent: true})
		}
	}
	for _, st := range req.stmts {
		w.entries = append(w.entries, gocql.BatchEntry{Stmt: st.cql, Args: st.args, Idempotent: true})
	}
	b.Entries = w.entries
	err := b.ExecContext(ctx)
	clear(w.entries) // keep no bind values of a finished Write alive
	return err
}

// failures collects the outcome of concurrent requests.
type failures struct {
	mu       sync.Mutex
	stmts    int
	requests int
	first    []error
}

func (f *failures) add(stmts, requests int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stmts += stmts
	f.requests += requests
	if err != nil && len(f.first) < maxJoinedErrors {
		f.first = append(f.first, err)
	}
}

// failed reports whether a request failed already.
func (f *failures) failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stmts > 0
}

func (f *failures) err(op string, stmts, requests int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stmts == 0 {
		return nil
	}
	return fmt.Errorf("cassandra: %s: %d of %d statements failed (%d of %d requests): %w",
		op, f.stmts, stmts, f.requests, requests, errors.Join(f.first...))
}
