package adapter

import (
	"cmp"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/kairos-remote/kairos-adapter/internal/selfmetric"
)

// Routes is the process's one route table: every part (the adapter, the
// query API, the web UI) registers its routes with Handle, and each route
// is served under the request metrics by its name.
//
// Routing uses the standard library's http.ServeMux: since Go 1.22 its
// patterns match methods ("POST /api/v1/write") and answer 405 with an Allow
// header for a known path with a wrong method, and 404 for unknown paths,
// which is all we need without a router dependency.
type Routes struct {
	mux      *http.ServeMux
	duration *prometheus.HistogramVec // handler, code
	inFlight *prometheus.GaugeVec     // handler
}

// NewRoutes returns an empty route table whose request metrics are
// registered on reg (nil registers nothing).
func NewRoutes(reg prometheus.Registerer) *Routes {
	f := promauto.With(reg)
	return &Routes{
		mux: http.NewServeMux(),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace:                       namespace,
			Name:                            "request_duration_seconds",
			Help:                            "Duration of HTTP requests by handler and status code (code \"aborted\" for streams cut after the first byte).",
			Buckets:                         []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}, []string{"handler", "code"}),
		inFlight: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "inflight_requests",
			Help:      "HTTP requests being served, by handler.",
		}, []string{"handler"}),
	}
}

// Handle serves h at pattern (http.ServeMux's), counted under name in the
// request metrics; a route without a name is served uncounted.
func (rt *Routes) Handle(pattern, name string, h http.Handler) {
	if name != "" {
		h = rt.instrument(name, h)
	}
	rt.mux.Handle(pattern, h)
}

func (rt *Routes) ServeHTTP(w http.ResponseWriter, r *http.Request) { rt.mux.ServeHTTP(w, r) }

// InFlight is the requests being served, all routes together.
func (rt *Routes) InFlight() float64 { return selfmetric.Sum(rt.inFlight, nil) }

// instrument wraps a handler with the in-flight gauge and the duration
// histogram. It is hand-written rather than promhttp's because a streamed
// read that aborts with panic(http.ErrAbortHandler) must still be observed
// (as code "aborted") and must not be recovered here.
func (rt *Routes) instrument(name string, next http.Handler) http.Handler {
	inFlight := rt.inFlight.WithLabelValues(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Inc()
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		completed := false
		defer func() {
			inFlight.Dec()
			code := "aborted"
			if completed {
				code = strconv.Itoa(cmp.Or(rec.code, http.StatusOK))
			}
			rt.duration.WithLabelValues(name, code).Observe(time.Since(start).Seconds())
		}()
		next.ServeHTTP(rec, r)
		completed = true
	})
}

// statusRecorder remembers the status code a handler answered with. It
// exposes the wrapped writer through Unwrap so http.ResponseController can
// still flush streamed responses.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush lets the streamed read flush through the recorder; writers that
// cannot flush are left alone, as buffering only delays the frames.
func (r *statusRecorder) Flush() {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
