// Package queryapi serves Prometheus's query API (/api/v1/query,
// /api/v1/query_range, /api/v1/series, /api/v1/labels, ...) over the store,
// with PromQL evaluated by Prometheus's own engine, so Grafana's Prometheus
// data source can point at the adapter directly. It is the one place of
// every /api/v1/ path but remote write and read: /api/v1/metadata and the
// admin API's delete_series (admin.go) too, and the web UI's status
// endpoints through JSON, all in one envelope.
//
// It does not import Prometheus's web/api/v1: that package brings the
// scrape, rules, remote-storage and service-discovery code (cloud SDKs
// included) into the binary. The handlers here are small and follow its
// parameters, JSON shapes, status codes and error types.
package queryapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/prometheus/prometheus/util/stats"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// Store is what the query API reads: the adapter's Store has it.
type Store interface {
	Querier(mint, maxt int64) (storage.Querier, error)
}

// ExemplarStore is what /api/v1/query_exemplars needs; without it the
// endpoint answers an empty list.
type ExemplarStore interface {
	Exemplars(ctx context.Context, start, end int64, ms ...*labels.Matcher) ([]exemplar.QueryResult, error)
}

// Options are the engine's limits, named after Prometheus's --query.* flags.
type Options struct {
	// Timeout bounds one query; a request's timeout parameter can only
	// shorten it. Default 2m.
	Timeout time.Duration
	// LookbackDelta is how far back an instant selector looks for a
	// sample; default 5m.
	LookbackDelta time.Duration
	// MaxConcurrency is the number of queries evaluated at once; more wait
	// for a slot (until their timeout). Default 20.
	MaxConcurrency int
	// MaxSamples bounds two quantities of one query, each checked in one
	// place (over either: 422 execution, with Prometheus's too-many-samples
	// answer); 0 means no limit. What its selectors read from the store,
	// all together: the store's budget that SampleLimit puts in the
	// query's context, which stops a read before it is made. And what the
	// engine holds at once, Prometheus's own meaning of the flag: a sample
	// read once can be held at every step of its lookback, so a range
	// query of a million one-sample series at a 1 s step would hold 300
	// points per sample; only the engine's count bounds that memory.
	MaxSamples int
	// SampleLimit returns a context under which the store's reads of one
	// query load at most limit samples in all and then fail with
	// storeerr.ErrTooManySamples (kairosstore.WithSampleLimit, passed by
	// main.go, so that this package does not import the store). Required
	// when MaxSamples is set.
	SampleLimit func(ctx context.Context, limit int) context.Context
	// EvaluationInterval is the step of a subquery that gives none, as
	// Prometheus's global evaluation_interval; default 1m.
	EvaluationInterval time.Duration
	// Limits bound the expressions themselves; zero fields take the
	// defaults.
	Limits Limits
	// EnableAdminAPI serves POST/PUT /api/v1/admin/tsdb/delete_series when
	// the store implements Deleter, and the other admin calls below. Off by default, as in Prometheus: it
	// deletes data without asking.
	EnableAdminAPI bool
	// Rollups, when set, serves POST /api/v1/admin/rollups/recompute (with
	// the admin API on): it returns the rollup job, nil until the store is
	// open.
	Rollups func() Recomputer
	// Snapshot, when set, serves POST/PUT /api/v1/admin/tsdb/snapshot (with
	// the admin API on): it snapshots the store and returns the snapshot's
	// name (admin.go).
	Snapshot func(ctx context.Context) (name string, err error)
	// RollupResolutions are the resolutions rollups are kept at, and
	// MaxSourceResolution the default of the max_source_resolution
	// parameter ("" is auto): rollups.go.
	RollupResolutions   []rollup.Resolution
	MaxSourceResolution string
	// Parser parses queries; nil means Prometheus's own with its default
	// options (a test counts parses with its own).
	Parser parser.Parser
	// RangeFrontend leaves /api/v1/query_range out of Register: a frontend
	// over RangeHandler serves it (frontend.Register; main.go).
	RangeFrontend bool
	// Runtime is what /api/v1/status/runtimeinfo and /api/v1/status/flags
	// answer of the process (status.go).
	Runtime Runtime
}

