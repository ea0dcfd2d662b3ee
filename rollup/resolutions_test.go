package rollup_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/rollup"
)

var (
	m5 = rollup.Resolution(5 * time.Minute)
	h1 = rollup.Resolution(time.Hour)
)

func TestParseResolutions(t *testing.T) {
	rs, err := rollup.ParseResolutions("1h, 5m,5m")
	require.NoError(t, err)
	require.Equal(t, []rollup.Resolution{m5, h1}, rs)
	rs, err = rollup.ParseResolutions("")
	require.NoError(t, err)
	require.Empty(t, rs)
	_, err = rollup.ParseResolutions("45m,1h")
	require.ErrorContains(t, err, "does not divide the largest")
	_, err = rollup.ParseResolutions("7m")
	require.ErrorContains(t, err, "divides 24h")
	_, err = rollup.ParseResolutions("5x")
	require.Error(t, err)
}

func TestParseRetention(t *testing.T) {
	ret, err := rollup.ParseRetention("5m=8760h, 1h=0")
	require.NoError(t, err)
	require.Equal(t, map[rollup.Resolution]time.Duration{m5: 8760 * time.Hour, h1: 0}, ret)
	for _, bad := range []string{"5m", "5m=x", "5m=-1h", "7m=1h", "5m=1500ms"} {
		_, err := rollup.ParseRetention(bad)
		require.Error(t, err, bad)
	}
}

// TestComputeLayoutExample is the example of docs/kairosdb-layout.md §13.2.
func TestComputeLayoutExample(t *testing.T) {
	m := int64(60_000)
	got := rollup.Compute(m5, 0, 10*m, []int64{1 * m, 4 * m, 6 * m}, []float64{1, 3, 2})
	require.Equal(t, []rollup.Point{
		{End: 5 * m, Count: 2, Sum: 4, Min: 1, Max: 3, Counter: 2},
		{End: 10 * m, Count: 1, Sum: 2, Min: 2, Max: 2, Counter: 2},
	}, got)
}
