package queryapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestSnapshotEndpoint(t *testing.T) {
	var calls atomic.Int32
	var fail error
	snap := func(context.Context) (string, error) {
		n := calls.Add(1)
		if fail != nil {
			return "", fail
		}
		return fmt.Sprintf("20261127T013000Z-%016x", n), nil
	}
	on := mount(New(&adminStore{}, Options{EnableAdminAPI: true, Snapshot: snap}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
	do := func(h http.Handler, method string, form url.Values) (int, response) {
		got := get(t, h, method, "/api/v1/admin/tsdb/snapshot", form)
		var r response
		if got.code != http.StatusNotFound && got.code != http.StatusMethodNotAllowed {
			require.NoError(t, json.Unmarshal([]byte(got.body), &r), got.body)
		}
		return got.code, r
	}

	t.Run("off by default", func(t *testing.T) {
		off := mount(New(&adminStore{}, Options{Snapshot: snap}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
		code, _ := do(off, http.MethodPost, nil)
		require.Equal(t, http.StatusNotFound, code)
		require.Zero(t, calls.Load())
	})
	for _, method := range []string{http.MethodPost, http.MethodPut} {
		code, r := do(on, method, url.Values{"skip_head": {"true"}})
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "success", r.Status)
		require.Regexp(t, `^20261127T013000Z-[0-9a-f]{16}$`, r.Data.(map[string]any)["name"])
	}
	before := calls.Load()
	code, _ := do(on, http.MethodGet, nil)
	require.NotEqual(t, http.StatusOK, code, "a GET must not snapshot")
	for _, tc := range []struct {
		name string
		form url.Values
		msg  string
	}{
		{"garbage", url.Values{"skip_head": {"yes please"}}, `invalid parameter "skip_head": not a boolean`},
		{"NaN", url.Values{"skip_head": {"NaN"}}, `invalid parameter "skip_head"`},
		{"twice", url.Values{"skip_head": {"true", "false"}}, `invalid parameter "skip_head": given 2 times`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, r := do(on, http.MethodPost, tc.form)
			require.Equal(t, http.StatusBadRequest, code)
			require.Contains(t, r.Error, tc.msg)
		})
	}
	require.Equal(t, before, calls.Load(), "a refused call snapshots nothing")

	fail = fmt.Errorf("%w: the cassandra engine: use nodetool snapshot", ErrCannotSnapshot)
	code, r := do(on, http.MethodPost, nil)
	require.Equal(t, http.StatusUnprocessableEntity, code)
	require.Equal(t, errExec, r.ErrorType)
	require.Contains(t, r.Error, "nodetool snapshot")

	fail = fmt.Errorf("disk full")
	code, r = do(on, http.MethodPost, nil)
	require.Equal(t, http.StatusInternalServerError, code)
	require.Contains(t, r.Error, "snapshot: disk full")
}
