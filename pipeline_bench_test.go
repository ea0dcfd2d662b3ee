package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/adapter"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// discardEngine is a real engine whose Write does nothing, so the benchmark
// below measures the adapter's own work up to the engine's door: snappy,
// protobuf, label checks, translation, and the KairosDB row keys, columns
// and values of every cell and index row. What the Cassandra driver then
// does with the batch is measured against the raw-driver baseline by
// cmd/kairosload instead.
type discardEngine struct {
	engine.Engine
	cells int
}

func (e *discardEngine) Write(_ context.Context, b *engine.Batch) error {
	e.cells += len(b.Cells)
	return nil
}

// pipelineLabels is series i of a node_exporter-like scrape with 10 labels,
// sorted by name as Prometheus sends them.
func pipelineLabels(i int) labels.Labels {
	modes := []string{"idle", "user", "system", "iowait", "irq", "softirq", "steal", "nice"}
	return labels.FromStrings(
		"__name__", "node_metric_"+strconv.Itoa(i%100),
		"cpu", strconv.Itoa(i/100%64),
		"datacenter", "dc"+strconv.Itoa(i%4),
		"env", []string{"prod", "staging"}[i%2],
		"instance", fmt.Sprintf("10.0.%d.%d:9100", i/100/256%256, i/100%256),
		"job", "node",
		"mode", modes[i%len(modes)],
		"rack", "r0"+strconv.Itoa(i%8),
		"region", []string{"eu-west-1", "us-east-1", "ap-southeast-2"}[i%3],
		"team", "infra",
	)
}

// BenchmarkPipeline posts Prometheus-shaped remote-write requests (2,000
// series × 1 sample each, out of 20,000 series seen again every round, 15 s
// apart) to the real handler over the real kairosstore.Store, and reports
// the cost per sample of everything the adapter does before the engine
// writes: the figure issue #8 bounds at 300 ns and 1 allocation per sample.
func BenchmarkPipeline(b *testing.B) {
	const (
		nSeries   = 20_000
		perReq    = 2_000
		rounds    = 4
		interval  = 15_000
		reqRounds = nSeries / perReq
	)
	// Samples of now, as Prometheus sends them: the row window is the
	// current one.
	startMs := time.Now().UnixMilli()
	series := make([]labels.Labels, nSeries)
	for i := range series {
		series[i] = pipelineLabels(i)
	}
	for _, proto := range []string{"1.0", "2.0"} {
		var bodies [][]byte
		for r := range rounds {
			for q := range reqRounds {
				var raw []byte
				var err error
				ts := startMs + int64(r)*interval
				if proto == "1.0" {
					req := prompb.WriteRequest{}
					for i := q * perReq; i < (q+1)*perReq; i++ {
						req.Timeseries = append(req.Timeseries, prompb.TimeSeries{
							Labels:  prompb.FromLabels(series[i], nil),
							Samples: []prompb.Sample{{Timestamp: ts, Value: float64(i) + float64(r)*0.5}},
						})
					}
					raw, err = req.Marshal()
				} else {
					// With the metadata Prometheus sends on every 2.0 series.
					st := writev2.NewSymbolTable()
					help := st.Symbolize("Node metric.")
					req := writev2.Request{}
					for i := q * perReq; i < (q+1)*perReq; i++ {
						req.Timeseries = append(req.Timeseries, writev2.TimeSeries{
							LabelsRefs: st.SymbolizeLabels(series[i], nil),
							Samples:    []writev2.Sample{{Timestamp: ts, Value: float64(i) + float64(r)*0.5}},
							Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: help},
						})
					}
					req.Symbols = st.Symbols()
					raw, err = req.Marshal()
				}
				require.NoError(b, err)
				bodies = append(bodies, snappy.Encode(nil, raw))
			}
		}
		contentType := "application/x-protobuf"
		if proto == "2.0" {
			contentType += ";proto=io.prometheus.write.v2.Request"
		}
		b.Run("protocol="+proto, func(b *testing.B) {
			pe, err := pebblekv.Open(b.TempDir(), pebblekv.DefaultOptions(), nil)
			require.NoError(b, err)
			b.Cleanup(func() { pe.Close() })
			eng := &discardEngine{Engine: pe}
			ctx := context.Background()
			s, err := kairosstore.Open(ctx, eng, kairosstore.Options{IndexCacheSize: 4 * nSeries}, nil, nil)
			require.NoError(b, err)
			var ls lazyStore
			ls.set(s)
			h := adapter.New(&ls, adapter.Options{}, nil, nil)
			post := writePoster(b, h, contentType)
			// One round first, so the index rows are cached as in a
			// long-running adapter.
			for _, body := range bodies[:reqRounds] {
				post(body)
			}
			eng.cells = 0
			n := measureWrites(b, post, bodies, perReq)
			if eng.cells != n*perReq {
				b.Fatalf("engine got %d cells for %d samples", eng.cells, n*perReq)
			}
			b.ReportMetric(allocsPerSample(b, post, bodies, perReq), "allocs/sample")
		})
	}
}

