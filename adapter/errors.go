package adapter

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/prometheus/storage"

	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
)

// statusOf maps an error to the HTTP status of the answer, for every
// handler of this package alike: this is the one place where the store's
// errors (package storeerr) become statuses. The handler's own errors carry
// theirs; a request the store refuses is 400; a store that cannot answer
// now, or a deadline, is a transient overload, so 503 makes Prometheus
// retry; a ref the store forgot, given again without labels, is a bug here,
// so 500 makes the sender retry rather than lose the series; everything
// else gets the caller's fallback (400 for a rejected series, 500 for a
// failed commit or query).
func statusOf(err error, fallback int) int {
	if re, ok := errors.AsType[*requestError](err); ok {
		return re.status
	}
	if _, ok := errors.AsType[UnknownRefError](err); ok {
		return http.StatusInternalServerError
	}
	switch {
	case errors.Is(err, storeerr.ErrInvalid), errors.Is(err, storage.ErrOutOfBounds):
		return http.StatusBadRequest
	case errors.Is(err, storeerr.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return fallback
}

// requestError is a failure the handler answers itself, with a status and a
// message meant for the sender's log.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func newRequestError(status int, msg string) *requestError {
	return &requestError{status: status, msg: msg}
}
