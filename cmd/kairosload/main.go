// Command kairosload puts load on a kairos-adapter and, for comparison, on
// Cassandra directly:
//
//	kairosload write    remote-write 1.0 or 2.0 traffic to the adapter
//	kairosload direct   the same rows inserted straight through the gocql driver (the baseline)
//	kairosload read     remote-read queries, SAMPLES or STREAMED_XOR_CHUNKS, decoded fully
//	kairosload query    PromQL instant or range queries to a Prometheus HTTP API, decoded fully
//	kairosload scan     list one row_keys partition through the driver (the phase-2 baseline)
//	kairosload drop     drop a load_* keyspace when done
//	kairosload compact  compact a stopped embedded store fully, to count its bytes at rest
//	kairosload tsdb     write the samples of a write run into Prometheus TSDB blocks, to count theirs
//
// Every run is bounded by --duration and by a request or query count, so it
// always stops by itself. BENCHMARKS.md describes the method.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	app := kingpin.New("kairosload", "Load generator for kairos-adapter (remote write, remote read) and a direct Cassandra baseline.")
	app.HelpFlag.Short('h')

	writeCmd := app.Command("write", "Send remote-write requests to the adapter.")
	wShape := shapeFlags(writeCmd)
	wFlags := writeFlags{
		url:      writeCmd.Flag("url", "remote-write endpoint").Default("http://127.0.0.1:9201/api/v1/write").String(),
		protocol: writeCmd.Flag("protocol", "remote-write protocol: 1.0 or 2.0").Default("1.0").Enum("1.0", "2.0"),
		timeout:  writeCmd.Flag("timeout", "timeout of one HTTP request").Default("30s").Duration(),
		retries:  writeCmd.Flag("retries", "send a request answered 5xx or 429, or not answered, again up to this often, with Prometheus's backoff (30ms doubling to 5s), as Prometheus does; its last answer counts").Default("0").Int(),
	}
	wWatch := watchFlags(writeCmd)

	directCmd := app.Command("direct", "Insert the same rows straight into Cassandra through the gocql driver: the baseline.")
	dShape := shapeFlags(directCmd)
	dFlags := directFlags{
		hosts:       directCmd.Flag("cassandra.hosts", "contact points, host:port").Default("127.0.0.1:9042").Strings(),
		keyspace:    directCmd.Flag("cassandra.keyspace", "keyspace; created with the project's engine if missing").Default("load_direct").String(),
		consistency: directCmd.Flag("consistency", "write consistency").Default("QUORUM").String(),
		strategy:    directCmd.Flag("strategy", "how statements become requests: partition (one UNLOGGED batch per partition), singles (one statement per request), multi (UNLOGGED batches of --batch-size statements of any partitions; the adapter batches per replica host)").Default("partition").Enum("partition", "singles", "multi"),
		inFlight:    directCmd.Flag("in-flight", "Cassandra requests one load request keeps outstanding (the adapter's engine uses 64)").Default("64").Int(),
		batchSize:   directCmd.Flag("batch-size", "statements per batch for --strategy=partition and multi").Default("100").Int(),
		timeout:     directCmd.Flag("cassandra.timeout", "timeout of one Cassandra request").Default("10s").Duration(),
	}
	dWatch := watchFlags(directCmd)

	readCmd := app.Command("read", "Send remote-read queries to the adapter and decode the answers fully.")
	rFlags := readFlags{
		url:         readCmd.Flag("url", "remote-read endpoint").Default("http://127.0.0.1:9201/api/v1/read").String(),
		response:    readCmd.Flag("response", "response type: samples or chunks (STREAMED_XOR_CHUNKS)").Default("samples").Enum("samples", "chunks"),
		selector:    readCmd.Flag("selector", "series selector").Default(`{__name__=~"load_metric_.*"}`).String(),
		start:       readCmd.Flag("start", "query start, RFC 3339 or Unix ms; empty means now minus --range").String(),
		queryRange:  readCmd.Flag("range", "query range").Default("24h").Duration(),
		concurrency: readCmd.Flag("concurrency", "queries in flight").Default("1").Int(),
		queries:     readCmd.Flag("queries", "queries to send").Default("3").Int(),
		duration:    readCmd.Flag("duration", "stop sending new queries after this long").Default("10m").Duration(),
		timeout:     readCmd.Flag("timeout", "timeout of one query").Default("5m").Duration(),
	}
	rWatch := watchFlags(readCmd)

	queryCmd := app.Command("query", "Send PromQL queries to a Prometheus HTTP API (the adapter's, or a Prometheus reading from it) and decode the answers fully.")
	qFlags := queryFlags{
		url:           queryCmd.Flag("url", "base URL of the Prometheus HTTP API").Default("http://127.0.0.1:9201").String(),
		query:         queryCmd.Flag("query", "PromQL expression").Default(`sum by (job) (rate(load_metric_0[5m]))`).String(),
		start:         queryCmd.Flag("start", "range start, RFC 3339 or Unix ms; empty means now minus --range").String(),
		queryRange:    queryCmd.Flag("range", "query range; an instant query is evaluated at its end").Default("1h").Duration(),
		step:          queryCmd.Flag("step", "resolution of a range query").Default("60s").Duration(),
		instant:       queryCmd.Flag("instant", "send instant queries (/api/v1/query) instead of range queries").Bool(),
		concurrency:   queryCmd.Flag("concurrency", "queries in flight").Default("1").Int(),
		queries:       queryCmd.Flag("queries", "queries to send, after the warm-up").Default("10").Int(),
		warmup:        queryCmd.Flag("warmup", "queries sent one at a time before measuring, not counted").Default("1").Int(),
		duration:      queryCmd.Flag("duration", "stop sending new queries after this long").Default("10m").Duration(),
		timeout:       queryCmd.Flag("timeout", "timeout of one query").Default("5m").Duration(),
		prometheusPID: queryCmd.Flag("prometheus-pid", "report this Prometheus process's CPU time and peak RSS during the run").Default("0").Int(),
		noCache:       queryCmd.Flag("no-cache", "send Cache-Control: no-store, so that the adapter answers from no cached result (a cold query)").Bool(),
		panels:        queryCmd.Flag("panel", "a dashboard panel's PromQL (repeatable): each query is then a refresh of every panel over the --range ending now, start and end aligned to --step as Grafana aligns them, --concurrency panels at a time; its latency is the whole refresh's").Strings(),
	}
	qWatch := watchFlags(queryCmd)
	qFlags.params = queryCmd.Flag("param", "a further form parameter of every query, key=value (repeatable), e.g. max_source_resolution=0").Strings()

	compareCmd := app.Command("compare", "Evaluate each panel twice, with the --a and with the --b parameters (rollups and raw samples by default), cache bypassed, and report how the answers differ point by point.")
	cFlags := compareFlags{
		url:        compareCmd.Flag("url", "base URL of the Prometheus HTTP API").Default("http://127.0.0.1:9201").String(),
		panels:     compareCmd.Flag("panel", "PromQL of a range query (repeatable)").Required().Strings(),
		queryRange: compareCmd.Flag("range", "query range").Default("8760h").Duration(),
		step:       compareCmd.Flag("step", "step; start and end are aligned to it, as Grafana aligns them").Default("6h").Duration(),
		end:        compareCmd.Flag("end", "end of the range, RFC 3339 or Unix ms; empty means now").String(),
		a:          compareCmd.Flag("a", "form parameter of the first evaluation, key=value (repeatable)").Default("max_source_resolution=auto").Strings(),
		b:          compareCmd.Flag("b", "form parameter of the second evaluation, key=value (repeatable)").Default("max_source_resolution=0").Strings(),
		rel:        compareCmd.Flag("rel", "relative difference up to which two values count as equal").Default("1e-9").Float64(),
		timeout:    compareCmd.Flag("timeout", "timeout of one query").Default("5m").Duration(),
	}

	scanCmd := app.Command("scan", "List one row_keys partition straight through the driver: the floor of an uncached phase-2 read.")
	sFlags := scanFlags{
		hosts:    scanCmd.Flag("cassandra.hosts", "contact points, host:port").Default("127.0.0.1:9042").Strings(),
		keyspace: scanCmd.Flag("cassandra.keyspace", "keyspace").Default("kairosdb").String(),
		metric:   scanCmd.Flag("metric", "KairosDB metric name").Default("load_metric_0").String(),
		rowTime:  scanCmd.Flag("row-time", "row time (ms) of the partition; -1 means the metric's latest").Default("-1").Int64(),
		pageSize: scanCmd.Flag("page-size", "rows per page (the adapter's --cassandra page size is 5000)").Default("5000").Int(),
		queries:  scanCmd.Flag("queries", "listings to time").Default("3").Int(),
		decode:   scanCmd.Flag("decode", "let the driver build the tags map instead of keeping raw bytes").Bool(),
		timeout:  scanCmd.Flag("cassandra.timeout", "timeout of one Cassandra request").Default("30s").Duration(),
	}

	dropCmd := app.Command("drop", "Drop keyspaces whose names start with load_ (nothing else, to keep mistakes small).")
	dropHosts := dropCmd.Flag("cassandra.hosts", "contact points, host:port").Default("127.0.0.1:9042").Strings()
	dropKS := dropCmd.Flag("cassandra.keyspace", "keyspace to drop; repeatable").Strings()
	dropList := dropCmd.Flag("list", "only list the load_* keyspaces").Bool()

	compactCmd := app.Command("compact", "Flush and fully compact a stopped adapter's embedded store with the adapter's own merge operator and compression, and print its size: the bytes its data take at rest.")
	compactPath := compactCmd.Flag("storage.path", "directory of the embedded store; no adapter may be using it").Required().String()

	tsdbCmd := app.Command("tsdb", "Write the samples write sends with the same flags and --requests into Prometheus TSDB blocks, and print their size.")
	tShape := shapeFlags(tsdbCmd)
	tsdbDir := tsdbCmd.Flag("out", "directory for the blocks").Required().String()
	tsdbBlock := tsdbCmd.Flag("block", "largest block, as Prometheus compacts them (31 days with a long retention)").Default("744h").Duration()

	cmd, err := app.Parse(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kairosload: %v\n", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var limit time.Duration
	switch cmd {
	case writeCmd.FullCommand():
		limit = *wShape.duration + time.Duration(2+*wFlags.retries)**wFlags.timeout
	case directCmd.FullCommand():
		limit = *dShape.duration + 3**dFlags.timeout
	case readCmd.FullCommand():
		limit = *rFlags.duration + *rFlags.timeout
	case queryCmd.FullCommand():
		// The warm-up is bounded by --duration too.
		limit = 2**qFlags.duration + 2**qFlags.timeout
	case compareCmd.FullCommand():
		limit = time.Duration(2*len(*cFlags.panels)) * *cFlags.timeout
	case dropCmd.FullCommand():
		limit = 2 * time.Minute
	case scanCmd.FullCommand():
		limit = time.Duration(*sFlags.queries+1) * 5 * time.Minute
	case compactCmd.FullCommand(), tsdbCmd.FullCommand():
		limit = time.Hour
	}
	ctx, cancel := context.WithTimeout(ctx, limit+setupBudget)
	defer cancel()
	go watchdog(ctx, logger)

	switch cmd {
	case writeCmd.FullCommand():
		sh, err := wShape.shape()
		if err == nil {
			err = runWrite(ctx, sh, wFlags, wWatch.watch(), logger)
		}
		return exitCode(err, logger)
	case directCmd.FullCommand():
		sh, err := dShape.shape()
		if err == nil {
			err = runDirect(ctx, sh, dFlags, dWatch.watch(), logger)
		}
		return exitCode(err, logger)
	case readCmd.FullCommand():
		return exitCode(runRead(ctx, rFlags, rWatch.watch(), logger), logger)
	case queryCmd.FullCommand():
		return exitCode(runQuery(ctx, qFlags, qWatch.watch(), logger), logger)
	case compareCmd.FullCommand():
		return exitCode(runCompare(ctx, cFlags, logger), logger)
	case scanCmd.FullCommand():
		return exitCode(runScan(ctx, sFlags, logger), logger)
	case dropCmd.FullCommand():
		return exitCode(dropKeyspaces(ctx, *dropHosts, *dropKS, *dropList), logger)
	case compactCmd.FullCommand():
		return exitCode(runCompact(ctx, *compactPath), logger)
	case tsdbCmd.FullCommand():
		sh, err := tShape.shape()
		if err == nil {
			err = runTSDB(ctx, sh, *tsdbDir, tsdbBlock.Milliseconds(), slog.New(slog.DiscardHandler))
		}
		return exitCode(err, logger)
	}
	return 2
}

