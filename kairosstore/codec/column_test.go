package codec

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	msSpec     = RowSpec{Unit: Milliseconds, Width: testW}
	legacySpec = RowSpec{Unit: Legacy, Width: testW}
	secSpec    = RowSpec{Unit: Seconds, Width: 1814400}
)

func TestTimeUnit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		unit TimeUnit
	}{
		{"MILLISECONDS", Milliseconds},
		{"SECONDS", Seconds},
		{"LEGACY", Legacy},
		{"", Milliseconds},
		{"seconds", Milliseconds}, // enum names are case-sensitive
		{"MINUTES", Milliseconds},
	} {
		require.Equal(t, tc.unit, ParseTimeUnit(tc.in), tc.in)
	}
	for _, u := range []TimeUnit{Milliseconds, Seconds, Legacy} {
		require.Equal(t, u, ParseTimeUnit(u.String()))
	}
	require.Equal(t, "TimeUnit(7)", TimeUnit(7).String())
}

func TestRowSpecDefaults(t *testing.T) {
	require.Equal(t, RowSpec{Unit: Milliseconds, Width: 1814400000}, DefaultRowSpec())
	require.Equal(t, int64(1814400000), msSpec.WidthMillis())
	require.Equal(t, int64(1814400000), legacySpec.WidthMillis())
	require.Equal(t, int64(1814400000), secSpec.WidthMillis())
	for _, tc := range []struct {
		spec RowSpec
		ok   bool
	}{
		{DefaultRowSpec(), true},
		{secSpec, true},
		{legacySpec, true},
		{RowSpec{Milliseconds, 1 << 31}, true},
		{RowSpec{Milliseconds, 1<<31 + 1}, false},
		{RowSpec{Legacy, 1<<31 + 1}, false},
		{RowSpec{Milliseconds, 0}, false},
		{RowSpec{Seconds, -1}, false},
		{RowSpec{Seconds, math.MaxInt64 / 100}, false},
	} {
		require.Equal(t, tc.ok, tc.spec.Validate() == nil, "%+v", tc.spec)
	}
}

func TestRowTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec RowSpec
		ts   int64
		row  int64
	}{
		{"EX1", msSpec, 1359788400000, 1358985600000},
		{"EX2", msSpec, 1700000000123, 1698278400000},
		{"zero", msSpec, 0, 0},
		{"W", msSpec, testW, testW},
		{"W-1", msSpec, testW - 1, 0},
		{"-1 gives -2", msSpec, -1, -2},
		{"-W", msSpec, -testW, -testW},
		{"-W/2", msSpec, -testW / 2, -testW},
		{"-(W-1)", msSpec, -(testW - 1), -2*testW + 2},
		{"-W-1", msSpec, -testW - 1, -testW - 2},
		{"MinInt64 (§12 item 12)", msSpec, math.MinInt64, -9223372035360000000},
		{"MaxInt64", msSpec, math.MaxInt64, math.MaxInt64 - math.MaxInt64%testW},
		{"legacy same as ms", legacySpec, 1359788400000, 1358985600000},
		{"SECONDS uses raw width as ms", secSpec, 1700000000123, 1699998451200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.row, tc.spec.RowTime(tc.ts))
		})
	}
}

