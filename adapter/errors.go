package adapter

import (
	"context"
	"errors"
	"net/http"
)

// statusOf maps an error from the store to the HTTP status of the answer.
// Classification happens here only, at the edge, so every handler maps an error alike: an error that
// carries its own status wins; a deadline is a transient overload, so 503
// makes Prometheus retry; everything else gets the caller's fallback
// (400 for a rejected series, 500 for a failed commit or query).
func statusOf(err error, fallback int) int {
	if hs, ok := errors.AsType[HTTPStatusError](err); ok {
		if s := hs.HTTPStatus(); s >= 400 && s <= 599 {
			return s
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
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

// HTTPStatus implements HTTPStatusError.
func (e *requestError) HTTPStatus() int { return e.status }

func newRequestError(status int, msg string) *requestError {
	return &requestError{status: status, msg: msg}
}
