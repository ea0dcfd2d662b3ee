package pebblekv

// maxMarks bounds the partitions marks remembers (about 100 bytes each).
const maxMarks = 1 << 18

// marks bounds the write times stored in each data_points partition, so
// that a cell newer than its partition's bound is written without reading
// the partition's tombstones: none can shadow it. (Cells themselves are
// merged blind either way, blocks.go.) Write times
// are the wall clock, so this is the common case even when concurrent
// requests reach the lock out of order or in the same millisecond, which
// the store-wide high-water mark alone would send to the slow path.
//
// Invariant: every write time stored in partition p is <= base, or <=
// byRow[p] when p is present. Bounds may be too high (a failed commit), which
// only costs lookups. Guarded by Engine.mu.
type marks struct {
	base  int64
	byRow map[string]int64
	limit int // entries of byRow before it is dropped
}

func newMarks(base int64) marks {
	return marks{base: base, byRow: map[string]int64{}, limit: maxMarks}
}

// newer reports whether writeTime is above every write time stored in the
// partition of rowKey.
func (m *marks) newer(rowKey []byte, writeTime int64) bool {
	if writeTime <= m.base {
		return false
	}
	bound, ok := m.byRow[string(rowKey)]
	return !ok || writeTime > bound
}

// record notes a write or delete at writeTime in the partition of rowKey.
// highWater must be >= every write time stored; when the map is full it is
// dropped and base rises to highWater, which keeps the invariant.
func (m *marks) record(rowKey string, writeTime, highWater int64) {
	if writeTime <= m.base {
		return
	}
	if bound, ok := m.byRow[rowKey]; ok {
		m.byRow[rowKey] = max(bound, writeTime)
		return
	}
	if len(m.byRow) >= m.limit {
		clear(m.byRow)
		m.base = highWater
		return
	}
	m.byRow[rowKey] = writeTime
}
