package queryapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
)

// errorType is the errorType field of an error answer; each has the HTTP
// status Prometheus's API gives it, which clients such as Grafana rely on to
// tell a bad query (do not retry) from an overloaded server.
type errorType string

const (
	errBadData     errorType = "bad_data"
	errExec        errorType = "execution"
	errTimeout     errorType = "timeout"
	errCanceled    errorType = "canceled"
	errInternal    errorType = "internal"
	errUnavailable errorType = "unavailable"
)

func (t errorType) status() int {
	switch t {
	case errBadData:
		return http.StatusBadRequest
	case errExec:
		return http.StatusUnprocessableEntity
	case errTimeout, errUnavailable:
		return http.StatusServiceUnavailable
	case errCanceled:
		return 499 // client closed request, as Prometheus answers
	}
	return http.StatusInternalServerError
}

type apiError struct {
	typ errorType
	err error
}

func (e *apiError) Error() string { return e.err.Error() }

func badData(err error) *apiError { return &apiError{errBadData, err} }

// badParam names the parameter that was wrong, in Prometheus's words.
func badParam(err error, name string) *apiError {
	return badData(fmt.Errorf("invalid parameter %q: %w", name, err))
}

// classify maps an error from the engine or the store to an error type:
// the engine's own error types first, then what the store says of itself
// (a query over --query.max-metrics is the caller's fault, a store still
// connecting is unavailable), then execution, as Prometheus does.
func classify(err error) *apiError {
	var (
		canceled promql.ErrQueryCanceled
		timeout  promql.ErrQueryTimeout
	)
	switch {
	case errors.Is(err, recovered.ErrPanic):
		return &apiError{errInternal, err}
	case errors.Is(err, storeerr.ErrTooManySamples):
		// The store's budget (Options.SampleLimit) is how
		// --query.max-samples bounds a query: Prometheus's answer to a
		// query over its own --query.max-samples.
		return &apiError{errExec, promql.ErrTooManySamples("query execution")}
	case errors.As(err, &canceled):
		return &apiError{errCanceled, err}
	case errors.As(err, &timeout), errors.Is(err, context.DeadlineExceeded):
		return &apiError{errTimeout, err}
	case errors.Is(err, context.Canceled):
		return &apiError{errCanceled, err}
	case errors.Is(err, storeerr.ErrInvalid):
		return &apiError{errBadData, err}
	case errors.Is(err, storeerr.ErrUnavailable):
		return &apiError{errUnavailable, err}
	}
	var storageErr promql.ErrStorage
	if errors.As(err, &storageErr) {
		return &apiError{errInternal, err}
	}
	return &apiError{errExec, err}
}

// storeError is classify for a store call outside PromQL (metadata,
// deletes): an error of no known kind is the store's failure, 500
// internal, where a query's would be its evaluation's.
func storeError(err error) *apiError {
	e := classify(err)
	if e.typ == errExec {
		e.typ = errInternal
	}
	return e
}

// response is Prometheus's API envelope.
type response struct {
	Status    string    `json:"status"`
	Data      any       `json:"data,omitempty"`
	ErrorType errorType `json:"errorType,omitempty"`
	Error     string    `json:"error,omitempty"`
	Warnings  []string  `json:"warnings,omitempty"`
	Infos     []string  `json:"infos,omitempty"`
}

// maxAnnotations caps warnings and infos per answer, as Prometheus does, so
// that a query over many series cannot make the answer mostly warnings.
const maxAnnotations = 10

func write(w http.ResponseWriter, logger *slog.Logger, code int, resp *response) {
	b, err := jsonAPI.Marshal(resp)
	if err != nil {
		logger.Error("Cannot encode query API answer", "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func respond(w http.ResponseWriter, logger *slog.Logger, data any, ann annotations.Annotations, query string) {
	warn, info := ann.AsStrings(query, maxAnnotations, maxAnnotations)
	write(w, logger, http.StatusOK, &response{Status: "success", Data: data, Warnings: warn, Infos: info})
}

func respondError(w http.ResponseWriter, logger *slog.Logger, e *apiError, ann annotations.Annotations, query string) {
	warn, info := ann.AsStrings(query, maxAnnotations, maxAnnotations)
	write(w, logger, e.typ.status(), &response{Status: "error", ErrorType: e.typ, Error: e.err.Error(), Warnings: warn, Infos: info})
}

// Compressor gzips answers when the request accepts gzip, as Prometheus
// compresses its answers: a range query over many series answers megabytes
// of JSON that compresses tenfold. With Prometheus's compressor (klauspost's
// gzip), not the standard library's, which took twice the CPU for the same
// answer (BenchmarkRespond); at level 2, not Prometheus's default: the
// default cost a large share of a rollup panel's CPU for answers barely
// smaller, and level 1 (BestSpeed) lost most of what repetitive answers
// (counts) compress to (BENCHMARKS.md, "Issue #30: a rollup year in one
// part", has the figures).
//
// It keeps the writers of finished answers for the next: a new one
// allocates its compressor's tables, about 1 MiB, which cost a small answer
// more than compressing it. A sync.Pool lost them at every other garbage
// collection, which a busy query API runs every few answers; this list
// keeps gzipFree of them (gzipFree MiB) for good. A writer is only a cache
// of those tables: Reset leaves nothing of the answer before. Each part
// that answers (the query API, the frontend) owns one; a nil Compressor
// keeps none (error answers, which are small and rare).
type Compressor struct{ free chan *gzip.Writer }

const gzipFree = 4

// NewCompressor is a Compressor that keeps gzipFree writers.
func NewCompressor() *Compressor {
	return &Compressor{free: make(chan *gzip.Writer, gzipFree)}
}

// compress is w gzipped when r accepts gzip; done ends the stream.
func (c *Compressor) compress(w http.ResponseWriter, r *http.Request) (_ http.ResponseWriter, done func()) {
	if !acceptsGzip(r) {
		return w, func() {}
	}
	w.Header().Set("Content-Encoding", "gzip")
	w.Header().Add("Vary", "Accept-Encoding")
	var free chan *gzip.Writer
	if c != nil {
		free = c.free
	}
	var gz *gzip.Writer
	select {
	case gz = <-free:
		gz.Reset(w)
	default:
		gz, _ = gzip.NewWriterLevel(w, 2) // a valid level: no error
	}
	return gzipWriter{ResponseWriter: w, w: gz}, func() {
		_ = gz.Close()
		gz.Reset(io.Discard) // no answer's writer stays reachable from the free list
		select {
		case free <- gz:
		default:
		}
	}
}

func acceptsGzip(r *http.Request) bool {
	for _, enc := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if name, params, _ := strings.Cut(strings.TrimSpace(enc), ";"); strings.EqualFold(name, "gzip") {
			return strings.ReplaceAll(params, " ", "") != "q=0"
		}
	}
	return false
}

type gzipWriter struct {
	http.ResponseWriter
	w *gzip.Writer
}

func (g gzipWriter) Write(b []byte) (int, error) { return g.w.Write(b) }