// API serves the query endpoints.
type API struct {
	store         Store
	runtime       Runtime
	maxSamples    int
	sampleLimit   func(context.Context, int) context.Context
	limits        Limits
	timeout       time.Duration
	evalInterval  int64 // ms
	gate          gate
	adminAPI      bool
	rangeFrontend bool
	rollups       func() Recomputer
	snapshot      func(context.Context) (string, error)
	engine        *promql.Engine
	parser        parser.Parser
	prepared      *prepared // the engine's parser
	logger        *slog.Logger
	gzip          *Compressor
	now           func() time.Time
	// What rollups.go plans reads with.
	lookback    time.Duration
	resolutions []rollup.Resolution // largest first
	sourceRes   sourceResolution
}

// MaxPoints is the most points a range query may return per series, as in
// Prometheus: a week at 60 s resolution. The frontend leaves a query over
// it to the query API whole, to be refused here.
const MaxPoints = 11000

// tooManyPoints is Prometheus's check of MaxPoints, (end-start)/step, with
// the span counted in ms where time.Time.Sub saturates (past 292 years):
// saturated, Prometheus's own check passes 2·10^10 steps between its
// minimum and maximum times, and the engine and the reads it plans would
// walk them.
func tooManyPoints(start, end time.Time, step time.Duration) bool {
	if d := end.Sub(start); d < math.MaxInt64 {
		return d/step > MaxPoints
	}
	return timeparam.Steps(start.UnixMilli(), end.UnixMilli(), max(step.Milliseconds(), 1))-1 > MaxPoints
}

// New builds the engine; its metrics (prometheus_engine_*) go to reg.
func New(store Store, opts Options, logger *slog.Logger, reg prometheus.Registerer) *API {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts.Timeout = cmpOr(opts.Timeout, 2*time.Minute)
	opts.LookbackDelta = cmpOr(opts.LookbackDelta, 5*time.Minute)
	opts.EvaluationInterval = cmpOr(opts.EvaluationInterval, time.Minute)
	if opts.MaxConcurrency <= 0 {
		opts.MaxConcurrency = 20
	}
	if opts.MaxSamples > 0 && opts.SampleLimit == nil {
		panic("queryapi: Options.MaxSamples needs Options.SampleLimit, the store's budget")
	}
	p := opts.Parser
	if p == nil {
		p = parser.NewParser(parser.Options{})
	}
	prep := &prepared{Parser: p}
	interval := opts.EvaluationInterval.Milliseconds()
	g := newGate(opts.MaxConcurrency)
	eng := promql.NewEngine(promql.EngineOpts{
		Logger:                   logger,
		Reg:                      reg,
		MaxSamples:               engineMaxSamples(opts.MaxSamples),
		Timeout:                  opts.Timeout,
		ActiveQueryTracker:       g,
		LookbackDelta:            opts.LookbackDelta,
		NoStepSubqueryIntervalFn: func(int64) int64 { return interval },
		// Both are always on in Prometheus 3.
		EnableAtModifier:     true,
		EnableNegativeOffset: true,
		Parser:               prep,
	})
	src, err := parseSourceResolution(opts.MaxSourceResolution, opts.RollupResolutions)
	if err != nil {
		logger.Error("Default max_source_resolution unusable, auto instead", "err", err)
		src = sourceResolution{auto: true}
	}
	return &API{
		store: store, maxSamples: max(opts.MaxSamples, 0), sampleLimit: opts.SampleLimit, limits: opts.Limits.withDefaults(), timeout: opts.Timeout,
		evalInterval: interval, gate: g, adminAPI: opts.EnableAdminAPI, rangeFrontend: opts.RangeFrontend, runtime: opts.Runtime, rollups: opts.Rollups, snapshot: opts.Snapshot, engine: eng, parser: p, prepared: prep, logger: logger, gzip: NewCompressor(), now: time.Now,
		lookback: opts.LookbackDelta, resolutions: sortResolutions(opts.RollupResolutions), sourceRes: src,
	}
}

