package queryapi

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
)

// discardWriter is a ResponseWriter that keeps nothing, so that the
// benchmark measures encoding and compression, not a recorder's buffer.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// yearPanel is the answer of a year panel at Grafana's 6h step: 20
// series of 1,461 points.
func yearPanel() promql.Matrix {
	m := make(promql.Matrix, 20)
	for i := range m {
		pts := make([]promql.FPoint, 1461)
		for j := range pts {
			pts[j] = promql.FPoint{T: 1764115200000 + int64(j)*21600000, F: float64(i*1000+j) * 1.37}
		}
		m[i] = promql.Series{Metric: labels.FromStrings("__name__", "load_metric_0", "instance", "host-"+strconv.Itoa(i), "job", "job-"+strconv.Itoa(i%4)), Floats: pts}
	}
	return m
}

// BenchmarkRespond writes yearPanel as JSON, gzipped as Grafana asks.
func BenchmarkRespond(b *testing.B) {
	m := yearPanel()
	r := httptest.NewRequest(http.MethodGet, "/api/v1/query_range", nil)
	r.Header.Set("Accept-Encoding", "gzip, deflate")
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := NewCompressor()
	b.ReportAllocs()
	for b.Loop() {
		data, err := encodeResult(m, nil)
		if err != nil {
			b.Fatal(err)
		}
		c.Respond(&discardWriter{h: http.Header{}}, r, logger, RangeAnswer{Data: data})
	}
}

// TestRespondDoesNotParseItsAnswer: the envelope is written around the
// encoded data, not parsed again (the standard library's configuration of
// jsoniter validates a json.RawMessage by decoding it into maps and
// slices: 263,000 allocations for this answer), and the answer is the
// same bytes gzipped or not.
func TestRespondDoesNotParseItsAnswer(t *testing.T) {
	data, err := encodeResult(yearPanel(), nil)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := NewCompressor()
	plain := httptest.NewRequest(http.MethodGet, "/api/v1/query_range", nil)
	allocs := testing.AllocsPerRun(3, func() {
		c.Respond(&discardWriter{h: http.Header{}}, plain, logger, RangeAnswer{Data: data})
	})
	if allocs > 100 {
		t.Errorf("writing a 29,220-point answer took %.0f allocations, want at most 100", allocs)
	}

	rec := httptest.NewRecorder()
	c.Respond(rec, plain, logger, RangeAnswer{Data: data})
	want := rec.Body.String()
	if !strings.HasPrefix(want, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":`) {
		t.Fatalf("answer starts %.80q", want)
	}
	zipped := httptest.NewRequest(http.MethodGet, "/api/v1/query_range", nil)
	zipped.Header.Set("Accept-Encoding", "gzip")
	rec = httptest.NewRecorder()
	c.Respond(rec, zipped, logger, RangeAnswer{Data: data})
	if got := rec.Header().Get("Content-Encoding"); got != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", got)
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("gzipped answer differs from the plain one (%d against %d bytes)", len(got), len(want))
	}
}

// TestGzipWriterReused: a gzipped answer reuses a finished answer's
// compressor instead of allocating its tables (about 1 MiB) again, which
// cost a small answer more than compressing it, also across garbage
// collections; and the reused writer keeps nothing of the answer before.
func TestGzipWriterReused(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := NewCompressor()
	zipped := httptest.NewRequest(http.MethodGet, "/api/v1/query_range", nil)
	zipped.Header.Set("Accept-Encoding", "gzip")
	answer := func(data string) string {
		rec := httptest.NewRecorder()
		c.Respond(rec, zipped, logger, RangeAnswer{Data: json.RawMessage(data)})
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		return string(got)
	}
	a, b := answer(`{"resultType":"vector","result":[]}`), answer(`{"resultType":"scalar","result":[0,"1"]}`)
	if !strings.Contains(a, `"vector"`) || !strings.Contains(b, `"scalar"`) || strings.Contains(b, "vector") {
		t.Fatalf("answers %q and %q", a, b)
	}

	data := json.RawMessage(`{"resultType":"vector","result":[]}`)
	const n = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		if i%10 == 0 {
			// A busy API collects every few answers; a sync.Pool would
			// have dropped its writers after these two.
			runtime.GC()
			runtime.GC()
		}
		c.Respond(&discardWriter{h: http.Header{}}, zipped, logger, RangeAnswer{Data: data})
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 64<<10 {
		t.Errorf("a gzipped empty answer allocated %d bytes, want at most 64 KiB", per)
	}
}
