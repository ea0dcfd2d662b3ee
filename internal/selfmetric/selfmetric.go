// Package selfmetric reads back the values of a collector its owner
// registered, so that a part reports its own counters in its status
// without a registry lookup by metric name.
package selfmetric

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
)

// Each calls fn with each series of c: the value of its first label ("" if
// it has none) and its counter or gauge value. Unlike WithLabelValues it
// adds no series.
func Each(c prometheus.Collector, logger *slog.Logger, fn func(label string, v float64)) {
	ch := make(chan prometheus.Metric)
	go func() {
		var err error // logged by Into; the caller sees the series read before
		defer close(ch)
		defer recovered.Into(&err, logger, "reading a collector's own values")
		c.Collect(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		label := ""
		if ls := d.GetLabel(); len(ls) > 0 {
			label = ls[0].GetValue()
		}
		switch {
		case d.Counter != nil:
			fn(label, d.GetCounter().GetValue())
		case d.Gauge != nil:
			fn(label, d.GetGauge().GetValue())
		}
	}
}

// Sum is the sum of c's counter and gauge values.
func Sum(c prometheus.Collector, logger *slog.Logger) float64 {
	var sum float64
	Each(c, logger, func(_ string, v float64) { sum += v })
	return sum
}
