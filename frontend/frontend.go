// Package frontend answers range queries of the query API in parts, as
// Mimir's and Thanos's query-frontends do in front of a querier, but in
// process: it splits a /api/v1/query_range at UTC day boundaries (or
// another interval) and evaluates the parts at once, shards aggregations
// by series so that one day also uses every core, and keeps the parts'
// answers in a results cache that the store's own change notices
// (kairosstore.Options.OnChange) invalidate exactly.
//
// Every part and shard is evaluated by the query API's own range
// evaluation (Inner.EvalRange: one parse, its limits, timeouts and error
// answers), called directly, with no request or JSON answer between them;
// the frontend only merges answers. A query it cannot split or shard
// safely goes to the query API's handler whole.
package frontend

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
	"github.com/kairos-remote/kairos-adapter/queryapi"
	"github.com/kairos-remote/kairos-adapter/readhint"
)

// Path is the route the frontend serves; everything else goes to inner.
const Path = "/api/v1/query_range"

// Options configure the frontend; zero fields take the defaults.
type Options struct {
	// SplitInterval is the length of a part, parts starting at multiples
	// of it since the Unix epoch (UTC midnights for 24h, the default); a
	// negative interval turns splitting off.
	SplitInterval time.Duration
	// MaxParts bounds the parts of one query: a longer range is split at
	// a multiple of SplitInterval, as Thanos's query frontend caps its
	// splits, so that a year is a few dozen parts, not 365, each of
	// which costs its own parse, plan and evaluation. Default 16.
	MaxParts int
	// UncachedParts bounds the parts of a query whose answer is not
	// cached (the cache off, or bypassed: Cache-Control: no-store,
	// nocache=1). Such parts only spread the query over the cores, and
	// each costs its own parse, plan, series lookup and row_keys checks,
	// so twice as many as Parallelism (the parts are not equally dear)
	// do what 16 did, for less CPU; in return a raw query holds more of
	// its range at once, and more memory (both measured in BENCHMARKS.md,
	// "Issue #30: the panels' CPU outside the store"). Default
	// 2·Parallelism+2, at most MaxParts; at least 3. A query read wholly
	// from rollups is one part (cut).
	UncachedParts int
	// RowAlign is the store's row width: where the parts of an uncached
	// query are longer than it and its evaluations read no further back
	// than a step, they start at multiples of it, so that no row is read
	// by two parts (alignInterval). 0 leaves them as they are.
	RowAlign time.Duration
	// AlignGrain is the largest rollup resolution (0: rollups off): parts
	// are aligned to rows only for a query whose step is a multiple of it
	// and whose start is a multiple of the step. Every window of such a
	// query ends on a bucket end of every resolution, so a part reads the
	// same buckets and answers the same wherever it starts; elsewhere a
	// part's first windows can be read raw where the whole query's were
	// read from rollups, and moving the cut would change those answers.
	AlignGrain time.Duration
	// Parallelism is how many sub-queries of one query run at once;
	// default GOMAXPROCS.
	Parallelism int
	// Shards is how many parts by series an aggregation that allows it is
	// evaluated in per part; 0 (the default) as many as fill the cores
	// its parts leave idle (shardsPerPart), 1 turns sharding off. An
	// uncached query read wholly from rollups is never sharded (cut).
	Shards int
	// CacheBytes bounds the results cache; 0 turns it off.
	CacheBytes int64
	// CacheFreshness: nothing evaluated at a time later than now minus it
	// is cached, since samples of the last minutes still arrive; default
	// 10m, and a negative one caches up to now (the flag's 0).
	CacheFreshness time.Duration
	// CacheTTL bounds how long a cached extent is trusted; writes and
	// deletes through this process invalidate at once, it only bounds
	// changes by other writers. Default 1h.
	CacheTTL time.Duration
	// AlignSteps moves start and end to multiples of step, as Mimir's
	// step alignment, which changes answers (off by default).
	AlignSteps bool
	// LookbackDelta is the query API's --query.lookback-delta, for the
	// times a cached answer depends on; default 5m.
	LookbackDelta time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Parser parses queries; nil means Prometheus's own with its default
	// options (a test counts parses with its own).
	Parser parser.Parser
}

