package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kairos-remote/kairos-adapter/config"
	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/queryapi"
	"github.com/kairos-remote/kairos-adapter/rollup"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

// rollups runs the rollup job once the store is open, and is the store's
// Guard: every commit and delete tells the job before it is answered, so
// that the recomputation marks of late writes are stored first (package
// job, dirty.go). The job exists before the store serves a write
// (openStore); a write that found none could not be marked, and fails.
type rollups struct {
	cfg    rollupjob.Config
	log    *slog.Logger
	reg    prometheus.Registerer
	job    atomic.Pointer[rollupjob.Job]
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newRollups checks the rollup settings against the raw samples' TTL
// (rollupjob.Config.Check): a setting under which raw samples could expire
// before they are rolled up is refused at start.
func newRollups(cfg *config.Config, logger *slog.Logger, reg prometheus.Registerer) (*rollups, error) {
	rs, err := rollup.ParseResolutions(strings.Join(cfg.Rollup.Resolutions, ","))
	if err != nil {
		return nil, err
	}
	ret, err := rollup.ParseRetention(strings.Join(cfg.Rollup.Retention, ","))
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	r := &rollups{
		cfg: rollupjob.Config{
			Resolutions: rs,
			Delay:       time.Duration(cfg.Rollup.Delay),
			Retention:   ret,
			RawTTL:      time.Duration(cfg.KairosDB.DatapointTTL),
			// Unique per process, readable in service_index.
			Owner:     fmt.Sprintf("%s/%d/%08x", host, os.Getpid(), rand.Uint32()),
			DutyCycle: cfg.Rollup.DutyCycle,
		},
		log: logger, reg: reg,
	}
	if err := r.cfg.Check(); err != nil {
		return nil, err
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

func (r *rollups) enabled() bool { return len(r.cfg.Resolutions) > 0 }

// errNoJob fails a write that found the job not yet created: its marks
// could not be stored. openStore creates the job before the store serves.
var errNoJob = fmt.Errorf("rollup job not started yet: %w", storeerr.ErrUnavailable)

// BeforeChange is the store's Guard.BeforeChange.
func (r *rollups) BeforeChange(ctx context.Context, cs []kairosstore.Change) error {
	if !r.enabled() {
		return nil
	}
	j := r.job.Load()
	if j == nil {
		return errNoJob
	}
	return j.BeforeChange(ctx, cs)
}

// AfterChange is the store's Guard.AfterChange.
func (r *rollups) AfterChange(ctx context.Context, cs []kairosstore.Change, began time.Time) error {
	if !r.enabled() {
		return nil
	}
	j := r.job.Load()
	if j == nil {
		return errNoJob
	}
	return j.AfterChange(ctx, cs, began)
}

// markOnly creates the job over st without running it: the Guard then
// stores the recomputation marks of st's changes for another process's job
// to recompute (the import's).
func (r *rollups) markOnly(st *kairosstore.Store) error {
	if !r.enabled() {
		return nil
	}
	j, err := rollupjob.New(st, r.cfg, r.log, r.reg)
	if err != nil {
		return err
	}
	r.job.Store(j)
	return nil
}

// start runs the job over st until stop.
func (r *rollups) start(st *kairosstore.Store) error {
	if !r.enabled() {
		return nil
	}
	if err := r.markOnly(st); err != nil {
		return err
	}
	j := r.job.Load()
	r.log.Info("Rollup job started", "resolutions", r.cfg.Resolutions, "owner", r.cfg.Owner)
	r.wg.Go(func() { j.Run(r.ctx) })
	return nil
}

// stop ends the job and waits for it, before the engine closes.
func (r *rollups) stop() {
	r.cancel()
	r.wg.Wait()
}

// recomputeRoute is what serves the query API's recomputation endpoint:
// none when the job is off.
func (r *rollups) recomputeRoute() func() queryapi.Recomputer {
	if !r.enabled() {
		return nil
	}
	return r.recomputer
}

// status is the job's progress per resolution for the status page; none
// before the job started.
func (r *rollups) status() []rollupjob.ResolutionStatus {
	if j := r.job.Load(); j != nil {
		return j.Status()
	}
	return []rollupjob.ResolutionStatus{}
}

// recomputer is the job for the admin endpoint, nil before it started.
func (r *rollups) recomputer() queryapi.Recomputer {
	if j := r.job.Load(); j != nil {
		return j
	}
	return nil
}
