package cql

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// grouping is how Write and Delete turn statements into requests.
type grouping int

const (
	// groupSingles sends every statement on its own, MaxInFlight at a time
	// (the driver's advice for multi-partition work, gocql doc.go "Batches").
	groupSingles grouping = iota
	// groupPartitions sends one UNLOGGED batch per partition of at most
	// maxBatch statements. Single-partition batches go to a replica and skip
	// Cassandra's batch size limits.
	groupPartitions
	// groupReplicas packs the data_points inserts of many partitions into
	// UNLOGGED batches, one open batch per replica host, as KairosDB does
	// (docs/kairosdb-layout.md §5.6: the first host of the token-aware plan, one
	// batch per host). Prometheus sends one sample per series per request, so
	// groupPartitions sends those as single statements; these batches cut the
	// requests by up to maxReplicaBatch. Index rows are grouped as in
	// groupPartitions.
	groupReplicas
)

// defaultGrouping is the fastest strategy in BenchmarkWrite (one local
// C* 5.0.8 node on 2 shared, busy cores, BENCHMARKS.md): on Prometheus's shape,
// 2,000 series × 1 sample per Write, replica batches wrote 1.7–2.4x the
// samples/s of partition batches and 2.9–3.5x singles; on 1,000 series × 10
// samples, 1.25–1.6x partition batches.
const defaultGrouping = groupReplicas

// maxBatch caps the statements of one batch (about KairosDB's
// queue_processor.batch_size of 200 data points per CQLBatch, §5.6, halved to
// keep requests small).
const maxBatch = 100

// maxReplicaBatch and maxReplicaBytes cap a groupReplicas batch: Cassandra
// logs a warning for every batch over batch_size_warn_threshold (5 KiB), and
// the load tool measured 50 data_points statements at about 4 KiB, and 50
// per batch as the fastest direct-driver strategy (BENCHMARKS.md).
const (
	maxReplicaBatch = 50
	maxReplicaBytes = 4096
	// cellBytes is what one data_points insert adds to Cassandra's batch
	// size besides its column name and value (about 80 bytes in all for an
	// 8-byte value, per the figures above).
	cellBytes = 68
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

// stmt is one CQL statement with its bound values and the identity of the
// partition it touches (table and partition key), which groupPartitions uses.
// Data point inserts are not stmts: a request names them by their index in
// the batch's cells, and the worker that sends it binds them (binder), so a
// Write holds 4 bytes per cell instead of a statement, five bind values and
// a copy in its request (~280 bytes per sample, BENCHMARKS.md).
type stmt struct {
	cql  string
	args []any
	part string
}

// request is what one Cassandra request sends: data_points inserts of some
// cells, or other statements.
type request struct {
	cells []int32
	stmts []stmt
}

func (r request) len() int { return len(r.cells) + len(r.stmts) }

// Write stores the batch: data_points, row_keys, tag_indexed_row_keys,
// row_key_time_index and string_index rows (§5.3), all with the batch's
// millisecond write timestamp (§5.4) at the write consistency.
func (e *Engine) Write(ctx context.Context, b *engine.Batch) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	stmts := make([]stmt, 0, len(b.RowKeys)+len(b.TagIndexed)+len(b.RowTimes)+len(b.MetricNames)+len(b.LegacyRowKeys))
	for _, r := range b.RowKeys {
		stmts = append(stmts, stmt{
			cql:  insertRowKey,
			args: []any{r.Metric, dataPointsTable, r.RowTime, r.DataType, tagMap(r.Tags), r.TTL},
			part: rowPart("r", r.Metric, r.RowTime, ""),
		})
	}
	for _, r := range b.TagIndexed {
		stmts = append(stmts, stmt{
			cql:  insertTagIndexed,
			args: []any{r.Metric, dataPointsTable, r.RowTime, r.DataType, r.Pair, r.Hash, tagMap(r.Tags), r.TTL},
			part: rowPart("t", r.Metric, r.RowTime, r.Pair),
		})
	}
	for _, r := range b.RowTimes {
		stmts = append(stmts, stmt{
			cql:  insertRowTime,
			args: []any{r.Metric, dataPointsTable, r.RowTime, r.TTL},
			part: "i" + r.Metric,
		})
	}
	for _, name := range b.MetricNames {
		// No TTL: metric names live forever (§5.3, §12 item 7).
		stmts = append(stmts, stmt{
			cql:  insertStringIndex,
			args: []any{[]byte(metricNames), name},
			part: "s",
		})
	}
	for _, k := range b.LegacyRowKeys {
		stmts = append(stmts, stmt{
			cql:  insertLegacyKey,
			args: []any{[]byte(k.Metric), k.RowKey},
			part: "l" + k.Metric,
		})
	}
	var reqs []request
	switch e.grouping {
	case groupReplicas:
		replica := e.replicaFunc(s)
		for _, c := range byReplica(b.Cells, replica) {
			reqs = append(reqs, request{cells: c})
		}
	case groupPartitions:
		for _, c := range byPartition(cellIndexes(len(b.Cells)), func(i int32) string { return string(b.Cells[i].Key) }, maxBatch) {
			reqs = append(reqs, request{cells: c})
		}
	default:
		idx := cellIndexes(len(b.Cells))
		for i := range idx {
			reqs = append(reqs, request{cells: idx[i : i+1 : i+1]})
		}
	}
	reqs = append(reqs, e.group(stmts)...)
	// The write time goes to the bigint of "USING TIMESTAMP ?": 8 bytes
	// big-endian on the wire, encoded once per Write.
	writeTime := boundBlob(binary.BigEndian.AppendUint64(nil, uint64(b.WriteTime)))
	return e.run(ctx, s, reqs, call{cons: e.set.write, ts: b.WriteTime, cells: b.Cells, writeTime: &writeTime}, "write")
}

