package cql

// CQL text, as KairosDB issues it wherever the exact text matters. Every
// partition-key column is a bind marker so the driver can route token-aware.

// createKeyspace is §1.1 with its two spaces before WITH; the quoted keyspace
// and the replication literal are filled in by Setup.
const createKeyspace = `CREATE KEYSPACE IF NOT EXISTS "%s"  WITH REPLICATION = %s`

// DDL of §1.2, verbatim (including the trailing blank after
// "table_name text," in row_keys and tag_indexed_row_keys), without COMPACT
// STORAGE, which C* >= 4 rejects. service_index is what KairosDB creates on
// the meta cluster, which is the write cluster unless configured otherwise.
const (
	createDataPoints = `CREATE TABLE IF NOT EXISTS data_points (
  key blob,
  column1 blob,
  value blob,
  PRIMARY KEY ((key), column1)
)`
	createRowKeyIndex = `CREATE TABLE IF NOT EXISTS row_key_index (
  key blob,
  column1 blob,
  value blob,
  PRIMARY KEY ((key), column1)
)`
	createStringIndex = `CREATE TABLE IF NOT EXISTS string_index (
  key blob,
  column1 text,
  value blob,
  PRIMARY KEY ((key), column1)
)`
	createRowKeys = `CREATE TABLE IF NOT EXISTS row_keys (
  metric text,
  table_name text, 
  row_time timestamp,
  data_type text,
  tags frozen<map<text, text>>,
  mtime timeuuid static,
  value text,
  PRIMARY KEY ((metric, table_name, row_time), data_type, tags)
)`
	createTagIndexedRowKeys = `CREATE TABLE IF NOT EXISTS tag_indexed_row_keys (
  metric text,
  table_name text, 
  row_time timestamp,
  single_tag_pair text,
  tag_collection_hash int,
  data_type text,
  tags frozen<map<text, text>>,
  mtime timeuuid static,
  value text,
  PRIMARY KEY ((metric, table_name, row_time, single_tag_pair), data_type, tag_collection_hash, tags)
)`
	createRowKeyTimeIndex = `CREATE TABLE IF NOT EXISTS row_key_time_index (
  metric text,
  table_name text,
  row_time timestamp,
  value text,
  PRIMARY KEY ((metric), table_name, row_time)
)`
	createSpec         = `CREATE TABLE IF NOT EXISTS spec ( spec_type text, name text, value text, PRIMARY KEY ((spec_type), name))`
	createServiceIndex = `CREATE TABLE IF NOT EXISTS service_index ( service text, service_key text, key text, mtime timeuuid static,  value text, PRIMARY KEY ((service, service_key), key))`
)

// table is one CREATE TABLE statement of §1.2.
type table struct {
	name, ddl string
}

// tableDDL lists the tables in KairosDB's creation order (§1.2), then
// service_index.
func tableDDL() []table {
	return []table{
		{"data_points", createDataPoints},
		{"row_key_index", createRowKeyIndex},
		{"string_index", createStringIndex},
		{"row_keys", createRowKeys},
		{"tag_indexed_row_keys", createTagIndexedRowKeys},
		{"row_key_time_index", createRowKeyTimeIndex},
		{"spec", createSpec},
		{"service_index", createServiceIndex},
	}
}

// Constants bound into statements.
const (
	// dataPointsTable is the literal table_name of every index row (§1.2).
	dataPointsTable = "data_points"
	// specType is the only spec_type KairosDB uses (§3.3).
	specType = "cluster_config"
)

// metricNames is the string_index partition of metric names (§9.1); the
// key is its UTF-8 bytes 6d65747269635f6e616d6573.
const metricNames = "metric_names"

