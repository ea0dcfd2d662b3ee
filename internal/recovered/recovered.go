// Package recovered turns a panic on a goroutine the adapter starts into an
// error. net/http recovers a panic only on a request's own goroutine; one
// on any other (reads ahead, index phases, query parts, the rollup job)
// ends the process, so a single bad row or query would take every other
// request down with it. Each such goroutine fails its own work instead,
// and the stack goes to the log, not to the client.
package recovered

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// ErrPanic is what every error of Err is (errors.Is): the adapter's own
// fault, which the edges answer with 500, never as the request's fault or
// as a passing unavailability.
var ErrPanic = errors.New("panicked")

// Err is the error for the panic p of what, logged with its stack; call it
// with recover()'s value from the goroutine's deferred function.
func Err(log *slog.Logger, what string, p any) error {
	if log != nil {
		log.Error("Recovered from a panic", "in", what, "panic", p, "stack", string(debug.Stack()))
	}
	return fmt.Errorf("%s %w: %v", what, ErrPanic, p)
}

// Into, deferred, sets *err to Err's error when the goroutine panics.
func Into(err *error, log *slog.Logger, what string) {
	if p := recover(); p != nil {
		*err = Err(log, what, p)
	}
}
