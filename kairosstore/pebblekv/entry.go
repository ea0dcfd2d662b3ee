package pebblekv

import (
	"bytes"
	"encoding/binary"
)

// entry is the Pebble value of every key: what Cassandra keeps beside a cell
// (write timestamp, local expiry) plus the cell value.
//
//	byte 0      kind: 0 live, 1 tombstone
//	bytes 1-8   write time, ms, big-endian int64
//	bytes 9-16  expiry, unix seconds, big-endian int64; 0 never
//	bytes 17-   value
type entry struct {
	tombstone bool
	writeTime int64
	// expiry is when a TTL'd entry disappears, or when a tombstone has aged
	// past the grace period and may be purged (Cassandra's gc_grace_seconds).
	expiry int64
	value  []byte
}

const entryHeaderLen = 17

func (e entry) append(dst []byte) []byte {
	kind := byte(0)
	if e.tombstone {
		kind = 1
	}
	dst = append(dst, kind)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.writeTime))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.expiry))
	return append(dst, e.value...)
}

// decodeEntry decodes b; the value aliases b.
func decodeEntry(b []byte) (entry, error) {
	if len(b) < entryHeaderLen || b[0] > 1 {
		return entry{}, errCorrupt
	}
	return entry{
		tombstone: b[0] == 1,
		writeTime: int64(binary.BigEndian.Uint64(b[1:9])),
		expiry:    int64(binary.BigEndian.Uint64(b[9:17])),
		value:     b[entryHeaderLen:],
	}, nil
}

// live reports whether the entry still counts at now (unix seconds): not
// expired, or for a tombstone, still within its grace period. Expired
// entries are treated as absent everywhere, whether or not the purge has
// removed them yet, so results never depend on purge timing.
func (e entry) live(now int64) bool { return e.expiry == 0 || e.expiry > now }

// visible reports whether a read returns the entry at now.
func (e entry) visible(now int64) bool { return !e.tombstone && e.live(now) }

// supersedes reports whether e replaces old, following Cassandra's
// reconciliation of two cells (Cells.resolveRegular in 4.x): the higher
// write time wins; on a tie a tombstone beats an expiring cell, which beats
// a cell without TTL; then the later expiry wins; then the greater value.
func (e entry) supersedes(old entry) bool {
	if e.writeTime != old.writeTime {
		return e.writeTime > old.writeTime
	}
	if r, o := e.rank(), old.rank(); r != o {
		return r > o
	}
	if e.expiry != old.expiry {
		return e.expiry > old.expiry
	}
	return bytes.Compare(e.value, old.value) >= 0
}

func (e entry) rank() int {
	switch {
	case e.tombstone:
		return 2
	case e.expiry != 0:
		return 1
	default:
		return 0
	}
}
