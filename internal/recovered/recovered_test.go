package recovered

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInto(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	for _, c := range []struct {
		name string
		fn   func() error
		want string
	}{
		{"panic", func() error { panic("boom") }, "the work panicked: boom"},
		{"runtime error", func() error { var m map[string]int; m["x"] = 1; return nil }, "the work panicked: assignment to entry in nil map"},
		{"error", func() error { return errors.New("plain") }, "plain"},
		{"nothing", func() error { return nil }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			logged.Reset()
			err := func() (err error) {
				defer Into(&err, log, "the work")
				return c.fn()
			}()
			if c.want == "" {
				require.NoError(t, err)
				require.Empty(t, logged.String())
				return
			}
			require.EqualError(t, err, c.want)
			require.Equal(t, strings.Contains(c.want, "panicked"), errors.Is(err, ErrPanic))
			// A recovered panic leaves its stack in the log, naming
			// where it happened; an error does not.
			require.Equal(t, strings.Contains(c.want, "panicked"), strings.Contains(logged.String(), "recovered_test.go"), logged.String())
		})
	}
}