// setupBudget is what connecting, creating the schema and building the
// requests may take on top of the run itself.
const setupBudget = 3 * time.Minute

// watchdog makes every run end by itself: past its hard limit the context
// is cancelled, which stops the run, and if that does not return within 30 s
// (a request stuck below the driver's timeouts) the goroutines are dumped,
// to see where, and the process exits.
func watchdog(ctx context.Context, logger *slog.Logger) {
	<-ctx.Done()
	if ctx.Err() != context.DeadlineExceeded {
		return
	}
	logger.Error("Hard time limit reached; cancelling the run")
	time.Sleep(30 * time.Second)
	logger.Error("The run did not stop after cancellation; exiting")
	_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
	os.Exit(3)
}

func exitCode(err error, logger *slog.Logger) int {
	if err != nil {
		logger.Error("kairosload failed", "err", err)
		return 1
	}
	return 0
}

// shapeArgs are the workload flags write and direct share, so both send
// exactly the same series, samples and timestamps.
type shapeArgs struct {
	series, labels, metrics         *int
	samplesPerSeries, seriesPerReq  *int
	concurrency, requests, prebuilt *int
	duration, interval              *time.Duration
	start                           *string
}

func shapeFlags(cmd *kingpin.CmdClause) shapeArgs {
	return shapeArgs{
		series:           cmd.Flag("series", "distinct series").Default("100000").Int(),
		labels:           cmd.Flag("labels", "labels per series, __name__ included (at least 3)").Default("10").Int(),
		metrics:          cmd.Flag("metrics", "distinct metric names (load_metric_N) the series are spread over").Default("100").Int(),
		samplesPerSeries: cmd.Flag("samples-per-series", "samples of each series in one request (consecutive scrapes)").Default("1").Int(),
		seriesPerReq:     cmd.Flag("series-per-request", "series in one request").Default("2000").Int(),
		concurrency:      cmd.Flag("concurrency", "requests in flight").Default("8").Int(),
		requests:         cmd.Flag("requests", "requests to send; 0 means as many as --prebuilt and --duration allow").Default("0").Int(),
		prebuilt:         cmd.Flag("prebuilt", "requests built ahead when --requests is 0; the run stops early if they run out").Default("1000").Int(),
		duration:         cmd.Flag("duration", "stop sending new requests after this long").Default("60s").Duration(),
		interval:         cmd.Flag("interval", "scrape interval: the step between a series' samples").Default("15s").Duration(),
		start:            cmd.Flag("start", "timestamp of the first sample, RFC 3339 or Unix ms; empty means now").String(),
	}
}

