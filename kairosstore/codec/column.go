package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// TimeUnit is the cluster's column encoding, spec row row_time_unit (§3.3).
type TimeUnit int

const (
	Milliseconds TimeUnit = iota // column = offset in ms
	Seconds                      // column = offset in whole seconds
	Legacy                       // column = offset in ms << 1, low bit = legacy value type
)

// ParseTimeUnit maps the spec table's row_time_unit string to a unit (§3.3):
// only "LEGACY" and "SECONDS" change behaviour; anything else is ms.
func ParseTimeUnit(s string) TimeUnit {
	switch s {
	case "LEGACY":
		return Legacy
	case "SECONDS":
		return Seconds
	}
	return Milliseconds
}

// String returns the spec table spelling of u (§3.3).
func (u TimeUnit) String() string {
	switch u {
	case Milliseconds:
		return "MILLISECONDS"
	case Seconds:
		return "SECONDS"
	case Legacy:
		return "LEGACY"
	}
	return "TimeUnit(" + strconv.Itoa(int(u)) + ")"
}

// defaultRowWidth is KairosDB's default row_width in ms: three weeks (§3.3).
const defaultRowWidth = 1814400000

// RowSpec is the cluster's row layout from the spec table (§3.3).
type RowSpec struct {
	Unit TimeUnit
	// Width is row_width exactly as stored: ms, or seconds in SECONDS mode.
	Width int64
}

// DefaultRowSpec is what a fresh cluster gets: MILLISECONDS, three weeks.
func DefaultRowSpec() RowSpec { return RowSpec{Unit: Milliseconds, Width: defaultRowWidth} }

// Validate reports whether every column of a row fits the 32-bit column
// encoding (§3.2), so that the methods of s decode what they encode.
func (s RowSpec) Validate() error {
	if s.Width <= 0 {
		return fmt.Errorf("kairosstore: row width %d is not positive", s.Width)
	}
	// MILLISECONDS keeps the offset as a signed int32, LEGACY keeps 31 bits
	// after the shift. SECONDS rows hold Width ms (the §3.1 bug), as seconds.
	if s.Unit != Seconds && s.Width > 1<<31 {
		return fmt.Errorf("kairosstore: row width %d ms does not fit a 32-bit column", s.Width)
	}
	if s.Unit == Seconds && s.Width > (1<<63-1)/1000 {
		return fmt.Errorf("kairosstore: row width %d s overflows ms", s.Width)
	}
	return nil
}

// WidthMillis is the row width in ms as the query and TTL code use it: Width
// times 1000 in SECONDS mode (§3.1, §5.2).
func (s RowSpec) WidthMillis() int64 {
	if s.Unit == Seconds {
		return s.Width * 1000
	}
	return s.Width
}

// RowTime returns the row start of ts: ts − (|ts| mod Width) with Java's
// truncating % and Math.abs (§3.1). For negative ts this is not a floor. In
// SECONDS mode the raw Width is used as ms, reproducing KairosDB's bug.
// Width must be positive (Validate).
func (s RowSpec) RowTime(ts int64) int64 {
	abs := ts
	if abs < 0 {
		abs = -abs // -MinInt64 stays MinInt64, as Math.abs does
	}
	return ts - abs%s.Width
}

// Column returns the column1 value of ts in the row starting at rowTime
// (§3.2). Like Java's (int) cast it keeps the low 32 bits.
func (s RowSpec) Column(rowTime, ts int64) uint32 {
	off := ts - rowTime
	switch s.Unit {
	case Legacy:
		return uint32(off << 1) // wraps at 32 bits; low bit 0 = long
	case Seconds:
		return uint32(off / 1000) // Java's truncating division
	}
	return uint32(off)
}

// Timestamp decodes column col of the row starting at rowTime (§3.2).
func (s RowSpec) Timestamp(rowTime int64, col uint32) int64 {
	switch s.Unit {
	case Legacy:
		return rowTime + int64(col>>1) // unsigned shift drops the type bit
	case Seconds:
		return rowTime + int64(int32(col))*1000
	}
	return rowTime + int64(int32(col))
}

// SliceBounds returns the column bounds [lo, hi) of KairosDB's data_points
// slice query of the row at rowTime for the inclusive query range [start,
// end] (§7.5). The arithmetic wraps as Java's does, including rowTime+W near
// MaxInt64 and hi's +1 in LEGACY mode (a full legacy row ends at d84b1801).
func (s RowSpec) SliceBounds(rowTime, start, end int64) (lo, hi uint32) {
	if start >= rowTime {
		lo = s.Column(rowTime, start)
	}
	w := s.WidthMillis()
	if end > rowTime+w {
		return lo, s.Column(rowTime, rowTime+w) + 1
	}
	return lo, s.Column(rowTime, end) + 1
}

// AppendColumn appends col as the 4-byte big-endian column1 blob (§3.2).
func AppendColumn(dst []byte, col uint32) []byte {
	return binary.BigEndian.AppendUint32(dst, col)
}

// parseColumn decodes a column1 blob; it must be exactly 4 bytes (§3.2).
func parseColumn(b []byte) (uint32, error) {
	if len(b) != 4 {
		return 0, errors.New("kairosstore: column1 is " + strconv.Itoa(len(b)) + " bytes, want 4")
	}
	return binary.BigEndian.Uint32(b), nil
}