// Inner is what the frontend stands in front of: the query API's
// query_range handler (queryapi.RangeHandler), which answers the requests
// the frontend passes on whole and evaluates parts and shards directly.
type Inner interface {
	http.Handler
	EvalRange(ctx context.Context, req queryapi.RangeRequest, convert func(promql.Matrix) any) (queryapi.RangeAnswer, *queryapi.Error)
	// MaxQueryLength is the longest expression the query API accepts.
	MaxQueryLength() int
	// Timeout is how long a query with these parameters may take as a
	// whole, or the query API's answer to its timeout parameter.
	Timeout(params url.Values) (time.Duration, *queryapi.Error)
	// FromRollups reports whether every selector of expr, a range query
	// from start at step with the parameters params, is read from
	// rollups; expr is left as it is.
	FromRollups(expr parser.Expr, start time.Time, step time.Duration, params url.Values) bool
}

// Frontend serves Path and passes other requests to inner.
type Frontend struct {
	inner   Inner
	opts    Options
	parser  parser.Parser
	cache   *cache // nil when off
	metrics *metrics
	logger  *slog.Logger
	gzip    *queryapi.Compressor
}

// New builds a frontend in front of inner, the query API's query_range
// handler; its metrics go to reg.
func New(inner Inner, opts Options, reg prometheus.Registerer, logger *slog.Logger) *Frontend {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	procs := runtime.GOMAXPROCS(0)
	opts.SplitInterval = cmp.Or(opts.SplitInterval, 24*time.Hour)
	opts.MaxParts = max(cmp.Or(opts.MaxParts, 16), 3)
	opts.Parallelism = max(cmp.Or(opts.Parallelism, procs), 1)
	if opts.UncachedParts <= 0 {
		opts.UncachedParts = opts.MaxParts
		if opts.Parallelism < opts.MaxParts { // and so 2·Parallelism+2 cannot overflow
			opts.UncachedParts = 2*opts.Parallelism + 2
		}
	}
	opts.UncachedParts = max(min(opts.UncachedParts, opts.MaxParts), 3)
	opts.Shards = max(opts.Shards, 0)
	opts.CacheFreshness = max(cmp.Or(opts.CacheFreshness, 10*time.Minute), 0)
	opts.CacheTTL = cmp.Or(opts.CacheTTL, time.Hour)
	opts.LookbackDelta = cmp.Or(opts.LookbackDelta, 5*time.Minute)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := newMetrics(reg)
	p := opts.Parser
	if p == nil {
		p = parser.NewParser(parser.Options{})
	}
	f := &Frontend{inner: inner, opts: opts, parser: p, metrics: m, logger: logger, gzip: queryapi.NewCompressor()}
	if opts.CacheBytes > 0 {
		f.cache = newCache(opts.CacheBytes, opts.CacheTTL, opts.Now, m)
	}
	return f
}

// Status is the results cache's part of the status page.
type Status struct {
	// CacheBytes is the estimated memory of the cached extents, of at most
	// CacheMaxBytes (--query.results-cache-bytes; 0: the cache is off).
	CacheBytes    int64 `json:"cache_bytes"`
	CacheMaxBytes int64 `json:"cache_max_bytes"`
}

// Status reads the results cache's size.
func (f *Frontend) Status() Status {
	if f.cache == nil {
		return Status{}
	}
	f.cache.mu.Lock()
	defer f.cache.mu.Unlock()
	return Status{CacheBytes: f.cache.size, CacheMaxBytes: f.cache.maxSize}
}

// Register passes the frontend's routes to handle (adapter.Routes.Handle):
// /api/v1/query_range, named as the query API names it.
func (f *Frontend) Register(handle func(pattern, name string, h http.Handler)) {
	handle("GET /api/v1/query_range", "query_range", f)
	handle("POST /api/v1/query_range", "query_range", f)
}