func (a shapeArgs) shape() (shape, error) {
	s := shape{
		series: *a.series, labels: *a.labels, metrics: *a.metrics,
		samplesPerSeries: *a.samplesPerSeries, seriesPerRequest: *a.seriesPerReq,
		concurrency: *a.concurrency, duration: *a.duration,
		intervalMs: a.interval.Milliseconds(),
	}
	s.requests = *a.requests
	if s.requests == 0 {
		s.requests, s.prebuiltOnly = *a.prebuilt, true
	}
	start, err := parseTime(*a.start)
	if err != nil {
		return s, fmt.Errorf("--start: %w", err)
	}
	if start == 0 {
		// Aligned to the interval, as a scrape loop is.
		now := time.Now().UnixMilli()
		start = now - now%max(s.intervalMs, 1)
	}
	s.startMs = start
	return s, s.validate()
}

// parseTime reads RFC 3339 or Unix milliseconds; "" is 0.
func parseTime(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, fmt.Errorf("%q is neither RFC 3339 nor Unix ms", v)
	}
	return t.UnixMilli(), nil
}

// watchArgs name processes whose CPU time and peak memory a run reports.
type watchArgs struct {
	adapterPID, cassandraPID *int
}

func watchFlags(cmd *kingpin.CmdClause) watchArgs {
	return watchArgs{
		adapterPID:   cmd.Flag("adapter-pid", "report this adapter process's CPU time and peak RSS during the run").Default("0").Int(),
		cassandraPID: cmd.Flag("cassandra-pid", "report this Cassandra process's CPU time during the run (read only: its memory counters are left alone)").Default("0").Int(),
	}
}

func (a watchArgs) watch() []watched {
	var w []watched
	if *a.adapterPID > 0 {
		w = append(w, watched{name: "adapter", pid: *a.adapterPID, peak: true})
	}
	if *a.cassandraPID > 0 {
		w = append(w, watched{name: "cassandra", pid: *a.cassandraPID})
	}
	return w
}

// printResult writes one result line of key=value pairs to stdout, so runs
// can be collected with grep.
func printResult(mode string, kv ...any) {
	var b strings.Builder
	b.WriteString("RESULT mode=" + mode)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, " %v=%v", kv[i], kv[i+1])
	}
	fmt.Println(b.String())
}