func TestColumn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    RowSpec
		rowTime int64
		ts      int64
		col     uint32
		back    int64 // decoded timestamp
	}{
		{"EX1", msSpec, 1358985600000, 1359788400000, 0x2fd9c180, 1359788400000},
		{"EX2", msSpec, 1698278400000, 1700000000123, 0x669d887b, 1700000000123},
		{"EX3 ts -1", msSpec, -2, -1, 0x00000001, -1},
		{"ts -W", msSpec, -testW, -testW, 0x00000000, -testW},
		{"ts -W/2", msSpec, -testW, -testW / 2, 0x3612c600, -testW / 2},
		{"ts -W-1", msSpec, -testW - 2, -testW - 1, 0x00000001, -testW - 1},
		{"last ms of row", msSpec, 0, testW - 1, 0x6c258bff, testW - 1},
		{"LEGACY EX1", legacySpec, 1358985600000, 1359788400000, 0x5fb38300, 1359788400000},
		{"LEGACY offset 1814399999 wraps", legacySpec, 0, 1814399999, 0xd84b17fe, 1814399999},
		{"LEGACY offset 2^30", legacySpec, 0, 1 << 30, 0x80000000, 1 << 30},
		{"SECONDS quirk", secSpec, 1699998451200, 1700000000123, 0x0000060c, 1699999999200},
		{"SECONDS whole second", secSpec, 0, 5000, 5, 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.rowTime, tc.spec.RowTime(tc.ts), "row time")
			col := tc.spec.Column(tc.rowTime, tc.ts)
			require.Equal(t, fmt.Sprintf("%08x", tc.col), fmt.Sprintf("%08x", col))
			require.Equal(t, tc.back, tc.spec.Timestamp(tc.rowTime, col))
		})
	}
	// LEGACY d84b17fe is the int -666167298 (Appendix A).
	require.Equal(t, int32(-666167298), int32(legacySpec.Column(0, 1814399999)))
	// A legacy double (odd column) decodes to the same time as the long.
	require.Equal(t, int64(1814399999), legacySpec.Timestamp(0, 0xd84b17ff))
	// MILLISECONDS and SECONDS columns are signed int32 when decoded.
	require.Equal(t, int64(99), msSpec.Timestamp(100, 0xffffffff))
	require.Equal(t, int64(-900), secSpec.Timestamp(100, 0xffffffff))
}

func TestSliceBounds(t *testing.T) {
	for _, tc := range []struct {
		name       string
		spec       RowSpec
		rowTime    int64
		start, end int64
		lo, hi     uint32
	}{
		{"full row MILLISECONDS", msSpec, 0, -5, math.MaxInt64, 0, 0x6c258c01},
		{"full row LEGACY", legacySpec, 0, -5, math.MaxInt64, 0, 0xd84b1801},
		{"full row SECONDS", secSpec, 0, -5, math.MaxInt64, 0, 1814401},
		{"end exactly rowTime+W", msSpec, 0, 0, testW, 0, 0x6c258c01},
		{"inside the row", msSpec, 1358985600000, 1359788400000, 1359788400010, 0x2fd9c180, 0x2fd9c18b},
		{"single point", msSpec, 1358985600000, 1359788400000, 1359788400000, 0x2fd9c180, 0x2fd9c181},
		{"LEGACY inside: +1 admits only the even column", legacySpec, 0, 10, 20, 20, 41},
		{"SECONDS inside", secSpec, 1699998451200, 1699999999200, 1700000000123, 1548, 1549},
		{"negative row", msSpec, -testW - 2, -testW - 1, -3, 1, 0x6c258c00},
		{"negative row, end past it", msSpec, -testW - 2, -testW - 1, -1, 1, 0x6c258c01},
		{"row at MaxInt64 wraps like Java", msSpec, msSpec.RowTime(math.MaxInt64), math.MinInt64, math.MaxInt64, 0, 0x6c258c01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := tc.spec.SliceBounds(tc.rowTime, tc.start, tc.end)
			require.Equal(t, fmt.Sprintf("%08x %08x", tc.lo, tc.hi), fmt.Sprintf("%08x %08x", lo, hi))
		})
	}
}

func TestColumnBytes(t *testing.T) {
	for _, col := range []uint32{0, 1, 0x2fd9c180, 0xd84b17fe, math.MaxUint32} {
		b := AppendColumn([]byte("pre"), col)
		require.Equal(t, "pre", string(b[:3]))
		require.Len(t, b, 7)
		got, err := parseColumn(b[3:])
		require.NoError(t, err)
		require.Equal(t, col, got)
	}
	require.Equal(t, []byte{0x2f, 0xd9, 0xc1, 0x80}, AppendColumn(nil, 0x2fd9c180))
	for _, n := range []int{0, 3, 5} {
		_, err := parseColumn(make([]byte, n))
		require.Error(t, err)
	}
}
