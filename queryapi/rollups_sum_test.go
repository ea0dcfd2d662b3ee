package queryapi

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/rolluptest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
)

// TestRollupSumOneBucketIsRaw: over windows of one bucket, sum_over_time
// answers from rollups byte for byte what it answers raw, and
// avg_over_time within float rounding (PromQL divides the sum and its
// compensation apart, a rollup keeps their sum), hostile series (NaN,
// ±Inf, ±1e300, gaps) included, and a series whose hours each hold 1e300,
// ten 0.1 and -1e300: the compensated sum PromQL takes keeps the tenths,
// which a plain bucket sum loses (it answered 0 where raw answers 1).
func TestRollupSumOneBucketIsRaw(t *testing.T) {
	ctx := context.Background()
	eng := openEngine(t, "pebble")
	reg := prometheus.NewRegistry()
	st, err := kairosstore.Open(ctx, eng, kairosstore.Options{RowWidth: 7 * 24 * time.Hour}, nil, reg)
	require.NoError(t, err)
	const minute, hour, day = int64(60_000), int64(3_600_000), int64(86_400_000)
	t0 := 1_700_000_000_000 / day * day
	rnd := rand.New(rand.NewPCG(5, 50))
	var data []rolluptest.Series
	for i := range 3 {
		data = append(data, rolluptest.Hostile(rnd, "g", i, 300, t0))
	}
	ill := rolluptest.Series{Labels: labels.FromStrings("__name__", "g", "i", "ill")}
	for b := t0; b < t0+4*day; b += hour {
		for k := int64(1); k <= 12; k++ {
			v := 0.1
			switch k {
			case 1:
				v = 1e300
			case 12:
				v = -1e300
			}
			ill.T, ill.V = append(ill.T, b+k*minute), append(ill.V, v)
		}
	}
	data = append(data, ill)
	for _, s := range data {
		app := st.NewAppender()
		for i := range s.T {
			require.NoError(t, errOf(app.Append(0, s.Labels, s.T[i], s.V[i])))
		}
		require.NoError(t, app.Commit(ctx))
	}
	require.NoError(t, rolluptest.Write(ctx, st, eng, testResolutions, t0, t0+10*day, data))
	h := mount(New(st, Options{RollupResolutions: testResolutions}, nil, prometheus.NewRegistry()), http.NotFoundHandler())

	for _, c := range []struct {
		q    string
		step time.Duration
	}{
		{`sum_over_time(g[6h])`, 6 * time.Hour},
		{`avg_over_time(g[6h])`, 6 * time.Hour},
		{`sum_over_time(g[1h])`, time.Hour},
		{`avg_over_time(g[1h])`, time.Hour},
	} {
		query := func(src string) string {
			form := url.Values{"query": {c.q}, "start": {strconv.FormatInt(t0/1000, 10)},
				"end": {strconv.FormatInt((t0+10*day)/1000, 10)}, "step": {c.step.String()}, "max_source_resolution": {src}}
			ans := get(t, h, http.MethodPost, "/api/v1/query_range", form)
			require.Equal(t, http.StatusOK, ans.code, "%s: %s", c.q, ans.body)
			return ans.body
		}
		before := cellCounts(t, reg)["rollup"]
		got := query("")
		require.Greater(t, cellCounts(t, reg)["rollup"], before, "%s reads rollups", c.q)
		raw := query("0")
		if c.q[:3] == "sum" {
			require.Equal(t, raw, got, c.q)
		}
		want, have := rangeBody(t, raw), rangeBody(t, got)
		require.Equal(t, keys(want), keys(have), c.q)
		for ls, pts := range want {
			requireClose(t, c.q+" "+ls, pts, have[ls], 1e-15)
		}
		if c.step == time.Hour {
			pts := rangeBody(t, got)[`{i="ill"}`]
			require.NotEmpty(t, pts)
			for _, p := range pts {
				want := 1.0 // ten tenths
				if c.q[:3] == "avg" {
					want = 1.0 / 12
				}
				require.InDelta(t, want, p[1], 1e-12, "%s at %v", c.q, p[0])
			}
		}
	}
}
