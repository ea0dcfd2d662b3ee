package cql

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
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
	// (kairosdb-layout.md §5.6: the first host of the token-aware plan, one
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
// Data point inserts also carry their routing key (the data_points partition
// key) and estimated batch size, which groupReplicas uses.
type stmt struct {
	cql   string
	args  []any
	part  string
	route []byte
	size  int
}

// Write stores the batch: data_points, row_keys, tag_indexed_row_keys,
// row_key_time_index and string_index rows (§5.3), all with the batch's
// millisecond write timestamp (§5.4) at the write consistency.
func (e *Engine) Write(ctx context.Context, b *kairosstore.Batch) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	n := len(b.Cells) + len(b.RowKeys) + len(b.TagIndexed) + len(b.RowTimes) + len(b.MetricNames) + len(b.LegacyRowKeys)
	stmts := make([]stmt, 0, n)
	// One backing array each for the 4-byte column names (§3.2) and the
	// bind values of all cells. Values are bound by pointer (boundBlob),
	// the write time and TTL encoded once, so that binding a cell
	// allocates nothing: it cost eight allocations per sample, six here
	// and two in the driver's marshalling of int and bigint
	// (BenchmarkWriteSteady).
	cols := make([]byte, 4*len(b.Cells))
	colArgs := make([]boundBlob, len(b.Cells))
	args := make([]any, 5*len(b.Cells))
	// The write time goes to the bigint of "USING TIMESTAMP ?", the TTL to
	// an int: 8 and 4 bytes big-endian on the wire.
	writeTime := boundBlob(binary.BigEndian.AppendUint64(nil, uint64(b.WriteTime)))
	var ttl *boundBlob
	lastTTL := int32(0)
	for i := range b.Cells {
		c := &b.Cells[i]
		colArgs[i] = cols[4*i : 4*i+4 : 4*i+4]
		binary.BigEndian.PutUint32(colArgs[i], c.Column)
		if ttl == nil || lastTTL != c.TTL {
			v := boundBlob(binary.BigEndian.AppendUint32(nil, uint32(c.TTL)))
			ttl, lastTTL = &v, c.TTL
		}
		a := args[5*i : 5*i+5 : 5*i+5]
		a[0], a[1], a[2], a[3], a[4] = (*boundBlob)(&c.Key), &colArgs[i], (*boundBlob)(&c.Value), ttl, &writeTime
		st := stmt{cql: insertDataPoint, args: a, route: c.Key, size: cellBytes + 4 + len(c.Value)}
		if e.grouping == groupPartitions {
			st.part = "d" + string(c.Key)
		}
		stmts = append(stmts, st)
	}
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
		// No TTL: metric names live forever (§5.3, gotcha 7).
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
	return e.run(ctx, s, stmts, e.set.write, b.WriteTime, "write")
}

// Delete applies the deletes of §8 synchronously, at the read consistency as
// KairosDB does (§8 step 5, §11), with the millisecond write timestamp.
func (e *Engine) Delete(ctx context.Context, d *kairosstore.Deletes) error {
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
	return e.run(ctx, s, stmts, e.set.read, d.WriteTime, "delete")
}