func (f *Frontend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path || r.Method != http.MethodGet && r.Method != http.MethodPost {
		f.inner.ServeHTTP(w, r)
		return
	}
	// The query's deadline counts from its arrival, as the query API
	// counts a query's, so that it covers reading and parsing too.
	arrived := time.Now()
	// The body is read once here; a request the frontend leaves to the
	// query API gets it back unread.
	body, err := io.ReadAll(io.LimitReader(r.Body, queryapi.MaxFormBytes+1))
	rest := r.Body
	replay := func() *http.Request {
		r2 := r.Clone(r.Context())
		r2.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), rest))
		r2.Form, r2.PostForm, r2.MultipartForm = nil, nil, nil
		return r2
	}
	if err != nil || len(body) > queryapi.MaxFormBytes {
		f.inner.ServeHTTP(w, replay())
		return
	}
	q, ok := f.parseRequest(r, body)
	if !ok {
		f.metrics.queries.WithLabelValues("whole").Inc()
		f.inner.ServeHTTP(w, replay())
		return
	}
	uncached := f.cache == nil || q.noCache
	f.cut(q, uncached)
	if len(q.parts) == 1 && q.shard == nil && uncached {
		// Nothing to split, shard or cache: the query API's answer as
		// it writes it, without a merge's copy.
		f.metrics.queries.WithLabelValues("whole").Inc()
		f.inner.ServeHTTP(w, replay())
		return
	}
	// One deadline for the whole query, as Prometheus has for one query:
	// each part's own (EvalRange's) would let 8,900 parts of a 244-year
	// range at a 10-day step answer 200 after 16 s with
	// --query.timeout=4s.
	ctx, cancel := context.WithDeadline(r.Context(), arrived.Add(q.timeout))
	defer cancel()
	f.metrics.queries.WithLabelValues("split").Inc()
	res, apiErr := f.eval(ctx, q)
	if apiErr != nil {
		apiErr.Respond(w, r)
		return
	}
	f.respond(w, r, res)
}

// cut decides q's parts and shards: the one place that does.
func (f *Frontend) cut(q *rangeQuery, uncached bool) {
	split := f.opts.SplitInterval.Milliseconds()
	switch {
	case uncached && f.inner.FromRollups(q.expr, time.UnixMilli(q.start), time.Duration(q.step)*time.Millisecond, q.params):
		// Read from rollups, the whole range is a few cells per step and
		// series: parts and shards would only add their own evaluations
		// (parse, plan, series lookup, row_keys checks, a seek per series
		// and row) to spread reads that need no spreading (BENCHMARKS.md,
		// "Issue #30: a rollup year in one part"). A raw read of the same
		// range keeps its parts, which bound how much of it is held at
		// once.
		q.interval = 0
		q.parts = splitParts(q.start, q.end, q.step, 0)
		return
	case uncached && uint64(q.end)-uint64(q.start) <= uint64(split):
		// Uncached and no longer than the interval: a midnight inside it
		// would cut it into two uneven parts that keep the cores no busier
		// than shards of the whole do, each paying its own evaluation
		// (BENCHMARKS.md, "Issue #31: the day query").
		q.interval = 0
	case uncached:
		q.interval = partInterval(q.start, q.end, split, f.opts.UncachedParts)
		// Where an evaluation reads further back than a step, the windows
		// either side of any boundary overlap and both parts read the row
		// that holds the overlap wherever the boundary is: aligned, the
		// later part's few buckets of the row before only cost a statement
		// of their own.
		grain := f.opts.AlignGrain.Milliseconds()
		onGrid := grain <= 0 || q.step%grain == 0 && q.start%q.step == 0
		if d := dependsOn(q.expr, q.lookback); onGrid && d.after == 0 && d.before <= q.step {
			q.interval = alignInterval(q.interval, split, f.opts.RowAlign.Milliseconds())
		}
	default:
		q.interval = partInterval(q.start, q.end, split, f.opts.MaxParts)
	}
	q.parts = splitParts(q.start, q.end, q.step, q.interval)
	f.shardParts(q)
}