// processCPU is the user and system CPU time of this process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// allocsPerSample measures allocations per sample over one pass of bodies.
func allocsPerSample(b *testing.B, post func([]byte), bodies [][]byte, perReq int) float64 {
	b.Helper()
	i := 0
	a := testing.AllocsPerRun(len(bodies), func() {
		post(bodies[i%len(bodies)])
		i++
	})
	return a / float64(perReq)
}

type bodyReader struct {
	b   []byte
	off int
}

func (r *bodyReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

func (r *bodyReader) Close() error { return nil }

type nullResponse struct {
	h    http.Header
	code int
}

func (w *nullResponse) Header() http.Header         { return w.h }
func (w *nullResponse) WriteHeader(code int)        { w.code = code }
func (w *nullResponse) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkIngestKnown is the known-series load of issue #31 in one
// process: 100,000 series of 10 labels, already indexed, in remote-write 1.0
// requests of 2,000 samples, through the real handler and store into the
// embedded engine with its default options (WAL synced). It reports the CPU
// per sample of the whole write, the engine's flushes and compactions that
// run during the loop included, and the allocations per sample.
func BenchmarkIngestKnown(b *testing.B) { ingestKnown(b, kairosstore.Options{}) }

// BenchmarkIngestKnownOnChange is BenchmarkIngestKnown with a store that
// reports its changes, as it does to the rollup job when rollups are on
// (the default): every sample then widens its metric's change
// (Appender.noteTime).
func BenchmarkIngestKnownOnChange(b *testing.B) {
	ingestKnown(b, kairosstore.Options{OnChange: func([]kairosstore.Change) {}})
}

func ingestKnown(b *testing.B, opts kairosstore.Options) {
	const (
		nSeries  = 100_000
		perReq   = 2_000
		rounds   = 6
		interval = 15_000
	)
	startMs := time.Now().Add(-time.Hour).UnixMilli()
	series := make([]prompb.TimeSeries, perReq)
	var bodies [][]byte
	for r := range rounds + 1 {
		for q := range nSeries / perReq {
			for j := range series {
				i := q*perReq + j
				series[j] = prompb.TimeSeries{
					Labels:  prompb.FromLabels(pipelineLabels(i), series[j].Labels[:0]),
					Samples: []prompb.Sample{{Timestamp: startMs + int64(r)*interval, Value: float64(i) + float64(r)*0.25}},
				}
			}
			raw, err := (&prompb.WriteRequest{Timeseries: series}).Marshal()
			require.NoError(b, err)
			bodies = append(bodies, snappy.Encode(nil, raw))
		}
	}
	pe, err := pebblekv.Open(b.TempDir(), pebblekv.DefaultOptions(), nil)
	require.NoError(b, err)
	b.Cleanup(func() { pe.Close() })
	ctx := context.Background()
	s, err := kairosstore.Open(ctx, pe, opts, nil, nil)
	require.NoError(b, err)
	var ls lazyStore
	ls.set(s)
	h := adapter.New(&ls, adapter.Options{}, nil, nil)
	post := writePoster(b, h, "application/x-protobuf")
	// The first round makes every series known.
	first := nSeries / perReq
	for _, body := range bodies[:first] {
		post(body)
	}
	measureWrites(b, post, bodies[first:], perReq)
}

// writePoster is a function that sends one snappy-compressed remote-write
// body of contentType to h and fails b unless h answers 204.
func writePoster(b *testing.B, h http.Handler, contentType string) func([]byte) {
	return func(body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/write", nil)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Content-Encoding", "snappy")
		req.Body = &bodyReader{b: body}
		req.ContentLength = int64(len(body))
		w := &nullResponse{h: http.Header{}}
		h.ServeHTTP(w, req)
		if w.code != http.StatusNoContent {
			b.Fatalf("status %d", w.code)
		}
	}
}

// measureWrites posts bodies in turn for b's loop, reports the wall and
// CPU time per sample, and returns how many bodies it posted. CPU time,
// garbage collection included: on a shared machine it moves less than
// wall time when other jobs take the cores.
func measureWrites(b *testing.B, post func([]byte), bodies [][]byte, perReq int) int {
	b.ReportAllocs()
	n := 0
	cpu0 := processCPU(b)
	for b.Loop() {
		post(bodies[n%len(bodies)])
		n++
	}
	cpu := processCPU(b) - cpu0
	samples := float64(n * perReq)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/samples, "ns/sample")
	b.ReportMetric(float64(cpu.Nanoseconds())/samples, "cpu-ns/sample")
	return n
}
