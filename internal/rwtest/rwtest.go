// Package rwtest holds the remote-write requests that the tests of adapter
// and remotewrite both send: one of each item kind, over both protocols.
package rwtest

import (
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// Histogram is integer histogram i of a series: valid, with both kinds of
// buckets.
func Histogram(i int64) *histogram.Histogram {
	return &histogram.Histogram{
		Count: 12 + uint64(i*9), ZeroCount: 2 + uint64(i), ZeroThreshold: 0.001, Sum: 18.4 * float64(i+1), Schema: 1,
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}, {Offset: 1, Length: 2}}, PositiveBuckets: []int64{i + 1, 1, -1, 0},
		NegativeSpans: []histogram.Span{{Offset: 0, Length: 2}, {Offset: 1, Length: 2}}, NegativeBuckets: []int64{i + 1, 1, -1, 0},
	}
}

// V1Series is a 1.0 series of the label pairs lbls, in the order given.
func V1Series(lbls []string, samples ...prompb.Sample) prompb.TimeSeries {
	ts := prompb.TimeSeries{Samples: samples}
	for i := 0; i < len(lbls); i += 2 {
		ts.Labels = append(ts.Labels, prompb.Label{Name: lbls[i], Value: lbls[i+1]})
	}
	return ts
}

// V1Request is a 1.0 request with floats, int and float histograms, an
// exemplar and metadata.
func V1Request() *prompb.WriteRequest {
	withExemplar := V1Series([]string{"__name__", "http_requests_total", "job", "api"},
		prompb.Sample{Timestamp: 1000, Value: 1}, prompb.Sample{Timestamp: 2000, Value: 2})
	withExemplar.Exemplars = []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: "abc"}}, Value: 1, Timestamp: 1500}}
	hist := V1Series([]string{"__name__", "latency_seconds", "job", "api"})
	hist.Histograms = []prompb.Histogram{
		prompb.FromIntHistogram(1000, Histogram(1)),
		prompb.FromFloatHistogram(2000, Histogram(2).ToFloat(nil)),
	}
	return &prompb.WriteRequest{
		Timeseries: []prompb.TimeSeries{withExemplar, hist},
		Metadata:   []prompb.MetricMetadata{{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "http_requests_total", Help: "Requests."}},
	}
}

// V2Request is the 2.0 equivalent of V1Request.
func V2Request() *writev2.Request {
	st := writev2.NewSymbolTable()
	refs := func(lbls ...string) []uint32 { return st.SymbolizeLabels(labels.FromStrings(lbls...), nil) }
	req := &writev2.Request{Timeseries: []writev2.TimeSeries{{
		LabelsRefs: refs("__name__", "http_requests_total", "job", "api"),
		Samples:    []writev2.Sample{{Timestamp: 1000, Value: 1}, {Timestamp: 2000, Value: 2}},
		Exemplars:  []writev2.Exemplar{{LabelsRefs: refs("trace_id", "abc"), Value: 1, Timestamp: 1500}},
		Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_COUNTER, HelpRef: st.Symbolize("Requests.")},
	}, {
		LabelsRefs: refs("__name__", "latency_seconds", "job", "api"),
		Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, 1000, Histogram(1)), writev2.FromFloatHistogram(0, 2000, Histogram(2).ToFloat(nil))},
		Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_HISTOGRAM, HelpRef: st.Symbolize("Latency."), UnitRef: st.Symbolize("seconds")},
	}}}
	req.Symbols = st.Symbols()
	return req
}
