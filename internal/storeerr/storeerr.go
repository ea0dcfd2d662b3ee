// Package storeerr holds the kinds of error the store and its engines
// return, so that each edge (remote write and read, the admin endpoints,
// the query API) maps them to its own answer in one place, as Prometheus's
// storage/errors.go lets its web API do. A store error is a sentinel, or a
// typed error whose Is method names its sentinel; the edges test for them
// with errors.Is. The store knows nothing of HTTP.
package storeerr

import "errors"

var (
	// ErrInvalid: the store refuses the request whatever its state, so
	// retrying it is pointless: a selector over --query.max-metrics, a query
	// over --query.max-series, an invalid histogram, exemplar or series.
	ErrInvalid = errors.New("invalid request")
	// ErrUnavailable: the store cannot answer now but may soon: it is still
	// connecting, or the backend is overloaded. Worth retrying.
	ErrUnavailable = errors.New("store unavailable")
	// ErrTooManySamples: the reads of one query loaded more samples than
	// the limit its context carries (--query.max-samples).
	ErrTooManySamples = errors.New("the query loaded more samples than its limit")
)

// Invalid marks err as ErrInvalid, keeping its message.
func Invalid(err error) error { return &kindError{kind: ErrInvalid, err: err} }

// Unavailable marks err as ErrUnavailable, keeping its message.
func Unavailable(err error) error { return &kindError{kind: ErrUnavailable, err: err} }

type kindError struct {
	kind, err error
}

func (e *kindError) Error() string        { return e.err.Error() }
func (e *kindError) Unwrap() error        { return e.err }
func (e *kindError) Is(target error) bool { return target == e.kind }
