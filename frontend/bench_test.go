//go:build unix

package frontend

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/kairos-remote/kairos-adapter/queryapi"
)

// countingParser counts the expressions parsed.
type countingParser struct {
	parser.Parser
	n *atomic.Int64
}

func (p countingParser) ParseExpr(s string) (parser.Expr, error) {
	p.n.Add(1)
	return p.Parser.ParseExpr(s)
}

// BenchmarkSplitShardedQuery is a range query through the frontend, split
// into 12 parts and sharded in 3, the results cache off: what each of its
// parts and shards costs besides the evaluation. It reports the
// expressions parsed per query (the frontend's and the query API's
// parsers), the allocations, and the CPU time of the process per query
// (user and system, all goroutines).
func BenchmarkSplitShardedQuery(b *testing.B) {
	store := testStore(b, nil)
	writeTestData(b, store)
	var parses atomic.Int64
	p := countingParser{parser.NewParser(parser.Options{}), &parses}
	f := New(queryAPIWith(store, queryapi.Options{Parser: p}), Options{SplitInterval: 20 * time.Minute, Shards: 3, Parallelism: 2, Parser: p}, prometheus.NewRegistry(), nil)
	body := rangeForm(`sum by (instance) (rate(http_requests_total[5m]))`, midnight.Add(-2*time.Hour), midnight.Add(2*time.Hour-time.Minute), time.Minute).Encode()
	run := func() {
		req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		f.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%d: %s", rec.Code, rec.Body)
		}
	}
	run()
	parses.Store(0)
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(parses.Load())/float64(b.N), "parses/op")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