// rangeQuery is a parsed /api/v1/query_range.
type rangeQuery struct {
	query      string
	expr       parser.Expr
	start, end int64         // ms; end is the last evaluation time
	step       int64         // ms
	params     url.Values    // all but query, start and end, passed on to every part
	timeout    time.Duration // of the whole query (Inner.Timeout)
	lookback   time.Duration
	noCache    bool
	shard      *shardPlan // nil: not shardable
	interval   int64      // ms, the parts' (partInterval); <= 0: none
	parts      []part
}

// parseRequest reads what the frontend needs of a range query; ok is false
// when the query API should answer it alone: a malformed request (whose
// error the query API words), a query the frontend cannot split, or one
// whose answer it could not merge (limit, stats).
func (f *Frontend) parseRequest(r *http.Request, body []byte) (*rangeQuery, bool) {
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.Form, r2.PostForm, r2.MultipartForm = nil, nil, nil
	if err := r2.ParseForm(); err != nil {
		return nil, false
	}
	if err := r2.ParseMultipartForm(queryapi.MaxFormBytes); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		return nil, false
	}
	form := r2.Form
	if r2.MultipartForm != nil {
		for k, v := range r2.MultipartForm.Value {
			form[k] = append(form[k], v...)
		}
	}
	get := func(k string) string {
		if v := form[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if v := get("limit"); v != "" && v != "0" {
		return nil, false
	}
	if get("stats") != "" {
		return nil, false
	}
	start, err1 := parseTime(get("start"))
	end, err2 := parseTime(get("end"))
	step, err3 := timeparam.ParseDuration(get("step"))
	if err1 != nil || err2 != nil || err3 != nil || end < start || step < time.Millisecond {
		return nil, false
	}
	stepMs := step.Milliseconds()
	// Counted without overflow: end-start of Prometheus's bounds is no
	// int64, and wrapped it let 2·10^10 parts through.
	if step%time.Millisecond != 0 || timeparam.Steps(start, end, stepMs)-1 > queryapi.MaxPoints {
		return nil, false
	}
	q := &rangeQuery{query: get("query"), start: start, end: end, step: stepMs, lookback: f.opts.LookbackDelta}
	// A timeout the query API refuses is refused in its words.
	timeout, tErr := f.inner.Timeout(form)
	if tErr != nil {
		return nil, false
	}
	q.timeout = timeout
	if v := get("lookback_delta"); v != "" {
		d, err := timeparam.ParseDuration(v)
		if err != nil {
			return nil, false
		}
		if d > 0 {
			q.lookback = d
		}
	}
	// What the query API's --query.max-length refuses goes to it
	// unparsed, to be refused in its words.
	if len(q.query) > f.inner.MaxQueryLength() {
		return nil, false
	}
	expr, err := f.parser.ParseExpr(q.query)
	if err != nil {
		return nil, false
	}
	if !splittable(expr) {
		return nil, false
	}
	q.expr = expr
	if f.opts.AlignSteps {
		q.start = floorDiv(q.start, stepMs) * stepMs
		q.end = floorDiv(q.end, stepMs) * stepMs
	}
	// The last evaluation time, as the engine counts them.
	q.end = q.start + (q.end-q.start)/stepMs*stepMs
	q.params = url.Values{}
	for k, v := range form {
		switch k {
		case "query", "start", "end", "nocache":
		default:
			q.params[k] = v
		}
	}
	q.noCache = get("nocache") == "1" || get("nocache") == "true" || noStore(r.Header)
	return q, true
}

func noStore(h http.Header) bool {
	for _, v := range h.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(d), "no-store") {
				return true
			}
		}
	}
	return false
}

