package adapter

import (
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

	limitRejections *prometheus.CounterVec // handler

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
