package queryapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
)

// BenchmarkQueryRange measures a dashboard-like range query over the
// embedded store: sum by (job) (rate(...[5m])) over 200 counters of 6 hours
// at 15 s (288,000 samples), 360 steps.
//
//	go test -run '^$' -bench QueryRange -benchtime 20x ./queryapi/
func BenchmarkQueryRange(b *testing.B) {
	ctx := context.Background()
	store, err := kairosstore.Open(ctx, openEngine(b, "pebble"), kairosstore.Options{}, nil, nil)
	require.NoError(b, err)
	const series, samples = 200, 6 * 240
	app := store.NewAppender()
	for i := range series {
		ls := labels.FromStrings("__name__", "bench_requests_total", "job", fmt.Sprint("j", i%4), "instance", fmt.Sprint("i", i))
		for k := range samples {
			require.NoError(b, errOf(app.Append(0, ls, int64(k)*15_000, float64(k*(i+1)))))
		}
	}
	require.NoError(b, app.Commit(ctx))
	h := mount(New(store, Options{}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
	form := url.Values{"query": {"sum by (job) (rate(bench_requests_total[5m]))"}, "start": {"300"}, "end": {"21600"}, "step": {"60"}}
	b.ResetTimer()
	for b.Loop() {
		if got := get(b, h, http.MethodGet, "/api/v1/query_range", form); got.code != http.StatusOK {
			b.Fatal(got.body)
		}
	}
	b.ReportMetric(float64(series*samples)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
}