// engineMaxSamples is the engine's limit for --query.max-samples; the
// engine has no "no limit" value.
func engineMaxSamples(n int) int {
	if n <= 0 {
		return math.MaxInt
	}
	return n
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Register passes each route of the query API to handle: a ServeMux
// pattern, a short name for metrics, and the handler (adapter.Routes.Handle:
// the process's route table, under its request metrics).
func (a *API) Register(handle func(pattern, name string, h http.Handler)) {
	for _, r := range []struct {
		path, name string
		f          func(*http.Request) (any, annotations.Annotations, *apiError)
	}{
		{"/api/v1/query", "query", a.query},
		{"/api/v1/query_range", "query_range", a.queryRange},
		{"/api/v1/series", "series", a.series},
		{"/api/v1/labels", "labels", a.labelNames},
		{"/api/v1/query_exemplars", "query_exemplars", a.queryExemplars},
		{"/api/v1/format_query", "format_query", a.formatQuery},
		{"/api/v1/parse_query", "parse_query", a.parseQuery},
	} {
		var h http.Handler = a.handler(r.f, r.name)
		if r.name == "query_range" {
			if a.rangeFrontend {
				continue
			}
			h = a.RangeHandler()
		}
		handle("GET "+r.path, r.name, h)
		handle("POST "+r.path, r.name, h)
	}
	handle("GET /api/v1/label/{name}/values", "label_values", a.handler(a.labelValues, "label_values"))
	handle("GET /api/v1/status/buildinfo", "buildinfo", a.handler(a.buildInfo, "buildinfo"))
	handle("GET /api/v1/status/runtimeinfo", "runtimeinfo", a.handler(a.runtimeInfo, "runtimeinfo"))
	handle("GET /api/v1/status/flags", "flags", a.handler(a.flags, "flags"))
	handle("GET /api/v1/metadata", "metadata", a.handler(a.metadata, "metadata"))
	if _, ok := a.store.(Deleter); ok && a.adminAPI {
		h := a.handler(a.deleteSeries, "delete_series")
		handle("POST /api/v1/admin/tsdb/delete_series", "delete_series", h)
		handle("PUT /api/v1/admin/tsdb/delete_series", "delete_series", h)
	}
	if a.rollups != nil && a.adminAPI {
		handle("POST /api/v1/admin/rollups/recompute", "rollups_recompute", a.handler(a.recomputeRollups, "rollups_recompute"))
	}
	if a.snapshot != nil && a.adminAPI {
		h := a.handler(a.snapshotStore, "snapshot")
		handle("POST /api/v1/admin/tsdb/snapshot", "snapshot", h)
		handle("PUT /api/v1/admin/tsdb/snapshot", "snapshot", h)
	}
}

// MaxFormBytes bounds a request body of the query API. Go's form parser
// stops at 10 MB of url-encoded body already; the bound also keeps the parts
// of a multipart body in memory, never in temporary files. The frontend
// reads no more of a body, and leaves a larger one to the query API.
const MaxFormBytes = 10 << 20

// handler parses the form and writes the envelope. The form is read as
// Prometheus reads it: query string, url-encoded or multipart body, and
// malformed parts ignored, except where Prometheus refuses them (strict:
// /series). The request's context ends at its deadline: --query.timeout, or
// the timeout parameter of a query if shorter, counted from the request's
// arrival so that it covers parsing as well as evaluation.
func (a *API) handler(f func(*http.Request) (any, annotations.Annotations, *apiError), name string) http.Handler {
	// A delete is refused whole on a malformed form, as Prometheus's is,
	// rather than run on what could be read of it.
	strict := name == "series" || name == "delete_series"
	// The admin calls change what they cover: run on part of a form, a
	// recomputation that lost its match[] would cover every metric.
	whole := strict || name == "rollups_recompute" || name == "snapshot"
	timeoutParam := name == "query" || name == "query_range"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A delete answers 204, with no body to compress.
		if name != "delete_series" {
			var done func()
			w, done = a.gzip.compress(w, r)
			defer done()
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
		formErr := r.ParseForm()
		// /series reads match[] before anything parses a multipart
		// body in Prometheus, so a multipart /series has no match[].
		if !strict {
			if err := r.ParseMultipartForm(MaxFormBytes); formErr == nil && !errors.Is(err, http.ErrNotMultipart) {
				formErr = err
			}
		}
		if _, ok := errors.AsType[*http.MaxBytesError](formErr); ok {
			respondError(w, a.logger, badData(fmt.Errorf("the request body is larger than %d bytes", MaxFormBytes)), nil, "")
			return
		}
		if whole && formErr != nil {
			respondError(w, a.logger, badData(fmt.Errorf("error parsing form values: %w", formErr)), nil, "")
			return
		}
		timeout := a.timeout
		if timeoutParam {
			var apiErr *apiError
			if timeout, apiErr = a.timeoutOf(r.Form); apiErr != nil {
				respondError(w, a.logger, apiErr, nil, "")
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		data, ann, apiErr := f(r.WithContext(ctx))
		q := r.FormValue("query")
		if apiErr != nil {
			respondError(w, a.logger, apiErr, ann, q)
			return
		}
		if data == (noContent{}) {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		respond(w, a.logger, data, ann, q)
	})
}

// timeoutOf is a query's timeout: --query.timeout, or the request's
// timeout parameter if shorter.
func (a *API) timeoutOf(form url.Values) (time.Duration, *apiError) {
	if s := form.Get("timeout"); s != "" {
		d, err := parseDuration(s)
		if err != nil {
			return 0, badParam(err, "timeout")
		}
		return min(a.timeout, d), nil
	}
	return a.timeout, nil
}

func (a *API) query(r *http.Request) (any, annotations.Annotations, *apiError) {
	limit, err := parseLimit(r.FormValue("limit"))
	if err != nil {
		return nil, nil, badParam(err, "limit")
	}
	ts, err := timeParam(r, "time", a.now())
	if err != nil {
		return nil, nil, badParam(err, "time")
	}
	opts, apiErr := queryOpts(r.Form)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	expr, hints, apiErr := a.check(r.FormValue("query"), r.Form, opts, ts, 0)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	ctx := a.sampleBudget(r.Context())
	handle := a.prepared.put(expr)
	qry, err := a.engine.NewInstantQuery(ctx, a.queryable(shard{}, hints), opts, handle, ts)
	a.prepared.drop(handle)
	if err != nil {
		return nil, nil, newQueryError(ctx, err)
	}
	if apiErr := a.checkSteps(qry, ts, ts, 0); apiErr != nil {
		qry.Close()
		return nil, nil, apiErr
	}
	return a.exec(ctx, qry, encodeJSON(limit, r.FormValue("stats")))
}

func (a *API) queryRange(r *http.Request) (any, annotations.Annotations, *apiError) {
	limit, err := parseLimit(r.FormValue("limit"))
	if err != nil {
		return nil, nil, badParam(err, "limit")
	}
	start, err := parseTime(r.FormValue("start"))
	if err != nil {
		return nil, nil, badParam(err, "start")
	}
	end, err := parseTime(r.FormValue("end"))
	if err != nil {
		return nil, nil, badParam(err, "end")
	}
	step, err := parseDuration(r.FormValue("step"))
	if err != nil {
		return nil, nil, badParam(err, "step")
	}
	req := RangeRequest{Query: r.FormValue("query"), Start: start, End: end, Step: step, Params: r.Form}
	return a.evalRange(r.Context(), req, encodeJSON(limit, r.FormValue("stats")))
}

// evalRange evaluates a range query; out makes the answer's data of the
// engine's result.
func (a *API) evalRange(ctx context.Context, req RangeRequest, out output) (any, annotations.Annotations, *apiError) {
	start, end, step := req.Start, req.End, req.Step
	if end.Before(start) {
		return nil, nil, badParam(errors.New("end timestamp must not be before start time"), "end")
	}
	if step <= 0 {
		return nil, nil, badParam(errors.New("zero or negative query resolution step widths are not accepted. Try a positive integer"), "step")
	}
	if tooManyPoints(start, end, step) {
		return nil, nil, badData(errors.New("exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"))
	}
	opts, apiErr := queryOpts(req.Params)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	expr, hints, apiErr := a.check(req.Query, req.Params, opts, start, step)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	qctx := a.sampleBudget(ctx)
	handle := a.prepared.put(expr)
	qry, err := a.engine.NewRangeQuery(qctx, a.queryable(shard{req.ShardIndex, req.ShardCount}, hints), opts, handle, start, end, step)
	a.prepared.drop(handle)
	if err != nil {
		return nil, nil, newQueryError(qctx, err)
	}
	if apiErr := a.checkSteps(qry, start, end, step); apiErr != nil {
		qry.Close()
		return nil, nil, apiErr
	}
	return a.exec(qctx, qry, out)
}

// check parses a request's query within the limits and plans its reads
// (planReads): the tree the engine evaluates (prepared) and the read hints
// of its selectors. The steps of its subqueries are counted once the
// engine has prepared it (checkSteps), before it runs.
func (a *API) check(q string, form url.Values, opts promql.QueryOpts, start time.Time, step time.Duration) (parser.Expr, selectorHints, *apiError) {
	expr, err := a.parse(q)
	if err != nil {
		return nil, nil, badParam(err, "query")
	}
	return a.planReads(form, opts, expr, start, step)
}

// sampleBudget gives a PromQL query a budget of --query.max-samples samples
// for what its selectors load. The engine's own limit (Options.MaxSamples)
// counts only the samples it keeps, after its selectors have read every
// series they select, so with it alone a query's reads would follow the
// data it covers, not the limit.
func (a *API) sampleBudget(ctx context.Context) context.Context {
	if a.maxSamples == 0 {
		return ctx
	}
	return a.sampleLimit(ctx, a.maxSamples)
}

// newQueryError is the answer to an engine that would not start a query:
// a query that waited for a slot until its deadline timed out; anything
// else is the expression's fault.
func newQueryError(ctx context.Context, err error) *apiError {
	if ctx.Err() != nil {
		return deadlineError(ctx)
	}
	return badParam(err, "query")
}

// execGrace is how long an answer may wait past the deadline for the
// engine's own: it notices its deadline between steps and series, and its
// answer then says where it stopped.
const execGrace = 100 * time.Millisecond

type execResult struct {
	data any
	ann  annotations.Annotations
	err  *apiError
}

// output makes the data of an answer of the engine's result, which refers
// to the engine's pooled slices, reused once the query is closed: it runs
// before.
type output func(qry promql.Query, res *promql.Result) (any, annotations.Annotations, error)

// encodeJSON is the handlers' output: the result as JSON, with at most
// limit series (0: all), and the engine's statistics (timings and samples)
// as Prometheus's answer carries them for any non-empty stats parameter;
// a value other than "true" and "all" also gets Prometheus's warning that
// it is deprecated.
func encodeJSON(limit int, statsParam string) output {
	return func(qry promql.Query, res *promql.Result) (any, annotations.Annotations, error) {
		ann := res.Warnings
		if limit > 0 && truncate(res, limit) {
			ann = ann.Add(errors.New("results truncated due to limit"))
		}
		var qs stats.QueryStats
		if statsParam != "" {
			qs = stats.NewQueryStats(qry.Stats())
		}
		if statsParam != "" && statsParam != "true" && statsParam != "all" {
			ann = ann.Add(fmt.Errorf("value %q for parameter \"stats\" is deprecated and will be rejected in the next major release, use \"true\" or \"all\"", statsParam))
		}
		b, err := encodeResult(res.Value, qs)
		return b, ann, err
	}
}

// exec evaluates a query and answers at its deadline at the latest: the
// engine goes on until its next check of the context, which the limits keep
// short, and then closes the query and frees its slot.
func (a *API) exec(ctx context.Context, qry promql.Query, out output) (any, annotations.Annotations, *apiError) {
	done := make(chan execResult, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- execResult{err: &apiError{errInternal, recovered.Err(a.logger, "query", p)}}
			}
		}()
		done <- run(ctx, qry, out)
	}()
	var res execResult
	select {
	case res = <-done:
	case <-ctx.Done():
		select {
		case res = <-done:
		case <-time.After(execGrace):
			return nil, nil, deadlineError(ctx)
		}
	}
	if res.err != nil {
		return nil, res.ann, res.err
	}
	return res.data, res.ann, nil
}

// deadlineError is the answer to a query whose context ended, in the
// engine's words.
func deadlineError(ctx context.Context) *apiError {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return classify(promql.ErrQueryTimeout("expression evaluation"))
	}
	return classify(promql.ErrQueryCanceled("expression evaluation"))
}

