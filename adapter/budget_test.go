package adapter

import (
	"testing"

	"github.com/golang/snappy"
	"github.com/stretchr/testify/require"
)

// TestByteBudget runs sequences of reservations against budgets: each step
// grows (or, with n 0 and release, gives back) one numbered reservation.
func TestByteBudget(t *testing.T) {
	type step struct {
		r       int   // which reservation
		n       int64 // grow to n bytes
		release bool
		ok      bool  // growTo's answer
		used    int64 // budget in use afterwards
	}
	for _, tc := range []struct {
		name  string
		limit int64
		steps []step
	}{
		{"fits", 100, []step{{r: 0, n: 60, ok: true, used: 60}, {r: 1, n: 40, ok: true, used: 100}}},
		{"one byte over is refused and takes nothing", 100, []step{
			{r: 0, n: 60, ok: true, used: 60}, {r: 1, n: 41, ok: false, used: 60},
		}},
		{"release makes room", 100, []step{
			{r: 0, n: 60, ok: true, used: 60}, {r: 1, n: 50, ok: false, used: 60},
			{r: 0, release: true, used: 0}, {r: 1, n: 50, ok: true, used: 50},
		}},
		{"growing keeps what was held when refused", 100, []step{
			{r: 0, n: 10, ok: true, used: 10}, {r: 1, n: 10, ok: true, used: 20},
			{r: 0, n: 95, ok: false, used: 20}, {r: 0, n: 90, ok: true, used: 100},
		}},
		{"growing never lowers", 100, []step{{r: 0, n: 50, ok: true, used: 50}, {r: 0, n: 20, ok: true, used: 50}}},
		{"larger than the budget alone is served", 100, []step{
			{r: 0, n: 250, ok: true, used: 250}, {r: 1, n: 1, ok: false, used: 250},
			{r: 0, release: true, used: 0}, {r: 1, n: 1, ok: true, used: 1},
		}},
		{"larger than the budget alone grows alone", 100, []step{
			{r: 0, n: 10, ok: true, used: 10}, {r: 0, n: 500, ok: true, used: 500},
		}},
		{"larger than the budget waits for an empty budget", 100, []step{
			{r: 0, n: 1, ok: true, used: 1}, {r: 1, n: 10, ok: true, used: 11},
			{r: 1, n: 500, ok: false, used: 11}, {r: 0, release: true, used: 10},
			{r: 1, n: 500, ok: true, used: 500},
		}},
		{"release twice is harmless", 100, []step{
			{r: 0, n: 30, ok: true, used: 30}, {r: 0, release: true, used: 0}, {r: 0, release: true, used: 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newByteBudget(tc.limit)
			rs := map[int]*reservation{}
			for i, s := range tc.steps {
				r := rs[s.r]
				if r == nil {
					r = &reservation{b: b}
					rs[s.r] = r
				}
				if s.release {
					r.release()
				} else {
					require.Equal(t, s.ok, r.growTo(s.n), "step %d", i)
				}
				require.Equal(t, s.used, b.inUse(), "step %d", i)
			}
		})
	}
}

func TestByteBudgetUnlimited(t *testing.T) {
	b := newByteBudget(0)
	require.Nil(t, b)
	r, ok := b.reserve(1 << 40)
	require.True(t, ok)
	r.release()
	require.Zero(t, b.inUse())
}

func TestWriteCost(t *testing.T) {
	body := snappy.Encode(nil, make([]byte, 1000))
	for _, tc := range []struct {
		name       string
		compressed []byte
		limit      int64
		want       int64
	}{
		{"declared size times the factor, plus the body", body, 1 << 20, int64(len(body)) + writeCostPerDecodedByte*1000},
		{"over the request limit: only the body (413 follows)", body, 999, int64(len(body))},
		{"corrupt header: only the body (400 follows)", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 1 << 20, 6},
		{"empty", nil, 1 << 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, writeCost(tc.compressed, tc.limit))
		})
	}
}
