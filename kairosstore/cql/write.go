package cql

import (
	"context"
	"encoding/binary"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// stmt is one CQL statement with its bound values and the identity of the
// partition it touches (table and partition key), which groupPartitions uses.
// Data point inserts are not stmts: a request names them by their index in
// the batch's cells, and the worker that sends it binds them (binder), so a
// Write holds 4 bytes per cell instead of a statement, five bind values and
// a copy in its request (BENCHMARKS.md, BenchmarkWriteSteady).
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