func run(ctx context.Context, qry promql.Query, out output) execResult {
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		return execResult{ann: res.Warnings, err: classify(res.Err)}
	}
	data, ann, err := out(qry, res)
	if err != nil {
		return execResult{ann: ann, err: &apiError{errInternal, err}}
	}
	return execResult{data: data, ann: ann}
}

// truncate keeps the first limit series of a vector or matrix.
func truncate(res *promql.Result, limit int) bool {
	switch v := res.Value.(type) {
	case promql.Vector:
		if len(v) > limit {
			res.Value = v[:limit]
			return true
		}
	case promql.Matrix:
		if len(v) > limit {
			res.Value = v[:limit]
			return true
		}
	}
	return false
}

func queryOpts(form url.Values) (promql.QueryOpts, *apiError) {
	var lookback time.Duration
	if s := form.Get("lookback_delta"); s != "" {
		d, err := parseDuration(s)
		if err != nil {
			return nil, badData(fmt.Errorf("error parsing lookback delta duration: %w", err))
		}
		lookback = d
	}
	// Per-step statistics, as Prometheus asks them for stats=all; the
	// engine, like Prometheus's without --enable-feature=promql-per-step-stats,
	// does not collect them. No start timestamps: the store keeps none, so
	// the engine's default (off) stands.
	return promql.NewPrometheusQueryOpts(form.Get("stats") == "all", lookback, nil), nil
}