// run executes stmts grouped by e.grouping, at most MaxInFlight requests at a
// time, every request with write timestamp ts in milliseconds (§5.4, gotcha 1).
// It waits for every request it started, so no bound value is used after it
// returns, and fails if any statement failed.
func (e *Engine) run(ctx context.Context, s *gocql.Session, stmts []stmt, cons gocql.Consistency, ts int64, op string) error {
	if len(stmts) == 0 {
		return nil
	}
	var reqs [][]stmt
	switch e.grouping {
	case groupReplicas:
		policy, ks := e.router(), e.set.keyspace
		replica := func(key []byte) string { return e.routes.replica(policy, ks, key) }
		if len(s.GetHosts()) == 1 {
			// One node is the replica of every key: no lookup at all. The
			// route cache's map lookups, ~250 ns each on a 100k-series
			// load, were a tenth of the adapter's CPU on one node.
			replica = func([]byte) string { return "" }
		}
		reqs = byReplica(stmts, replica)
	case groupPartitions:
		reqs = byPartition(stmts, maxBatch)
	default:
		reqs = make([][]stmt, len(stmts))
		for i := range stmts {
			reqs[i] = stmts[i : i+1 : i+1]
		}
	}

	// A fixed pool of workers, not a goroutine per request: the driver's
	// snappy compression needs a 32 KiB stack table, so every fresh goroutine
	// grew its stack once per statement (18–25 % of the adapter's CPU,
	// BENCHMARKS.md). Workers grow theirs once per Write.
	var (
		wg   sync.WaitGroup
		fail failures
		work = make(chan []stmt)
	)
	for range min(e.set.maxInFlight, len(reqs)) {
		wg.Go(func() {
			for req := range work {
				if err := exec(ctx, s, req, cons, ts); err != nil {
					fail.add(len(req), 1, err)
				}
			}
		})
	}
loop:
	for i, req := range reqs {
		select {
		case work <- req:
		case <-ctx.Done():
			// Count what was never sent, so the caller answers 5xx.
			n := 0
			for _, rest := range reqs[i:] {
				n += len(rest)
			}
			fail.add(n, len(reqs)-i, ctx.Err())
			break loop
		}
	}
	close(work)
	wg.Wait()
	return fail.err(op, len(stmts), len(reqs))
}

// exec sends one request: a single statement, or an UNLOGGED batch.
func exec(ctx context.Context, s *gocql.Session, req []stmt, cons gocql.Consistency, ts int64) error {
	if len(req) == 1 {
		return s.Query(req[0].cql, req[0].args...).
			Consistency(cons).WithTimestamp(ts).Idempotent(true).ExecContext(ctx)
	}
	b := s.Batch(gocql.UnloggedBatch).Consistency(cons).WithTimestamp(ts)
	b.Entries = make([]gocql.BatchEntry, len(req))
	for i, st := range req {
		b.Entries[i] = gocql.BatchEntry{Stmt: st.cql, Args: st.args, Idempotent: true}
	}
	return b.ExecContext(ctx)
}

// byPartition groups statements by partition, in order of first appearance,
// into requests of at most limit statements.
func byPartition(stmts []stmt, limit int) [][]stmt {
	index := make(map[string]int)
	var groups [][]stmt
	for _, st := range stmts {
		i, ok := index[st.part]
		if !ok || len(groups[i]) == limit {
			i = len(groups)
			index[st.part] = i
			groups = append(groups, make([]stmt, 0, 1))
		}
		groups[i] = append(groups[i], st)
	}
	return groups
}

// byReplica packs the statements that carry a routing key into batches per
// replica host (§5.6), of at most maxReplicaBatch statements and
// maxReplicaBytes estimated bytes, in order of first appearance; the others
// (index rows) are grouped by partition. policy may be nil, or may not know
// the ring yet: then the host is whatever it picks, and the grouping is only
// less useful, never wrong, since any coordinator can apply any batch.
func byReplica(stmts []stmt, replica func(key []byte) string) [][]stmt {
	type open struct {
		req  int // index in reqs
		size int
	}
	var (
		reqs     [][]stmt
		rest     []stmt
		batches  = make(map[string]*open)
		lastKey  []byte
		lastHost string
	)
	for _, st := range stmts {
		if st.route == nil {
			rest = append(rest, st)
			continue
		}
		// Cells of one series are usually adjacent: look the host up once.
		if lastKey == nil || string(st.route) != string(lastKey) {
			lastKey, lastHost = st.route, replica(st.route)
		}
		b := batches[lastHost]
		if b == nil || len(reqs[b.req]) == maxReplicaBatch || b.size+st.size > maxReplicaBytes {
			b = &open{req: len(reqs)}
			batches[lastHost] = b
			reqs = append(reqs, make([]stmt, 0, maxReplicaBatch))
		}
		reqs[b.req] = append(reqs[b.req], st)
		b.size += st.size
	}
	return append(reqs, byPartition(rest, maxBatch)...)
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
	if len(f.first) < maxJoinedErrors {
		f.first = append(f.first, err)
	}
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
