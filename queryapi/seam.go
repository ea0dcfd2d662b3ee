package queryapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/annotations"
)

// The query API's range evaluation as a function, for the frontend
// (package frontend), which evaluates the parts and shards of a range
// query with it instead of a request and a JSON answer each.

// RangeRequest is a /api/v1/query_range request, read.
type RangeRequest struct {
	Query      string
	Start, End time.Time
	Step       time.Duration
	// Params are the request's other parameters, read as the handler
	// reads them: lookback_delta, max_source_resolution and timeout.
	Params url.Values
	// ShardCount > 0 reads only the series whose labels hash to
	// ShardIndex modulo ShardCount: one of the frontend's shards of an
	// aggregation.
	ShardIndex, ShardCount uint64
}

// RangeAnswer is the answer to a RangeRequest: what convert made of the
// engine's matrix, and the warnings and infos as the handler writes them.
type RangeAnswer struct {
	Data            any
	Warnings, Infos []string
}

// Error is the query API's error answer to a request.
type Error struct {
	api             *apiError
	warnings, infos []string
}

func (e *Error) Error() string { return e.api.Error() }

// ErrorOf is the query API's answer to err, an error of the engine or the
// store, or the frontend's own: the error type (and so the status code)
// the query API gives it (a recovered panic is internal, a
// promql.ErrQueryTimeout a timeout, ...).
func ErrorOf(err error) *Error { return &Error{api: classify(err)} }

// Respond writes the answer as the handler writes it: Prometheus's status
// code, error type and message, and the annotations, gzipped when r
// accepts it.
func (e *Error) Respond(w http.ResponseWriter, r *http.Request) {
	w, done := (*Compressor)(nil).compress(w, r)
	defer done()
	// An envelope of strings always encodes: nothing to log.
	write(w, slog.New(slog.DiscardHandler), e.api.typ.status(), &response{Status: "error", ErrorType: e.api.typ, Error: e.api.err.Error(), Warnings: e.warnings, Infos: e.infos})
}

// Respond writes ans, whose Data encodes as the "data" of the answer (the
// frontend's merged matrix, already JSON), as the handler writes a
// success: Prometheus's envelope, gzipped through c when r accepts it.
func (c *Compressor) Respond(w http.ResponseWriter, r *http.Request, logger *slog.Logger, ans RangeAnswer) {
	w, done := c.compress(w, r)
	defer done()
	write(w, logger, http.StatusOK, &response{Status: "success", Data: ans.Data, Warnings: ans.Warnings, Infos: ans.Infos})
}

// RangeHandler is the handler of /api/v1/query_range (Register names it
// "query_range"), which also evaluates a read request directly.
type RangeHandler struct {
	http.Handler
	api *API
}

// RangeHandler is the handler of /api/v1/query_range, for a frontend in
// front of it.
func (a *API) RangeHandler() RangeHandler {
	return RangeHandler{Handler: a.handler(a.queryRange, "query_range"), api: a}
}

// EvalRange evaluates req as the handler does, within --query.timeout
// (or req's shorter timeout parameter) from now, and gives the engine's
// matrix to convert before the engine's memory is reused: the matrix is
// valid only during that call.
func (h RangeHandler) EvalRange(ctx context.Context, req RangeRequest, convert func(promql.Matrix) any) (RangeAnswer, *Error) {
	a := h.api
	fail := func(e *apiError, ann annotations.Annotations) (RangeAnswer, *Error) {
		warn, info := ann.AsStrings(req.Query, maxAnnotations, maxAnnotations)
		return RangeAnswer{}, &Error{api: e, warnings: warn, infos: info}
	}
	timeout, apiErr := a.timeoutOf(req.Params)
	if apiErr != nil {
		return fail(apiErr, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	data, ann, apiErr := a.evalRange(ctx, req, func(_ promql.Query, res *promql.Result) (any, annotations.Annotations, error) {
		m, err := res.Matrix()
		if err != nil {
			return nil, res.Warnings, err
		}
		return convert(m), res.Warnings, nil
	})
	if apiErr != nil {
		return fail(apiErr, ann)
	}
	warn, info := ann.AsStrings(req.Query, maxAnnotations, maxAnnotations)
	return RangeAnswer{Data: data, Warnings: warn, Infos: info}, nil
}

// MaxQueryLength is the longest expression the query API accepts, in
// bytes (--query.max-length).
func (h RangeHandler) MaxQueryLength() int { return h.api.limits.MaxLength }

// Timeout is how long a query with the parameters params may take as a
// whole: --query.timeout, or its timeout parameter if shorter (a zero or
// negative one has passed at once, as in Prometheus). A timeout parameter
// that is no duration, or none an int64 of nanoseconds holds (NaN, 1e300,
// 300y), is the error the query API answers.
func (h RangeHandler) Timeout(params url.Values) (time.Duration, *Error) {
	d, apiErr := h.api.timeoutOf(params)
	if apiErr != nil {
		return 0, &Error{api: apiErr}
	}
	return d, nil
}

// FromRollups reports whether the query API would read every selector of
// expr, a range query from start at step with the request's parameters
// params (max_source_resolution), from rollups: its read plan, made as
// for the evaluation, without rewriting expr and without reading the
// store. Such a query reads a few cells per step and series, and needs
// neither parts nor shards to spread its reads over the cores.
func (h RangeHandler) FromRollups(expr parser.Expr, start time.Time, step time.Duration, params url.Values) bool {
	return h.api.fromRollups(expr, params, start, step)
}
