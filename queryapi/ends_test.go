package queryapi

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
)

// TestEndsDoesNotWrap: whether the windows end on a bucket end is decided
// on start-off as a number, not as int64's wrapped difference, which at
// Prometheus's bounds and offsets of centuries has another remainder.
func TestEndsDoesNotWrap(t *testing.T) {
	rs := []int64{300_000, 3_600_000, 21_600_000, 86_400_000, 7}
	starts := []int64{timeparam.Min.UnixMilli(), timeparam.Max.UnixMilli(), math.MinInt64, math.MaxInt64, 0, -1}
	y := int64(365 * 24 * 3600 * 1000)
	offs := []int64{0, 1, -1, 2000 * y, -2000 * y, 292 * y, -292 * y, math.MinInt64, math.MaxInt64}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		starts = append(starts, int64(rng.Uint64()))
		offs = append(offs, int64(rng.Uint64()))
	}
	wrong := 0
	for _, r := range rs {
		for _, start := range starts {
			for _, off := range offs {
				p := &planner{start: start, step: r}
				d := new(big.Int).Sub(big.NewInt(start), big.NewInt(off))
				want := new(big.Int).Rem(d, big.NewInt(r)).Sign() == 0
				if got := p.ends(r, off); got != want {
					if wrong++; wrong <= 5 {
						t.Errorf("ends(r=%d) at start %d, offset %d: %v, want %v", r, start, off, got, want)
					}
				}
			}
		}
	}
	if wrong > 5 {
		t.Errorf("... %d wrong in all", wrong)
	}
}
