package main

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// shape is the workload write and direct both send. Request n carries the
// series of chunk n mod requestsPerRound, each with samplesPerSeries
// consecutive samples; every round moves all series forward by
// samplesPerSeries scrape intervals, so every sample is a new cell.
type shape struct {
	series, labels, metrics            int
	samplesPerSeries, seriesPerRequest int
	concurrency, requests              int
	prebuiltOnly                       bool // --requests was 0: running out of requests ends the run early
	duration                           time.Duration
	intervalMs, startMs                int64
}

func (s shape) validate() error {
	switch {
	case s.series < 1, s.samplesPerSeries < 1, s.seriesPerRequest < 1, s.concurrency < 1, s.metrics < 1:
		return errors.New("--series, --samples-per-series, --series-per-request, --concurrency and --metrics must be positive")
	case s.labels < 3:
		return errors.New("--labels must be at least 3 (__name__, instance, job)")
	case s.requests < 1:
		return errors.New("--requests or --prebuilt must be positive")
	case s.intervalMs < 1:
		return errors.New("--interval must be at least 1ms")
	case s.series/s.metrics >= 1<<24:
		return errors.New("more than 16M series per metric name: instance addresses would repeat")
	}
	return nil
}

func (s shape) requestsPerRound() int {
	return (s.series + s.seriesPerRequest - 1) / s.seriesPerRequest
}

// span returns the round and the series [lo, hi) of request n.
func (s shape) span(n int) (round, lo, hi int) {
	rpr := s.requestsPerRound()
	round = n / rpr
	lo = (n % rpr) * s.seriesPerRequest
	return round, lo, min(lo+s.seriesPerRequest, s.series)
}

// timestamp of sample k of a series in round.
func (s shape) timestamp(round, k int) int64 {
	return s.startMs + int64(round*s.samplesPerSeries+k)*s.intervalMs
}

// value of series i at step: a counter that grows by a varying amount, so
// XOR chunks compress it like a real counter, not like a constant.
func value(i, step int) float64 {
	return float64(i%1000) + float64(step)*1.5 + float64(step%7)*0.125
}

// fillers are node_exporter-like labels, used in this order after __name__,
// instance and job; beyond them come label_N.
var fillers = []struct {
	name   string
	values []string
}{
	{"cpu", nil}, // the series number mod 64
	{"mode", []string{"idle", "user", "system", "iowait", "irq", "softirq", "steal", "nice"}},
	{"env", []string{"prod", "staging"}},
	{"region", []string{"eu-west-1", "us-east-1", "ap-southeast-2"}},
	{"datacenter", []string{"dc1", "dc2", "dc3", "dc4"}},
	{"rack", []string{"r01", "r02", "r03", "r04", "r05", "r06", "r07", "r08"}},
	{"team", []string{"infra", "payments", "search"}},
	{"os", []string{"linux"}},
	{"kernel", []string{"6.8.0-45-generic", "6.1.0-26-amd64"}},
	{"device", []string{"sda", "nvme0n1", "eth0"}},
}

// seriesLabels returns the labels of series i, sorted by name as Prometheus
// sends them. The metric is load_metric_(i mod metrics); instance encodes
// i / metrics, which makes the label set unique.
func (s shape) seriesLabels(i int) labels.Labels {
	j := i / s.metrics
	kv := []string{
		model.MetricNameLabel, "load_metric_" + strconv.Itoa(i%s.metrics),
		"instance", fmt.Sprintf("10.%d.%d.%d:9100", j>>16&255, j>>8&255, j&255),
		"job", "node",
	}
	for f := 0; f < s.labels-3; f++ {
		switch {
		case f >= len(fillers):
			kv = append(kv, "label_"+strconv.Itoa(f), "value_"+strconv.Itoa(j%10))
		case fillers[f].values == nil:
			kv = append(kv, fillers[f].name, strconv.Itoa(j%64))
		default:
			vs := fillers[f].values
			kv = append(kv, fillers[f].name, vs[j%len(vs)])
		}
	}
	return labels.FromStrings(kv...)
}

func (s shape) allLabels() []labels.Labels {
	ls := make([]labels.Labels, s.series)
	for i := range ls {
		ls[i] = s.seriesLabels(i)
	}
	return ls
}

// buildV1 marshals request n as a snappy-compressed prompb.WriteRequest.
func (s shape) buildV1(ls []labels.Labels, n int) ([]byte, int) {
	round, lo, hi := s.span(n)
	req := prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, 0, hi-lo)}
	for i := lo; i < hi; i++ {
		ts := prompb.TimeSeries{Labels: prompb.FromLabels(ls[i], nil), Samples: make([]prompb.Sample, s.samplesPerSeries)}
		for k := range ts.Samples {
			ts.Samples[k] = prompb.Sample{Timestamp: s.timestamp(round, k), Value: value(i, round*s.samplesPerSeries+k)}
		}
		req.Timeseries = append(req.Timeseries, ts)
	}
	raw, err := req.Marshal()
	if err != nil {
		panic(err) // only on a programming error: the message is built here
	}
	return snappy.Encode(nil, raw), (hi - lo) * s.samplesPerSeries
}

// buildV2 marshals request n as a snappy-compressed remote write 2.0
// request, with the per-series metadata Prometheus sends along.
func (s shape) buildV2(ls []labels.Labels, n int) ([]byte, int) {
	round, lo, hi := s.span(n)
	st := writev2.NewSymbolTable()
	help := st.Symbolize("A load test gauge.")
	req := writev2.Request{Timeseries: make([]writev2.TimeSeries, 0, hi-lo)}
	for i := lo; i < hi; i++ {
		ts := writev2.TimeSeries{
			LabelsRefs: st.SymbolizeLabels(ls[i], nil),
			Samples:    make([]writev2.Sample, s.samplesPerSeries),
			Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: help},
		}
		for k := range ts.Samples {
			ts.Samples[k] = writev2.Sample{Timestamp: s.timestamp(round, k), Value: value(i, round*s.samplesPerSeries+k)}
		}
		req.Timeseries = append(req.Timeseries, ts)
	}
	req.Symbols = st.Symbols()
	raw, err := req.Marshal()
	if err != nil {
		panic(err)
	}
	return snappy.Encode(nil, raw), (hi - lo) * s.samplesPerSeries
}

// parallel runs fn(0..n-1) on all cores. Requests are built before the clock
// starts, so building them costs the measurement nothing.
func parallel(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}
