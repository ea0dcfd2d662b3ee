package e2e

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// nativeTarget is a scrape target exposing native histograms through
// client_golang. promhttp negotiates the protobuf exposition format, the
// one that carries native histograms, when Prometheus asks for it.
//
// It serves two histogram vectors whose observations are a function of the
// scrape number: e2e_native_hist, with native buckets (factor 1.1, so
// schema 3), classic buckets too, and exemplars; and e2e_classic_hist with
// classic buckets only, which Prometheus can convert to a custom-bucket
// native histogram. Every tenth scrape replaces them with fresh ones: a
// counter reset.
type nativeTarget struct {
	mu      sync.Mutex
	scrapes int
	handler http.Handler
	native  *prometheus.HistogramVec
	classic *prometheus.HistogramVec
}

// nativePaths are the label values of the histograms: a KairosDB row-key
// separator, a space and UTF-8.
var nativePaths = []string{"/a:b=c", "/with space", "/ünïcode"}

func (s *nativeTarget) reset() {
	reg := prometheus.NewRegistry()
	s.native = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:                        "e2e_native_hist",
		Help:                        "A native histogram with classic buckets too.",
		Buckets:                     []float64{-0.5, 0, 0.25, 1, 2.5},
		NativeHistogramBucketFactor: 1.1,
	}, []string{"path"})
	s.classic = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "e2e_classic_hist",
		Help:    "A classic histogram.",
		Buckets: []float64{0.1, 0.5, 1, 2, 3},
	}, []string{"path"})
	reg.MustRegister(s.native, s.classic)
	s.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

func (s *nativeTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scrapes++
	n := s.scrapes
	if s.handler == nil || n%10 == 0 {
		s.reset()
	}
	for i, path := range nativePaths {
		native, classic := s.native.WithLabelValues(path), s.classic.WithLabelValues(path)
		// Values in [-1, 3.9], zero among them (the zero bucket), a
		// different number of them each scrape.
		for k := range n%5 + 2 + i {
			v := float64((n*7+k*13+i*3)%50)/10 - 1
			if k == 0 {
				native.(prometheus.ExemplarObserver).ObserveWithExemplar(v, prometheus.Labels{"trace_id": fmt.Sprintf("%032x", n*10+i)})
			} else {
				native.Observe(v)
			}
			classic.Observe(v + 1)
		}
	}
	s.handler.ServeHTTP(w, r)
}
