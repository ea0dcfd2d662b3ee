package remotewrite

import (
	"math"

	"github.com/prometheus/prometheus/prompb"

	"github.com/kairos-remote/kairos-adapter/internal/rwtest"
)

type marshaler interface{ Marshal() ([]byte, error) }

// writeWindow is the adapter's window size.
const writeWindow = 4096

var (
	v1Series  = rwtest.V1Series
	v1Request = rwtest.V1Request
	v2Request = rwtest.V2Request
)

// benchV1Request is Prometheus-shaped: many series of one sample.
func benchV1Request() *prompb.WriteRequest {
	req := &prompb.WriteRequest{}
	for i := range 50 {
		req.Timeseries = append(req.Timeseries, v1Series([]string{"__name__", "node_cpu_seconds_total", "cpu", string(rune('a' + i%26)), "job", "node"},
			prompb.Sample{Timestamp: 1_700_000_000_000 + int64(i), Value: float64(i) * 1.37}))
	}
	return req
}

func allQuery() *prompb.Query {
	return &prompb.Query{StartTimestampMs: 0, EndTimestampMs: math.MaxInt64, Matchers: []*prompb.LabelMatcher{{Type: prompb.LabelMatcher_RE, Name: "__name__", Value: ".+"}}}
}
