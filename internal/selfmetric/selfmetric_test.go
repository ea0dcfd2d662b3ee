package selfmetric

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestEach reads a vector's series by label without adding one, and a
// collector that panics ends the read instead of the process.
func TestEach(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "h"}, []string{"l"})
	vec.WithLabelValues("a").Add(2)
	vec.WithLabelValues("b").Add(3)
	got := map[string]float64{}
	Each(vec, nil, func(l string, v float64) { got[l] += v })
	require.Equal(t, map[string]float64{"a": 2, "b": 3}, got)
	require.Equal(t, 5.0, Sum(vec, nil))

	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "h"})
	g.Set(-1.5)
	require.Equal(t, -1.5, Sum(g, nil))

	require.Zero(t, Sum(panicking{}, nil))
}

type panicking struct{}

func (panicking) Describe(chan<- *prometheus.Desc) {}
func (panicking) Collect(chan<- prometheus.Metric) { panic("broken collector") }
