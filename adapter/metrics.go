package adapter

import (
	"cmp"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

const namespace = "kairos_adapter"

// Failure reasons of written items; bounded on purpose, series labels never
// become metric labels.
const (
	reasonInvalid = "invalid" // rejected by validation, answered 4xx
	reasonBackend = "backend" // commit failed or timed out, answered 5xx
)

// itemCounters counts one kind of written item (samples, histograms,
// exemplars) by protocol.
type itemCounters struct {
	received *prometheus.CounterVec // protocol
	written  *prometheus.CounterVec // protocol
	failed   *prometheus.CounterVec // protocol, reason
}

func newItemCounters(f promauto.Factory, item string) itemCounters {
	return itemCounters{
		received: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "received_" + item + "_total",
			Help:      "Remote-write " + item + " received in decoded requests.",
		}, []string{"protocol"}),
		written: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "written_" + item + "_total",
			Help:      "Remote-write " + item + " durably stored (commit succeeded).",
		}, []string{"protocol"}),
		failed: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "failed_" + item + "_total",
			Help:      "Remote-write " + item + " not stored, by reason (invalid: 4xx, backend: 5xx).",
		}, []string{"protocol", "reason"}),
	}
}

// metrics are the adapter's own metrics; one set per New call, registered
// on the Registerer passed in (nil registers nothing, handy in tests).
type metrics struct {
	samples, histograms, exemplars itemCounters

	duration        *prometheus.HistogramVec // handler, code
	inFlight        *prometheus.GaugeVec     // handler
	limitRejections *prometheus.CounterVec   // handler

	readQueries  *prometheus.CounterVec // response_type, code
	readSeries   *prometheus.CounterVec // response_type
	readSamples  *prometheus.CounterVec // response_type
	abortedReads prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		samples:    newItemCounters(f, "samples"),
		histograms: newItemCounters(f, "histograms"),
		exemplars:  newItemCounters(f, "exemplars"),
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
		limitRejections: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "concurrency_limit_rejections_total",
			Help:      "Requests answered 503 because the handler's concurrency limit was reached.",
		}, []string{"handler"}),
		readQueries: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "read_queries_total",
			Help:      "Remote-read queries by negotiated response type and HTTP status code of the request.",
		}, []string{"response_type", "code"}),
		readSeries: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "read_series_returned_total",
			Help:      "Series returned by remote read (a series split over several frames counts once).",
		}, []string{"response_type"}),
		readSamples: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "read_samples_returned_total",
			Help:      "Samples (floats and histograms) returned by remote read.",
		}, []string{"response_type"}),
		abortedReads: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "read_streams_aborted_total",
			Help:      "Streamed remote reads cut after the first byte because of an error or a limit.",
		}),
	}
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

// instrument wraps a handler with the in-flight gauge and the duration
// histogram. It is hand-written rather than promhttp's because a streamed
// read that aborts with panic(http.ErrAbortHandler) must still be observed
// (as code "aborted") and must not be recovered here.
func (m *metrics) instrument(name string, next http.Handler) http.Handler {
	inFlight := m.inFlight.WithLabelValues(name)
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
			m.duration.WithLabelValues(name, code).Observe(time.Since(start).Seconds())
		}()
		next.ServeHTTP(rec, r)
		completed = true
	})
}
