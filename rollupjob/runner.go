package rollupjob

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
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// ConfigFrom is the job's Config from the adapter's flags, with an Owner
// unique to this process.
func ConfigFrom(cfg *config.Config) (Config, error) {
	rs, err := rollup.ParseResolutions(strings.Join(cfg.Rollup.Resolutions, ","))
	if err != nil {
		return Config{}, err
	}
	ret, err := rollup.ParseRetention(strings.Join(cfg.Rollup.Retention, ","))
	if err != nil {
		return Config{}, err
	}
	host, _ := os.Hostname()
	return Config{
		Resolutions: rs,
		Delay:       time.Duration(cfg.Rollup.Delay),
		Retention:   ret,
		RawTTL:      time.Duration(cfg.KairosDB.DatapointTTL),
		// Unique per process, readable in service_index.
		Owner:     fmt.Sprintf("%s/%d/%08x", host, os.Getpid(), rand.Uint32()),
		DutyCycle: cfg.Rollup.DutyCycle,
	}, nil
}

// Runner runs the job once the store is open, and is the store's Guard:
// every commit and delete tells the job before it is answered, so that the
// recomputation marks of late writes are stored first (dirty.go). The
// Runner exists before the store serves a write, and the job is created
// before the store is handed to the HTTP side; a write that found no job
// could not be marked, and fails.
type Runner struct {
	cfg    Config
	log    *slog.Logger
	reg    prometheus.Registerer
	job    atomic.Pointer[Job]
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewRunner checks cfg against the raw samples' TTL (Config.Check): a
// setting under which raw samples could expire before they are rolled up
// is refused at start.
func NewRunner(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Runner, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, log: logger, reg: reg}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// Enabled is whether any resolution is configured.
func (r *Runner) Enabled() bool { return len(r.cfg.Resolutions) > 0 }

// Resolutions are the resolutions the job writes, for the query API.
func (r *Runner) Resolutions() []rollup.Resolution { return r.cfg.Resolutions }

// LongestRetention is the longest TTL the job writes its cells with; 0
// when it writes none with a TTL.
func (r *Runner) LongestRetention() time.Duration {
	var longest time.Duration
	for _, res := range r.cfg.Resolutions {
		longest = max(longest, r.cfg.Retention[res])
	}
	return longest
}

// errNoJob fails a write that found the job not yet created: its marks
// could not be stored.
var errNoJob = fmt.Errorf("rollup job not started yet: %w", storeerr.ErrUnavailable)

// BeforeChange is the store's Guard.BeforeChange.
func (r *Runner) BeforeChange(ctx context.Context, cs []kairosstore.Change) error {
	if !r.Enabled() {
		return nil
	}
	j := r.job.Load()
	if j == nil {
		return errNoJob
	}
	return j.BeforeChange(ctx, cs)
}

// AfterChange is the store's Guard.AfterChange.
func (r *Runner) AfterChange(ctx context.Context, cs []kairosstore.Change, began time.Time) error {
	if !r.Enabled() {
		return nil
	}
	j := r.job.Load()
	if j == nil {
		return errNoJob
	}
	return j.AfterChange(ctx, cs, began)
}

// MarkOnly creates the job over st without running it: the Guard then
// stores the recomputation marks of st's changes for another process's job
// to recompute (the import's).
func (r *Runner) MarkOnly(st *kairosstore.Store) error {
	if !r.Enabled() {
		return nil
	}
	j, err := New(st, r.cfg, r.log, r.reg)
	if err != nil {
		return err
	}
	r.job.Store(j)
	return nil
}

// Start runs the job over st until Stop.
func (r *Runner) Start(st *kairosstore.Store) error {
	if !r.Enabled() {
		return nil
	}
	if err := r.MarkOnly(st); err != nil {
		return err
	}
	j := r.job.Load()
	r.log.Info("Rollup job started", "resolutions", r.cfg.Resolutions, "owner", r.cfg.Owner)
	r.wg.Go(func() { j.Run(r.ctx) })
	return nil
}

// Stop ends the job and waits for it, before the engine closes.
func (r *Runner) Stop() {
	r.cancel()
	r.wg.Wait()
}

// Status is the job's progress per resolution for the status page; none
// before the job started.
func (r *Runner) Status() []ResolutionStatus {
	if j := r.job.Load(); j != nil {
		return j.Status()
	}
	return []ResolutionStatus{}
}

// Job is the job once MarkOnly or Start created it, nil before.
func (r *Runner) Job() *Job { return r.job.Load() }
