package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/snappy"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
	"github.com/kairos-remote/kairos-adapter/translate"
)

type directFlags struct {
	hosts                           *[]string
	keyspace, consistency, strategy *string
	inFlight, batchSize             *int
	timeout                         *time.Duration
}

// The inserts of docs/kairosdb-layout.md §5.3, as kairosstore/cql sends them
// (copied: that package does not export its statement text).
const (
	insertDataPoint   = `INSERT INTO data_points (key, column1, value) VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	insertRowKey      = `INSERT INTO row_keys (metric, table_name, row_time, data_type, tags, mtime) VALUES (?, ?, ?, ?, ?, now()) USING TTL ?`
	insertRowTime     = `INSERT INTO row_key_time_index (metric, table_name, row_time) VALUES (?, ?, ?) USING TTL ?`
	insertStringIndex = `INSERT INTO string_index (key, column1, value) VALUES (?, ?, 0x00)`
)

// stmt is one bound statement and the partition it writes, for grouping.
type stmt struct {
	cql  string
	args []any
	part string
}

// directReq is one load request turned into Cassandra requests (a single
// statement or an UNLOGGED batch each), built before the clock starts.
type directReq struct {
	groups  [][]stmt
	samples int
}

func runDirect(ctx context.Context, sh shape, f directFlags, ws []watched, logger *slog.Logger) error {
	cons, err := parseConsistency(*f.consistency)
	if err != nil {
		return err
	}
	// The project's engine creates the keyspace and tables, so both sides of
	// the comparison write into identical schemas.
	// Its driver warnings (replica shuffling) are noise here: nil logger.
	eng, err := cql.Open(ctx, cql.Config{Hosts: splitHosts(*f.hosts), Keyspace: *f.keyspace, WriteConsistency: *f.consistency}, nil)
	if err != nil {
		return err
	}
	err = eng.Setup(ctx)
	closeWithin(eng.Close, logger)
	if err != nil {
		return err
	}
	sess, err := newSession(*f.hosts, strings.ToLower(*f.keyspace), *f.timeout)
	if err != nil {
		return err
	}
	defer closeWithin(func() error { sess.Close(); return nil }, logger)

	logger.Info("Building statements", "requests", sh.requests, "series", sh.series, "strategy", *f.strategy)
	t0 := time.Now()
	reqs, err := buildDirect(sh, *f.strategy, *f.batchSize)
	if err != nil {
		return err
	}
	logger.Info("Statements built", "took", time.Since(t0).Round(time.Millisecond))

	var firstErr atomic.Pointer[error]
	send := func(ctx context.Context, i int) outcome {
		r := &reqs[i]
		// One millisecond write timestamp per request, as the adapter's
		// Commit takes one per request (§5.4).
		ts := time.Now().UnixMilli()
		for _, g := range r.groups {
			for _, st := range g {
				if st.cql == insertDataPoint {
					st.args[4] = ts
				}
			}
		}
		if err := execAll(ctx, sess, r.groups, cons, ts, *f.inFlight); err != nil {
			firstErr.CompareAndSwap(nil, &err)
			return outcome{kind: cqlErrKind(err)}
		}
		return outcome{ok: true, kind: "ok", samples: r.samples}
	}

	if err := startWatch(ws); err != nil {
		return err
	}
	load0, cpu0 := loadAvg(), selfCPU()
	res := drive(ctx, len(reqs), sh.concurrency, sh.duration, send)
	if e := firstErr.Load(); e != nil {
		logger.Warn("Some requests failed", "first_err", *e)
	}
	extra := []any{
		"strategy", *f.strategy, "in_flight", *f.inFlight, "consistency", strings.ToUpper(*f.consistency),
		"series", sh.series, "samples_per_request", sh.seriesPerRequest * sh.samplesPerSeries,
		"concurrency", sh.concurrency, "load1_start", load0, "load1_end", loadAvg(),
		"kairosload_cpu_s", fmt.Sprintf("%.1f", (selfCPU() - cpu0).Seconds()),
	}
	res.report("direct", sh.prebuiltOnly, logger, append(extra, finishWatch(ws, res.samples)...)...)
	return nil
}

// buildDirect turns every load request into the rows the adapter would
// write for it: one data_points cell per sample, and for each series row
// seen for the first time its row_keys row, plus row_key_time_index and
// string_index for each new metric row (§5.2 step 4). Requests are walked in
// order, so "first time" is the first request carrying the row, as with the
// adapter's index caches.
func buildDirect(sh shape, strategy string, batchSize int) ([]directReq, error) {
	spec := codec.DefaultRowSpec()
	type seriesRow struct {
		rowTime int64
		key     []byte
	}
	rows := make([]seriesRow, sh.series)
	metrics := make([]string, sh.series)
	tags := make([][]codec.Tag, sh.series)
	for i, ls := range sh.allLabels() {
		m, t, err := translate.Mapper{}.Split(ls, nil)
		if err != nil {
			return nil, err
		}
		codec.SortTags(t)
		metrics[i], tags[i] = m, t
		rows[i].rowTime = -1 << 63
	}
	seenMetricRows := map[string]bool{}
	reqs := make([]directReq, sh.requests)
	for n := range reqs {
		round, lo, hi := sh.span(n)
		var data, index []stmt
		for i := lo; i < hi; i++ {
			for k := range sh.samplesPerSeries {
				ts := sh.timestamp(round, k)
				rt := spec.RowTime(ts)
				if rows[i].rowTime != rt {
					rows[i] = seriesRow{rt, codec.AppendRowKey(nil, codec.RowKey{
						Metric: metrics[i], RowTime: rt, DataType: codec.TypeDouble, Tags: tags[i],
					})}
					index = appendIndex(index, metrics[i], rt, tags[i], seenMetricRows)
				}
				key := rows[i].key
				data = append(data, stmt{
					cql: insertDataPoint,
					args: []any{key, codec.AppendColumn(nil, spec.Column(rt, ts)),
						codec.AppendDouble(nil, value(i, round*sh.samplesPerSeries+k)), int32(0), int64(0)},
					part: "d" + string(key),
				})
			}
		}
		reqs[n] = directReq{groups: group(append(data, index...), strategy, batchSize), samples: len(data)}
	}
	return reqs, nil
}

// appendIndex adds the index rows of a new series row (TTL 0, as the
// adapter's default --kairosdb.datapoint-ttl).
func appendIndex(dst []stmt, metric string, rowTime int64, tags []codec.Tag, seen map[string]bool) []stmt {
	tm := make(map[string]string, len(tags))
	for _, t := range tags {
		tm[t.Name] = t.Value
	}
	metricRow := fmt.Sprintf("%s\x00%d", metric, rowTime)
	dst = append(dst, stmt{
		cql:  insertRowKey,
		args: []any{metric, "data_points", rowTime, codec.TypeDouble, tm, int32(0)},
		part: "r" + metricRow,
	})
	if seen[metricRow] {
		return dst
	}
	seen[metricRow] = true
	return append(dst,
		stmt{cql: insertRowTime, args: []any{metric, "data_points", rowTime, int32(0)}, part: "i" + metric},
		stmt{cql: insertStringIndex, args: []any{[]byte("metric_names"), metric}, part: "s"},
	)
}

// group turns statements into Cassandra requests.
func group(stmts []stmt, strategy string, batchSize int) [][]stmt {
	var out [][]stmt
	switch strategy {
	case "singles":
		for i := range stmts {
			out = append(out, stmts[i:i+1:i+1])
		}
	case "multi":
		// Batches across partitions, as KairosDB groups per host (§5.6):
		// fewer round trips, but the coordinator splits them again.
		for lo := 0; lo < len(stmts); lo += batchSize {
			hi := min(lo+batchSize, len(stmts))
			out = append(out, stmts[lo:hi:hi])
		}
	default: // partition: what kairosstore/cql does
		index := map[string]int{}
		for _, st := range stmts {
			i, ok := index[st.part]
			if !ok || len(out[i]) == batchSize {
				i = len(out)
				index[st.part] = i
				out = append(out, nil)
			}
			out[i] = append(out[i], st)
		}
	}
	// The partition names are needed no more; dropping them halves the
	// memory the pre-built requests hold.
	for _, g := range out {
		for i := range g {
			g[i].part = ""
		}
	}
	return out
}

// execAll sends the requests of one load request with at most inFlight
// outstanding, and waits for all: the load request is confirmed only when
// every row is, as a remote write is.
func execAll(ctx context.Context, s *gocql.Session, groups [][]stmt, cons gocql.Consistency, ts int64, inFlight int) error {
	var (
		next int64 = -1
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs error
	)
	for range min(inFlight, len(groups)) {
		wg.Go(func() {
			for {
				i := int(atomic.AddInt64(&next, 1))
				if i >= len(groups) {
					return
				}
				if err := exec(ctx, s, groups[i], cons, ts); err != nil {
					mu.Lock()
					if errs == nil {
						errs = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

func exec(ctx context.Context, s *gocql.Session, g []stmt, cons gocql.Consistency, ts int64) error {
	if len(g) == 1 {
		return s.Query(g[0].cql, g[0].args...).Consistency(cons).WithTimestamp(ts).Idempotent(true).ExecContext(ctx)
	}
	b := s.Batch(gocql.UnloggedBatch).Consistency(cons).WithTimestamp(ts)
	b.Entries = make([]gocql.BatchEntry, len(g))
	for i, st := range g {
		b.Entries[i] = gocql.BatchEntry{Stmt: st.cql, Args: st.args, Idempotent: true}
	}
	return b.ExecContext(ctx)
}

// newSession matches kairosstore/cql's driver settings (token-aware round
// robin, snappy on protocol v4, two retries of idempotent statements), so the
// baseline differs from the adapter only in what sits above the driver.
func newSession(hosts []string, keyspace string, timeout time.Duration) (*gocql.Session, error) {
	cl, err := cluster(hosts)
	if err != nil {
		return nil, err
	}
	cl.Keyspace = keyspace
	cl.Timeout = timeout
	cl.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy())
	cl.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 2}
	cl.Compressor = &snappy.SnappyCompressor{}
	cl.ProtoVersion = 4
	return cl.CreateSession()
}

// cluster splits host:port contact points (one port for all, as the driver
// needs).
func cluster(hosts []string) (*gocql.ClusterConfig, error) {
	var names []string
	port := ""
	for _, h := range splitHosts(hosts) {
		name, p, err := net.SplitHostPort(h)
		if err != nil {
			name = h // no port: the driver's default
		} else {
			if port != "" && p != port {
				return nil, errors.New("all --cassandra.hosts must use the same port")
			}
			port = p
		}
		names = append(names, name)
	}
	cl := gocql.NewCluster(names...)
	if port != "" {
		if _, err := fmt.Sscan(port, &cl.Port); err != nil {
			return nil, fmt.Errorf("bad port %q", port)
		}
	}
	return cl, nil
}

// splitHosts accepts "a,b" as the adapter's --cassandra.hosts does, and
// repeated flags.
func splitHosts(hosts []string) []string {
	return strings.Split(strings.Join(hosts, ","), ",")
}

func parseConsistency(name string) (gocql.Consistency, error) {
	var c gocql.Consistency
	if err := c.UnmarshalText([]byte(strings.ToUpper(name))); err != nil {
		return 0, fmt.Errorf("--consistency %q: %w", name, err)
	}
	return c, nil
}

// cqlErrKind names a driver error class for the outcome counts.
func cqlErrKind(err error) string {
	var re gocql.RequestError
	switch {
	case errors.As(err, &re):
		return fmt.Sprintf("cql_error_%#x", re.Code())
	case errors.Is(err, gocql.ErrTimeoutNoResponse):
		return "client_timeout"
	default:
		return "error"
	}
}

// closeTimeout bounds closing a driver session: once, on a node overloaded
// to client timeouts, Session.Close did not return, and a load run must end
// by itself. The process exits right after, which closes what is left.
const closeTimeout = 10 * time.Second

func closeWithin(closeFn func() error, logger *slog.Logger) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = closeFn()
	}()
	select {
	case <-done:
	case <-time.After(closeTimeout):
		if logger != nil {
			logger.Warn("Closing the Cassandra session timed out; exiting anyway", "after", closeTimeout)
		}
	}
}

// dropKeyspaces drops load_* keyspaces, and nothing else; with list it only
// prints the load_* keyspaces there are.
func dropKeyspaces(ctx context.Context, hosts, keyspaces []string, list bool) error {
	for _, ks := range keyspaces {
		if !strings.HasPrefix(strings.ToLower(ks), "load_") || strings.ContainsAny(ks, `"; `) {
			return fmt.Errorf("refusing to drop %q: only load_* keyspaces", ks)
		}
	}
	cl, err := cluster(hosts)
	if err != nil {
		return err
	}
	cl.Timeout = time.Minute
	s, err := cl.CreateSession()
	if err != nil {
		return err
	}
	defer closeWithin(func() error { s.Close(); return nil }, nil)
	if list {
		it := s.Query(`SELECT keyspace_name FROM system_schema.keyspaces`).IterContext(ctx)
		var name string
		for it.Scan(&name) {
			if strings.HasPrefix(name, "load_") {
				fmt.Println(name)
			}
		}
		return it.Close()
	}
	for _, ks := range keyspaces {
		if err := s.Query(`DROP KEYSPACE IF EXISTS "` + strings.ToLower(ks) + `"`).ExecContext(ctx); err != nil {
			return fmt.Errorf("drop %s: %w", ks, err)
		}
	}
	return nil
}