// cellIndexes is 0..n-1.
func cellIndexes(n int) []int32 {
	idx := make([]int32, n)
	for i := range idx {
		idx[i] = int32(i)
	}
	return idx
}

// replicaFunc names the replica host of a data_points key (§5.6).
func (e *Engine) replicaFunc(s *gocql.Session) func(key []byte) string {
	if len(s.GetHosts()) == 1 {
		// One node is the replica of every key: no lookup at all. The
		// route cache's map lookups, ~250 ns each on a 100k-series load,
		// were a tenth of the adapter's CPU on one node.
		return func([]byte) string { return "" }
	}
	policy, ks := e.router(), e.set.keyspace
	return func(key []byte) string { return e.routes.replica(policy, ks, key) }
}

// group turns statements other than data points into requests: batches per
// partition, or single statements.
func (e *Engine) group(stmts []stmt) []request {
	var reqs []request
	if e.grouping == groupSingles {
		for i := range stmts {
			reqs = append(reqs, request{stmts: stmts[i : i+1 : i+1]})
		}
		return reqs
	}
	for _, g := range byPartition(stmts, func(st stmt) string { return st.part }, maxBatch) {
		reqs = append(reqs, request{stmts: g})
	}
	return reqs
}

// Delete applies the deletes of §8 synchronously, at the read consistency as
// KairosDB does (§8 step 5, §11), with the millisecond write timestamp.
func (e *Engine) Delete(ctx context.Context, d *engine.Deletes) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	var stmts []stmt
	for _, key := range d.Rows {
		stmts = append(stmts, stmt{cql: deleteRow, args: []any{key}, part: "d" + string(key)})
	}
	for _, r := range d.CellRanges {
		stmts = append(stmts, stmt{
			cql:  deleteCellRange,
			args: []any{r.Key, column(r.Lo), column(r.Hi)},
			part: "d" + string(r.Key),
		})
	}
	for _, r := range d.RowKeys {
		stmts = append(stmts, stmt{
			cql:  deleteRowKey,
			args: []any{r.Metric, dataPointsTable, r.RowTime, r.DataType, tagMap(r.Tags)},
			part: rowPart("r", r.Metric, r.RowTime, ""),
		})
	}
	for _, r := range d.TagIndexed {
		stmts = append(stmts, stmt{
			cql:  deleteTagIndexed,
			args: []any{r.Metric, dataPointsTable, r.RowTime, r.Pair, r.DataType, r.Hash, tagMap(r.Tags)},
			part: rowPart("t", r.Metric, r.RowTime, r.Pair),
		})
	}
	for _, r := range d.RowTimes {
		stmts = append(stmts, stmt{
			cql:  deleteRowTime,
			args: []any{r.Metric, dataPointsTable, r.RowTime},
			part: "i" + r.Metric,
		})
	}
	for _, r := range d.LegacyRowKeys {
		stmts = append(stmts, stmt{
			cql:  deleteLegacyKey,
			args: []any{[]byte(r.Metric), r.RowKey},
			part: "l" + r.Metric,
		})
	}
	for _, m := range d.LegacyMetrics {
		stmts = append(stmts, stmt{cql: deleteLegacyIndex, args: []any{[]byte(m)}, part: "l" + m})
	}
	for _, name := range d.MetricNames {
		stmts = append(stmts, stmt{
			cql:  deleteMetricName,
			args: []any{[]byte(metricNames), name},
			part: "s",
		})
	}
	return e.run(ctx, s, e.group(stmts), call{cons: e.set.read, ts: d.WriteTime}, "delete")
}

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
	limit *limiter
	start time.Time
}