// eval answers q: its parts, each from the cache or evaluated, merged.
func (f *Frontend) eval(ctx context.Context, q *rangeQuery) (*matrix, *queryapi.Error) {
	// The parts and shards select the same series, in row windows that
	// overlap: what the store learns of them once serves the rest
	// (readhint.Query), for this query only.
	ctx = readhint.WithQuery(ctx)
	parts := q.parts
	sem := make(chan struct{}, f.opts.Parallelism)
	results := make([]*matrix, len(parts))
	var keyText string
	var deps *dependence
	if f.cache != nil && !q.noCache {
		keyText = cacheKey(q)
		d := dependsOn(q.expr, q.lookback)
		deps = &d
	}
	err := f.fanOut(ctx, len(parts), "a part of the query", func(ctx context.Context, i int) (err *queryapi.Error) {
		p := parts[i]
		if keyText != "" {
			results[i], err = f.cachedPart(ctx, q, p, keyText, deps, sem)
		} else {
			results[i], err = f.evalRange(ctx, q, p.start, p.end, sem)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return concat(results), nil
}

// fanOut runs run(i) for i in [0, n) and waits for them all, on at most
// --query.parallelism goroutines (a query may have 11,000 parts, and no
// more of them than that can run at once anyway). The first error cancels
// the others' context and is returned; the parts not started yet then
// answer that context's error at once. A panic is its part's error:
// net/http recovers only a request's own goroutine, so unrecovered it
// would end the process.
func (f *Frontend) fanOut(ctx context.Context, n int, what string, run func(ctx context.Context, i int) *queryapi.Error) *queryapi.Error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr *queryapi.Error
		next     atomic.Int64
	)
	for range min(n, f.opts.Parallelism) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				err := func() (err *queryapi.Error) {
					defer func() {
						if p := recover(); p != nil {
							err = queryapi.ErrorOf(recovered.Err(f.logger, what, p))
						}
					}()
					return run(ctx, i)
				}()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// evalRange evaluates q over the evaluation times [start, end] with one
// sub-query, or one per shard.
func (f *Frontend) evalRange(ctx context.Context, q *rangeQuery, start, end int64, sem chan struct{}) (*matrix, *queryapi.Error) {
	f.metrics.parts.Inc()
	if q.shard == nil {
		return f.call(ctx, q.query, q, start, end, sem, nil)
	}
	m, ok, err := f.evalSharded(ctx, q, start, end, sem)
	if err != nil || ok {
		return m, err
	}
	// The shards' answers could not be combined exactly (histograms,
	// annotations whose positions name the shards' text): the part
	// whole.
	f.metrics.shardFallbacks.Inc()
	return f.call(ctx, q.query, q, start, end, sem, nil)
}

// call evaluates one sub-query of q with the query API's evaluator; with
// sh, one shard of it.
func (f *Frontend) call(ctx context.Context, query string, q *rangeQuery, start, end int64, sem chan struct{}, sh *shardOf) (*matrix, *queryapi.Error) {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return nil, contextError(ctx)
	}
	defer func() { <-sem }()
	if ctx.Err() != nil {
		return nil, contextError(ctx)
	}
	req := queryapi.RangeRequest{
		Query: query, Start: time.UnixMilli(start), End: time.UnixMilli(end), Step: time.Duration(q.step) * time.Millisecond,
		Params: q.params,
	}
	if sh != nil {
		req.ShardIndex, req.ShardCount = sh.index, sh.count
	}
	ans, err := f.inner.EvalRange(ctx, req, fromEngine)
	if err != nil {
		return nil, err
	}
	m := ans.Data.(*matrix)
	m.warnings, m.infos = ans.Warnings, ans.Infos
	return m, nil
}

// contextError is the answer to a query whose context ended while parts
// waited, in the engine's words as the query API gives them.
func contextError(ctx context.Context) *queryapi.Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return queryapi.ErrorOf(promql.ErrQueryTimeout("expression evaluation"))
	}
	return queryapi.ErrorOf(promql.ErrQueryCanceled("expression evaluation"))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
