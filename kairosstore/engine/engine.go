// Package engine is the contract between the KairosDB layout logic
// (package kairosstore) and the engines that keep its rows (kairosstore/cql,
// kairosstore/pebblekv): the Engine interface and the rows it writes and
// deletes. It holds no logic, so an engine depends on nothing above it.
// Section numbers (§n) in its comments are those of docs/kairosdb-layout.md.
package engine

import (
	"context"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// Engine is the storage under the KairosDB layout: one method per statement
// KairosDB issues against its eight tables (docs/kairosdb-layout.md §1, §5.3, §7, §8,
// §9). The layout logic of package kairosstore (keys, columns, values, caches, the
// three-phase read) sits above it, so the Cassandra engine and the embedded
// engine share every byte rule and differ only in how rows are kept.
//
// Conventions every implementation honours:
//   - writeTime is the client write timestamp in MILLISECONDS (§5.4, §12 item 1);
//     the newer write wins, as in Cassandra, and deletes shadow older writes.
//   - ttl is in seconds; 0 means the row never expires.
//   - Columns of data_points are the 4-byte big-endian column1 values (§3.2)
//     and are compared as unsigned 32-bit integers, which is how Cassandra
//     orders the blobs.
//   - Byte slices, tag slices and the strings of tags passed to a callback
//     are only valid during the call (the Cassandra engine hands out tag
//     strings that alias the driver's frame, so that a scan of a million
//     row_keys entries allocates nothing per entry); callers copy what they
//     keep. Slices passed in are not retained
//     after the method returns.
//   - A callback returning an error stops the scan; the method returns that
//     error.
//   - Methods are safe for concurrent use.
type Engine interface {
	// Setup creates the keyspace (where the engine has one) and the eight
	// tables if they are missing.
	Setup(ctx context.Context) error

	// Spec reads spec(spec_type='cluster_config', name).
	Spec(ctx context.Context, name string) (value string, ok bool, err error)
	// SetSpec writes spec(spec_type='cluster_config', name) = value.
	SetSpec(ctx context.Context, name, value string, writeTime int64) error

	// Write stores every row of the batch. It returns nil only when every
	// statement succeeded; otherwise some rows may be stored and the caller
	// retries the whole batch (all writes are idempotent).
	Write(ctx context.Context, b *Batch) error

	// RowTimes lists row_key_time_index row times of metric with
	// lo <= row_time <= hi, ascending (§7.3).
	RowTimes(ctx context.Context, metric string, lo, hi int64, fn func(rowTime int64) error) error
	// RowKeys lists the row_keys entries of (metric, rowTime) (§7.4). Entries
	// whose data_type is null (static-only partitions) are skipped. Tags come
	// in no particular order.
	RowKeys(ctx context.Context, metric string, rowTime int64, fn func(dataType string, tags []codec.Tag) error) error
	// TagIndexedRowKeys lists tag_indexed_row_keys entries of
	// (metric, rowTime, single_tag_pair) (§6.3).
	TagIndexedRowKeys(ctx context.Context, metric string, rowTime int64, pair string, fn func(dataType string, tags []codec.Tag) error) error
	// RowKeyExists reports whether the row_keys entry (metric, rowTime,
	// dataType, tags) is stored. Tags may come in any order.
	RowKeyExists(ctx context.Context, metric string, rowTime int64, dataType string, tags []codec.Tag) (bool, error)
	// LegacyRowKeys lists the column1 values of the legacy row_key_index
	// partition of metric with lo <= column1 < hi in unsigned byte order (§7.2).
	LegacyRowKeys(ctx context.Context, metric string, lo, hi []byte, fn func(rowKey []byte) error) error
	// Cells lists the data_points cells of one row key with lo <= column1 < hi
	// (hi is exclusive, as in KairosDB's slice query §7.5), ascending.
	Cells(ctx context.Context, rowKey []byte, lo, hi uint32, fn func(column uint32, value []byte) error) error
	// FirstCell is the first column of one row key with lo <= column1 < hi,
	// read without reading the cells after it (Cells reads a page of them
	// before a callback can stop it).
	FirstCell(ctx context.Context, rowKey []byte, lo, hi uint32) (column uint32, ok bool, err error)
	// MetricNames lists string_index['metric_names'] (§9.1) in byte order.
	MetricNames(ctx context.Context, fn func(name string) error) error

	// Delete applies the deletes of one delete-by-query (§8).
	Delete(ctx context.Context, d *Deletes) error

	// SetServiceValue writes service_index(service, serviceKey, key) = value
	// and refreshes the static mtime (§9.2).
	SetServiceValue(ctx context.Context, service, serviceKey, key, value string, writeTime int64) error
	// ServiceValue reads service_index(service, serviceKey, key).
	ServiceValue(ctx context.Context, service, serviceKey, key string) (value string, ok bool, err error)
	// ServiceKeys lists the keys of partition (service, serviceKey) with the
	// given prefix, ascending.
	ServiceKeys(ctx context.Context, service, serviceKey, prefix string, fn func(key string) error) error
	// DeleteServiceValue removes service_index(service, serviceKey, key):
	// a tombstone at writeTime, so a write older than it stays shadowed.
	DeleteServiceValue(ctx context.Context, service, serviceKey, key string, writeTime int64) error

	// Ready reports whether the engine can serve reads and writes now.
	Ready(ctx context.Context) error
	// Close releases the engine. No method may be called afterwards.
	Close() error
}

// Cell is one data_points row: (key, column1) -> value.
type Cell struct {
	Key    []byte
	Column uint32
	Value  []byte
	TTL    int32
}

// IndexedRowKey is one row_keys row (§5.3): the series' row key in index form.
type IndexedRowKey struct {
	Metric   string
	RowTime  int64
	DataType string
	Tags     []codec.Tag
	TTL      int32
}

// TagIndexedRowKey is one tag_indexed_row_keys row (§6.2).
type TagIndexedRowKey struct {
	IndexedRowKey
	Pair string // single_tag_pair, unescaped "name=value"
	Hash int32  // tag_collection_hash
}

// RowTimeIndex is one row_key_time_index row (§5.3).
type RowTimeIndex struct {
	Metric  string
	RowTime int64
	TTL     int32
}

// Batch is everything one write request stores. Every statement carries
// WriteTime as its write timestamp.
type Batch struct {
	WriteTime   int64
	Cells       []Cell
	RowKeys     []IndexedRowKey
	TagIndexed  []TagIndexedRowKey
	RowTimes    []RowTimeIndex
	MetricNames []string
	// LegacyRowKeys are row_key_index cells (§7.2). Current KairosDB never
	// writes them and neither does the adapter's write path; they exist so
	// that data in the pre-1.0 layout can be seeded and migrated.
	LegacyRowKeys []LegacyRowKey
}

// CellRange is an inclusive column range of one data_points row, the shape of
// KairosDB's partial-row delete (§8 step 2).
type CellRange struct {
	Key    []byte
	Lo, Hi uint32 // inclusive
}

// LegacyRowKey is one row_key_index cell: (metric bytes, row key bytes).
type LegacyRowKey struct {
	Metric string
	RowKey []byte
}

// Deletes is the set of deletes of one delete-by-query (§8).
type Deletes struct {
	WriteTime     int64
	Rows          [][]byte // whole data_points partitions
	CellRanges    []CellRange
	RowKeys       []IndexedRowKey
	TagIndexed    []TagIndexedRowKey
	RowTimes      []RowTimeIndex // TTL unused
	LegacyRowKeys []LegacyRowKey
	// LegacyMetrics drops whole row_key_index partitions (delete-all only).
	LegacyMetrics []string
	// MetricNames are removed from string_index (delete-all only).
	MetricNames []string
}