// pool is the engine's fixed set of workers, one per request the process may
// have in flight (Config.MaxInFlight), shared by every Write and Delete: the
// limit holds for the process, not per remote-write request (with one pool
// per Write, 32 concurrent writes x 64 had 2,048 requests in flight). Fixed
// workers, not a goroutine per request: the driver's snappy compression needs
// a 32 KiB stack table, so every fresh goroutine grew its stack once per
// statement (18-25 % of the adapter's CPU, BENCHMARKS.md); a worker grows
// its stack, and its bind buffers, once for its life.
type pool struct {
	work    chan job
	stop    chan struct{}
	stopped sync.Once
	done    sync.WaitGroup
}

func newPool(n int) *pool {
	p := &pool{work: make(chan job), stop: make(chan struct{})}
	for range n {
		p.done.Go(func() {
			var bind binder
			for {
				select {
				case j := <-p.work:
					err := exec(j.ctx, j.s, j.req, j.call, &bind)
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
// pointer (boundBlob), so that binding a cell allocates nothing (it cost
// eight allocations per sample, BenchmarkWriteSteady).
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

// byPartition groups items by partition, in order of first appearance, into
// requests of at most limit items.
func byPartition[T any](items []T, part func(T) string, limit int) [][]T {
	index := make(map[string]int)
	var groups [][]T
	for _, it := range items {
		p := part(it)
		i, ok := index[p]
		if !ok || len(groups[i]) == limit {
			i = len(groups)
			index[p] = i
			groups = append(groups, make([]T, 0, 1))
		}
		groups[i] = append(groups[i], it)
	}
	return groups
}

// byReplica packs data_points inserts into batches per replica host (§5.6),
// of at most maxReplicaBatch cells and maxReplicaBytes estimated bytes, in
// order of first appearance, as cell indexes. replica may not know the ring
// yet: then the host is whatever it picks, and the grouping is only less
// useful, never wrong, since any coordinator can apply any batch.
func byReplica(cells []engine.Cell, replica func(key []byte) string) [][]int32 {
	type open struct {
		req  int // index in reqs
		size int
	}
	var (
		reqs     [][]int32
		batches  = make(map[string]*open)
		lastKey  []byte
		lastHost string
		// Full batches are cut from one backing array, not one each.
		slab []int32
	)
	for i := range cells {
		c := &cells[i]
		size := cellBytes + 4 + len(c.Value)
		// Cells of one series are usually adjacent: look the host up once.
		if lastKey == nil || string(c.Key) != string(lastKey) {
			lastKey, lastHost = c.Key, replica(c.Key)
		}
		b := batches[lastHost]
		if b == nil || len(reqs[b.req]) == maxReplicaBatch || b.size+size > maxReplicaBytes {
			b = &open{req: len(reqs)}
			batches[lastHost] = b
			if len(slab) < maxReplicaBatch {
				slab = make([]int32, maxReplicaBatch*min(64, len(cells)/maxReplicaBatch+1))
			}
			reqs = append(reqs, slab[:0:maxReplicaBatch])
			slab = slab[maxReplicaBatch:]
		}
		reqs[b.req] = append(reqs[b.req], int32(i))
		b.size += size
	}
	return reqs
}

// replicaOf is the ID of the first host of the token-aware plan for a
// data_points partition key (§5.6), or "" when the policy names none.
func replicaOf(policy gocql.HostSelectionPolicy, keyspace string, key []byte) string {
	if policy == nil {
		return ""
	}
	next := policy.Pick(routed{keyspace: keyspace, key: key})
	if next == nil {
		return ""
	}
	if h := next(); h != nil && h.Info() != nil {
		return h.Info().HostID()
	}
	return ""
}

// routed is the least a host selection policy needs to place a data_points
// partition key: the key is the whole (single-column blob) partition key, so
// it is its own routing key and needs no prepared-statement metadata.
type routed struct {
	keyspace string
	key      []byte
}

func (r routed) GetRoutingKey() ([]byte, error) { return r.key, nil }
func (r routed) Keyspace() string               { return r.keyspace }
func (r routed) Table() string                  { return dataPointsTable }
func (r routed) IsIdempotent() bool             { return true }
func (r routed) GetHostID() string              { return "" }
func (r routed) Statement() gocql.Statement     { return nil }

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