// labelParams are the parameters /labels, /label/<name>/values and /series
// share.
type labelParams struct {
	limit      int
	start, end int64
	sets       [][]*labels.Matcher
}

func (a *API) labelParams(r *http.Request) (labelParams, *apiError) {
	var p labelParams
	var err error
	if p.limit, err = parseLimit(r.FormValue("limit")); err != nil {
		return p, badParam(err, "limit")
	}
	start, err := timeParam(r, "start", minTime)
	if err != nil {
		return p, badParam(err, "start")
	}
	end, err := timeParam(r, "end", maxTime)
	if err != nil {
		return p, badParam(err, "end")
	}
	p.start, p.end = start.UnixMilli(), end.UnixMilli()
	if p.sets, err = parseMatchers(a.parser, r.Form["match[]"]); err != nil {
		return p, badData(err)
	}
	return p, nil
}

// hintLimit asks the store for one more than the limit, so that a truncated
// answer can say so.
func hintLimit(limit int) int {
	if limit > 0 && limit < math.MaxInt {
		return limit + 1
	}
	return limit
}

func (a *API) labelNames(r *http.Request) (any, annotations.Annotations, *apiError) {
	p, apiErr := a.labelParams(r)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	return a.labelQuery(p, func(q storage.Querier, hints *storage.LabelHints, ms []*labels.Matcher) ([]string, annotations.Annotations, error) {
		return q.LabelNames(r.Context(), hints, ms...)
	})
}

