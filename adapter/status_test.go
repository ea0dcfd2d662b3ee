package adapter

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestStatusReadsOwnCounters: the adapter's status and the route table's
// requests in flight come from their own collectors, registered or not,
// and agree with what /metrics says.
func TestStatusReadsOwnCounters(t *testing.T) {
	for _, reg := range []*prometheus.Registry{prometheus.NewRegistry(), nil} {
		s := newFakeStore()
		s.commitGate = make(chan struct{})
		var r prometheus.Registerer
		if reg != nil {
			r = reg
		}
		rt := NewRoutes(r)
		a := NewHandlers(s, Options{MaxConcurrentWrites: 1, SampleLimit: withFakeBudget}, nil, r)
		a.Register(rt.Handle)
		require.Empty(t, a.Status().Rejections, "no series before a rejection")

		var wg sync.WaitGroup
		wg.Go(func() { writeV1Req(rt, v1Request()) })
		waitAtGate(t, s) // holds the one write slot
		require.Equal(t, 1.0, rt.InFlight())
		require.Equal(t, http.StatusServiceUnavailable, writeV1Req(rt, v1Request()).Code)
		require.Equal(t, map[string]float64{"write": 1}, a.Status().Rejections)
		if reg != nil {
			require.Equal(t, 1.0, metricValue(t, reg, "kairos_adapter_concurrency_limit_rejections_total", "handler", "write"))
		}
		close(s.commitGate)
		wg.Wait()
		require.Zero(t, rt.InFlight())

		// Uncounted routes, the profiler's, stay out of the requests in
		// flight and the metrics.
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/cmdline", nil))
		require.Equal(t, http.StatusOK, rec.Code)
	}
}
