package rollupjob_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/config"
	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

func newRunner(t *testing.T, cfg *config.Config) *rollupjob.Runner {
	t.Helper()
	rc, err := rollupjob.ConfigFrom(cfg)
	require.NoError(t, err)
	r, err := rollupjob.NewRunner(rc, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	require.NoError(t, err)
	return r
}

// TestRunnerGuardWithoutJob: a write that found the rollup job not yet
// created could not store its recomputation marks: it fails with 503
// (Prometheus sends it again), rather than being answered 204 with the
// marks lost, as writes were dropped from the job's notice before it
// existed. The adapter creates the job before the store serves; with the
// job off, nothing is marked and nothing fails.
func TestRunnerGuardWithoutJob(t *testing.T) {
	cfg := config.Default()
	r := newRunner(t, cfg)
	cs := []kairosstore.Change{{Metric: "x", MinT: 0, MaxT: 0}}
	require.ErrorIs(t, r.BeforeChange(t.Context(), cs), storeerr.ErrUnavailable)
	require.ErrorIs(t, r.AfterChange(t.Context(), cs, time.Now()), storeerr.ErrUnavailable)

	cfg.Rollup.Resolutions = nil
	r = newRunner(t, cfg)
	require.NoError(t, r.BeforeChange(t.Context(), cs))
	require.NoError(t, r.AfterChange(t.Context(), cs, time.Now()))
}
