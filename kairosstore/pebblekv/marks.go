package pebblekv

import "hash/maphash"

// maxMarks bounds the partitions marks remembers (16 bytes each, and the
// map's overhead).
const maxMarks = 1 << 18

// marks bounds the write times of the data_points tombstones of each
// partition, so that a cell newer than its partition's bound is written
// without reading the partition's tombstones: none can shadow it. (Cells
// themselves are merged blind either way, blocks.go.) Only deletes put
// tombstones, so only a delete records a bound; cells record nothing, and
// while no partition was deleted from since the engine opened (the map is
// empty) a cell written above base costs no lookup at all. Bounding every
// write time stored, cells included, made the marks a map of every
// partition written, looked up and updated for every known series of a
// request: a tenth of a known sample's CPU (BENCHMARKS.md, "Issue #31:
// known series, less CPU per sample").
//
// Partitions are known by a 64-bit hash of their row key, not the row key
// itself, which is about 200 bytes to hash and compare in a map (BENCHMARKS.md,
// "Issue #31, third pass"). Partitions that share a hash share one bound,
// the higher, which is still a bound of both.
//
// Invariant: every data_points tombstone stored in partition p has a write
// time <= base, or <= byRow[hash(p)] when that is present. base starts at
// the stored high-water mark, which bounds every write time stored before
// the engine opened. Bounds may be too high (a failed commit, a shared
// hash), which only costs lookups. Guarded by Engine.mu.
type marks struct {
	seed  maphash.Seed
	base  int64
	byRow map[uint64]int64
	limit int // entries of byRow before it is dropped
}

func newMarks(base int64) marks {
	return marks{seed: maphash.MakeSeed(), base: base, byRow: map[uint64]int64{}, limit: maxMarks}
}

// hash is the name of rowKey's partition in marks.
func (m *marks) hash(rowKey []byte) uint64 { return maphash.Bytes(m.seed, rowKey) }

// newer reports whether writeTime is above every tombstone stored in the
// partition of rowKey.
func (m *marks) newer(rowKey []byte, writeTime int64) bool {
	return m.newerHash(m.hash(rowKey), writeTime)
}

func (m *marks) newerHash(h uint64, writeTime int64) bool {
	if writeTime <= m.base {
		return false
	}
	if len(m.byRow) == 0 {
		return true
	}
	bound, ok := m.byRow[h]
	return !ok || writeTime > bound
}

// record notes a tombstone at writeTime in the partition of rowKey.
// highWater must be >= every write time stored; when the map is full it is
// dropped and base rises to highWater, which keeps the invariant.
func (m *marks) record(rowKey string, writeTime, highWater int64) {
	m.recordHash(maphash.String(m.seed, rowKey), writeTime, highWater)
}

func (m *marks) recordHash(h uint64, writeTime, highWater int64) {
	if writeTime <= m.base {
		return
	}
	if bound, ok := m.byRow[h]; ok {
		m.byRow[h] = max(bound, writeTime)
		return
	}
	if len(m.byRow) >= m.limit {
		clear(m.byRow)
		m.base = highWater
		return
	}
	m.byRow[h] = writeTime
}