func (a *API) labelValues(r *http.Request) (any, annotations.Annotations, *apiError) {
	name := r.PathValue("name")
	if strings.HasPrefix(name, "U__") {
		name = model.UnescapeName(name, model.ValueEncodingEscaping)
	}
	if !model.UTF8Validation.IsValidLabelName(name) {
		return nil, nil, badData(fmt.Errorf("invalid label name: %q", name))
	}
	p, apiErr := a.labelParams(r)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	return a.labelQuery(p, func(q storage.Querier, hints *storage.LabelHints, ms []*labels.Matcher) ([]string, annotations.Annotations, error) {
		return q.LabelValues(r.Context(), name, hints, ms...)
	})
}

// labelQuery runs a label names or values lookup once per match[] set (or
// once without matchers) and merges the answers, sorted.
func (a *API) labelQuery(p labelParams, f func(storage.Querier, *storage.LabelHints, []*labels.Matcher) ([]string, annotations.Annotations, error)) (any, annotations.Annotations, *apiError) {
	q, err := a.store.Querier(p.start, p.end)
	if err != nil {
		return nil, nil, classify(err)
	}
	defer q.Close()
	hints := &storage.LabelHints{Limit: hintLimit(p.limit)}
	sets := p.sets
	if len(sets) == 0 {
		sets = [][]*labels.Matcher{nil}
	}
	var (
		out []string
		ann annotations.Annotations
	)
	for _, ms := range sets {
		vals, w, err := f(q, hints, ms)
		ann.Merge(w)
		if err != nil {
			return nil, ann, classify(err)
		}
		out = append(out, vals...)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []string{}
	}
	if p.limit > 0 && len(out) > p.limit {
		out = out[:p.limit]
		ann = ann.Add(errors.New("results truncated due to limit"))
	}
	return out, ann, nil
}

