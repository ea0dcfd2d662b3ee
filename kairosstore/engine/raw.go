package engine

import "context"

// Table names one of the eight tables of the layout (§1.2) for the raw scan
// and load of Raw.
type Table uint8

// The tables in the order a copy walks them: the data before the indexes
// that point to it, so that an interrupted copy leaves no index row whose
// cells were not copied yet; spec last but one and service_index last.
const (
	DataPoints Table = iota
	RowKeyIndex
	RowKeys
	TagIndexedRowKeys
	RowKeyTimeIndex
	StringIndex
	Spec
	ServiceIndex
)

// Tables lists every table in copy order.
var Tables = []Table{DataPoints, RowKeyIndex, RowKeys, TagIndexedRowKeys, RowKeyTimeIndex, StringIndex, Spec, ServiceIndex}

func (t Table) String() string {
	switch t {
	case DataPoints:
		return "data_points"
	case RowKeyIndex:
		return "row_key_index"
	case RowKeys:
		return "row_keys"
	case TagIndexedRowKeys:
		return "tag_indexed_row_keys"
	case RowKeyTimeIndex:
		return "row_key_time_index"
	case StringIndex:
		return "string_index"
	case Spec:
		return "spec"
	case ServiceIndex:
		return "service_index"
	}
	return "unknown table"
}

// Row is one row of any table with the write time and remaining TTL it is
// stored with. Which fields count depends on Table:
//
//	DataPoints         Cell (Key, Column, Value)
//	RowKeyIndex        Legacy
//	RowKeys            Index.IndexedRowKey (Metric, RowTime, DataType, Tags)
//	TagIndexedRowKeys  Index
//	RowKeyTimeIndex    Index.Metric, Index.RowTime
//	StringIndex        Name (the metric name of string_index['metric_names'])
//	Spec               Name, Value
//	ServiceIndex       Service, ServiceKey, Name (the key), Value
//
// The TTL fields of Cell and Index are unused: TTL is the row's.
type Row struct {
	Table     Table
	WriteTime int64 // ms, as every write of the layout (§5.4)
	TTL       int32 // seconds left; 0 never expires

	Cell                Cell
	Index               TagIndexedRowKey
	Legacy              LegacyRowKey
	Service, ServiceKey string
	Name                string
	Value               []byte
}

// Raw is implemented by engines whose rows can be copied one by one to
// another engine with their write times and TTLs (package copier). It is
// not part of Engine: the store never needs it.
type Raw interface {
	// ScanRaw calls fn with every live row of table, in an order that is
	// stable for a store that does not change, from the position from on
	// (nil: the start). Rows past their TTL are left out, and so are
	// tombstones and what they shadow. The row and its slices are valid
	// only during the call.
	//
	// resume, when not nil, is a position from which ScanRaw yields this
	// row and every row after it: a copy that has stored every row before
	// this one may record it and continue from it after a crash. Engines
	// hand one out at least at every partition boundary.
	ScanRaw(ctx context.Context, table Table, from []byte, fn func(r *Row, resume []byte) error) error
	// LoadRaw writes rows with their own write times and TTLs (counted from
	// now), reconciled with what is stored as any write is: loading the
	// same rows twice changes nothing. It returns nil only when every row
	// is stored durably.
	LoadRaw(ctx context.Context, rows []Row) error
}