// Inserts (§5.3). Write timestamps are set per statement in milliseconds
// (§5.4); data_points also binds its own, as KairosDB does.
const (
	insertDataPoint   = `INSERT INTO data_points (key, column1, value) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	insertRowKey      = `INSERT INTO row_keys (metric, table_name, row_time, data_type, tags, mtime) VALUES (?, ?, ?, ?, ?, now()) USING TTL ?`
	insertTagIndexed  = `INSERT INTO tag_indexed_row_keys (metric, table_name, row_time, data_type, single_tag_pair, tag_collection_hash, tags, mtime) VALUES (?, ?, ?, ?, ?, ?, ?, now()) USING TTL ?`
	insertRowTime     = `INSERT INTO row_key_time_index (metric, table_name, row_time) VALUES (?, ?, ?) USING TTL ?`
	insertStringIndex = `INSERT INTO string_index (key, column1, value) VALUES (?, ?, 0x00)`
)

// Reads (§7.2–§7.5, §9.1).
const (
	selectRowTimes   = `SELECT row_time FROM row_key_time_index WHERE metric = ? AND table_name = ? AND row_time >= ? AND row_time <= ?`
	selectRowKeys    = `SELECT data_type, tags FROM row_keys WHERE metric = ? AND table_name = ? AND row_time = ?`
	selectRowKey     = `SELECT data_type FROM row_keys WHERE metric = ? AND table_name = ? AND row_time = ? AND data_type = ? AND tags = ?`
	selectRowKeysIn  = `SELECT tags FROM row_keys WHERE metric = ? AND table_name = ? AND row_time = ? AND data_type = ? AND tags IN ?`
	selectTagIndexed = `SELECT data_type, tags FROM tag_indexed_row_keys WHERE metric = ? AND table_name = ? AND row_time = ? AND single_tag_pair = ? ORDER BY data_type, tag_collection_hash`
	selectLegacyKeys = `SELECT column1 FROM row_key_index WHERE key = ? AND column1 >= ? AND column1 < ?`
	selectCells      = `SELECT column1, value FROM data_points WHERE key = ? AND column1 >= ? AND column1 < ?`
	selectCellsIn    = `SELECT key, column1, value FROM data_points WHERE key IN ? AND column1 >= ? AND column1 < ?`
	selectColumnsIn  = `SELECT key, column1, value FROM data_points WHERE key IN ? AND column1 IN ?`
	selectFirstCell  = `SELECT column1 FROM data_points WHERE key = ? AND column1 >= ? AND column1 < ? LIMIT 1`
	selectNames      = `SELECT column1 FROM string_index WHERE key = ?`
)

// Deletes (§8).
const (
	deleteRow         = `DELETE FROM data_points WHERE key = ?`
	deleteCellRange   = `DELETE FROM data_points WHERE key = ? AND column1 >= ? AND column1 <= ?`
	deleteRowKey      = `DELETE FROM row_keys WHERE metric = ? AND table_name = ? AND row_time = ? AND data_type = ? AND tags = ?`
	deleteTagIndexed  = `DELETE FROM tag_indexed_row_keys WHERE metric = ? AND table_name = ? AND row_time = ? AND single_tag_pair = ? AND data_type = ? AND tag_collection_hash = ? AND tags = ?`
	deleteRowTime     = `DELETE FROM row_key_time_index WHERE metric = ? AND table_name = ? AND row_time = ?`
	insertLegacyKey   = `INSERT INTO row_key_index (key, column1, value) VALUES (?, ?, 0x00)`
	deleteLegacyKey   = `DELETE FROM row_key_index WHERE KEY = ? AND column1 = ?`
	deleteLegacyIndex = `DELETE FROM row_key_index WHERE KEY = ?`
	deleteMetricName  = `DELETE FROM string_index WHERE key = ? AND column1 = ?`
)

// spec (§3.3) and service_index (§9.2).
const (
	selectSpec         = `SELECT value FROM spec WHERE spec_type = ? AND name = ?`
	insertSpec         = `INSERT INTO spec (spec_type, name, value) VALUES (?, ?, ?)`
	insertService      = `INSERT INTO service_index (service, service_key, key, value, mtime) VALUES (?, ?, ?, ?, now())`
	deleteService      = `DELETE FROM service_index WHERE service = ? AND service_key = ? AND key = ?`
	selectService      = `SELECT value FROM service_index WHERE service = ? AND service_key = ? AND key = ?`
	selectServiceKeys  = `SELECT key FROM service_index WHERE service = ? AND service_key = ?`
	selectServiceRange = `SELECT key FROM service_index WHERE service = ? AND service_key = ? AND key >= ? AND key < ?`
)

// Health and schema.
const (
	selectReleaseVersion = `SELECT release_version FROM system.local`
	selectKeyspace       = `SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?`
)