func (a *API) series(r *http.Request) (any, annotations.Annotations, *apiError) {
	if len(r.Form["match[]"]) == 0 {
		return nil, nil, badData(errors.New("no match[] parameter provided"))
	}
	p, apiErr := a.labelParams(r)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	q, err := a.store.Querier(p.start, p.end)
	if err != nil {
		return nil, nil, classify(err)
	}
	defer q.Close()
	ctx := r.Context()
	// Func "series" tells the store that no sample is needed.
	hints := &storage.SelectHints{Start: p.start, End: p.end, Func: "series", Limit: hintLimit(p.limit)}
	var set storage.SeriesSet
	if len(p.sets) == 1 {
		set = q.Select(ctx, false, hints, p.sets[0]...)
	} else {
		sets := make([]storage.SeriesSet, 0, len(p.sets))
		for _, ms := range p.sets {
			sets = append(sets, q.Select(ctx, true, hints, ms...))
		}
		set = storage.NewMergeSeriesSet(sets, 0, storage.ChainedSeriesMerge)
	}
	out := []labels.Labels{}
	var ann annotations.Annotations
	for set.Next() {
		if p.limit > 0 && len(out) == p.limit {
			ann = ann.Add(errors.New("results truncated due to limit"))
			break
		}
		out = append(out, set.At().Labels())
	}
	ann.Merge(set.Warnings())
	if err := set.Err(); err != nil {
		return nil, ann, classify(err)
	}
	b, err := encodeSeries(out)
	if err != nil {
		return nil, ann, &apiError{errInternal, err}
	}
	return b, ann, nil
}

func (a *API) queryExemplars(r *http.Request) (any, annotations.Annotations, *apiError) {
	start, err := timeParam(r, "start", minTime)
	if err != nil {
		return nil, nil, badParam(err, "start")
	}
	end, err := timeParam(r, "end", maxTime)
	if err != nil {
		return nil, nil, badParam(err, "end")
	}
	if end.Before(start) {
		return nil, nil, badData(errors.New("end timestamp must not be before start timestamp"))
	}
	expr, err := a.parse(r.FormValue("query"))
	if err != nil {
		return nil, nil, badData(err)
	}
	var out []exemplar.QueryResult
	es, ok := a.store.(ExemplarStore)
	if !ok {
		return json.RawMessage("[]"), nil, nil
	}
	seen := map[uint64]bool{}
	for _, ms := range parser.ExtractSelectors(expr) {
		res, err := es.Exemplars(r.Context(), start.UnixMilli(), end.UnixMilli(), ms...)
		if err != nil {
			return nil, nil, classify(err)
		}
		for _, qr := range res {
			if h := qr.SeriesLabels.Hash(); seen[h] {
				continue
			} else {
				seen[h] = true
			}
			out = append(out, qr)
		}
	}
	slices.SortFunc(out, func(x, y exemplar.QueryResult) int { return labels.Compare(x.SeriesLabels, y.SeriesLabels) })
	b, err := encodeExemplars(out)
	if err != nil {
		return nil, nil, &apiError{errInternal, err}
	}
	return b, nil, nil
}

func (a *API) formatQuery(r *http.Request) (any, annotations.Annotations, *apiError) {
	expr, apiErr := a.parseInGate(r)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	return expr.Pretty(0), nil, nil
}

// parseInGate parses the query of /format_query and /parse_query as a
// query's: within the limits, which also bound the time Pretty takes, and
// in one of the --query.max-concurrency slots.
func (a *API) parseInGate(r *http.Request) (parser.Expr, *apiError) {
	if _, err := a.gate.Insert(r.Context(), ""); err != nil {
		return nil, deadlineError(r.Context())
	}
	defer a.gate.Delete(0)
	expr, err := a.parse(r.FormValue("query"))
	if err != nil {
		return nil, badParam(err, "query")
	}
	return expr, nil
}

// buildInfo answers as Prometheus's /api/v1/status/buildinfo. Version is
// the Prometheus release whose PromQL engine the adapter embeds (module
// v0.313.5 is Prometheus 3.13.5), because clients such as Grafana read it
// to decide which PromQL features they may use; revision and date are the
// adapter's own.
func (a *API) buildInfo(*http.Request) (any, annotations.Annotations, *apiError) {
	info := map[string]string{"version": "", "revision": "", "branch": "", "buildUser": "", "buildDate": "", "goVersion": runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/prometheus/prometheus" {
				info["version"] = promRelease(d.Version)
			}
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info["revision"] = s.Value
			case "vcs.time":
				info["buildDate"] = s.Value
			}
		}
	}
	return info, nil, nil
}

// promRelease turns the Go module version of Prometheus into its release:
// v0.313.5 is 3.13.5.
func promRelease(v string) string {
	var minor, patch int
	if _, err := fmt.Sscanf(v, "v0.%d.%d", &minor, &patch); err != nil || minor < 300 {
		return strings.TrimPrefix(v, "v")
	}
	return fmt.Sprintf("%d.%d.%d", minor/100, minor%100, patch)
}
