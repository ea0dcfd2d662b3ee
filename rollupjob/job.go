// Package job is the background job that writes the adapter's rollups
// (package rollup): for every closed unit of time and every metric it reads
// the raw series, computes the buckets of each resolution and writes them
// as ordinary KairosDB series through the store's write path, then records
// in service_index how far it got. It moves forward as units close,
// backfills towards the oldest stored row, recomputes units that late
// writes and deletes touched, and leaves the work to one adapter of those
// sharing a keyspace through a lease. docs/kairosdb-layout.md §13
// describes what it stores.
package rollupjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// Store is what the job needs of kairosstore.Store.
type Store interface {
	MetricNames(ctx context.Context) ([]string, error)
	OldestRowTime(ctx context.Context, metric string) (int64, bool, error)
	OldestSample(ctx context.Context, metric string) (int64, bool, error)
	RowTimes(ctx context.Context, metric string, lo, hi int64, fn func(rowTime int64) error) error
	Spec() codec.RowSpec
	ScanSeries(ctx context.Context, mint, maxt int64, keep func(labels.Labels) bool, ms ...*labels.Matcher) (storage.SeriesSet, func())
	NewAppender() *kairosstore.Appender
	ClearSamples(ctx context.Context, cs []kairosstore.Clear) error
	ServiceValue(ctx context.Context, service, serviceKey, key string) (string, bool, error)
	SetServiceValue(ctx context.Context, service, serviceKey, key, value string, writeTime int64) error
	DeleteServiceValue(ctx context.Context, service, serviceKey, key string, writeTime int64) error
	ServiceKeys(ctx context.Context, service, serviceKey, prefix string, fn func(key string) error) error
}

// Config configures a Job.
type Config struct {
	// Resolutions to write, as ParseResolutions returns them; empty
	// disables the job.
	Resolutions []rollup.Resolution
	// Delay is how long after a unit's end the job waits for late samples.
	Delay time.Duration
	// Retention is the time to live of each resolution's cells, counted
	// from the bucket's end; missing or 0 keeps them forever.
	Retention map[rollup.Resolution]time.Duration
	// RawTTL is the raw samples' time to live (0: forever), for Check.
	RawTTL time.Duration
	// Owner names this process in the lease; two processes must differ.
	Owner string
	// LeaseTTL is how long a lease lasts unless renewed. Default 1m.
	LeaseTTL time.Duration
	// Interval is how often the job looks for closed units and
	// recomputation marks when it has nothing to do. Default 15s.
	Interval time.Duration
	// DutyCycle is the share of time the job works while it has work: after
	// a unit that took w, it pauses w*(1-DutyCycle)/DutyCycle, so that
	// backfilling years leaves ingest its share. Default 0.25.
	DutyCycle float64
	// CommitCells bounds the cells of one write. Default 5000.
	CommitCells int
	// MarkSlack is how long a write may be in flight while a unit closes
	// and clocks of adapters sharing a keyspace may differ (by at most
	// half of it): writes mark the units that close within it, a commit
	// that took a quarter of it marks again, and the job waits that long
	// before it recomputes a mark (dirty.go). Default 30s: a write of the
	// present pays no mark as long as it is under --rollup.delay.
	MarkSlack time.Duration
	// Span is how much of a metric the job rolls up per read, rounded
	// down to whole units (at least one). Each read also takes the unit
	// before, for the counters' start, so a span of k units reads each raw
	// sample (k+1)/k times; a longer span holds more of one series in
	// memory at once, and a recomputation holds the stored rollup cells of
	// all of the metric's series in the span (16 bytes each: at 60 s
	// samples and the default resolutions, about 25 KB a series a day).
	// Default 24h.
	Span time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// RawMargin is how much longer than a unit and the delay raw samples must
// live (Check): the job may be down that long and still roll everything up.
const RawMargin = 24 * time.Hour

// Check refuses configurations under which raw samples could expire before
// they are rolled up, or rollups before the raw samples they summarise.
func (c *Config) Check() error {
	if len(c.Resolutions) == 0 {
		return nil
	}
	u := time.Duration(c.Resolutions[len(c.Resolutions)-1])
	if c.Delay < 0 {
		return fmt.Errorf("--rollup.delay must not be negative, got %s", c.Delay)
	}
	if c.RawTTL > 0 && c.RawTTL < u+c.Delay+RawMargin {
		return fmt.Errorf("raw samples live %s (--kairosdb.datapoint-ttl), less than the largest rollup resolution (%s) plus --rollup.delay (%s) plus a margin of %s for the job's downtime: they could expire before they are rolled up; raise the TTL to at least %s or turn rollups off (--rollup.resolutions=)",
			model.Duration(c.RawTTL), model.Duration(u), model.Duration(c.Delay), model.Duration(RawMargin), model.Duration(u+c.Delay+RawMargin))
	}
	for r, ttl := range c.Retention {
		if !slices.Contains(c.Resolutions, r) {
			return fmt.Errorf("--rollup.retention names resolution %s, which --rollup.resolutions does not list", r)
		}
		if ttl == 0 {
			continue
		}
		if c.RawTTL == 0 || ttl < c.RawTTL {
			raw := "forever"
			if c.RawTTL > 0 {
				raw = model.Duration(c.RawTTL).String()
			}
			return fmt.Errorf("--rollup.retention keeps %s rollups %s, less than raw samples live (%s, --kairosdb.datapoint-ttl): a long-range query would find neither; keep every resolution at least as long as raw samples (0 is forever)",
				r, model.Duration(ttl), raw)
		}
	}
	return nil
}

// Job is the rollup job. Run runs it; BeforeChange, AfterChange and
// Recompute may be called from any goroutine.
type Job struct {
	st    Store
	cfg   Config
	units units
	log   *slog.Logger
	m     metrics

	mu sync.Mutex
	// stored is the write time of each mark this process stored lately,
	// by key (storeMarks).
	stored map[string]int64
	// view is the progress as last read (viewRead once it was), for the
	// marks of deletes; oldest is
	// the oldest sample any metric may hold (math.MaxInt64 before one is
	// known, floor), oldestOf per metric, listed at most every oldestEvery.
	view     map[rollup.Resolution]progress
	viewRead bool
	oldest   int64
	oldestOf map[string]*metricAge
	oldestAt time.Time
	rowWidth int64 // the keyspace's, ms
	wake     chan struct{}

	leaseUntil int64         // while this process holds the lease, ms
	paused     time.Duration // slept by pause in the current step
	lastStamp  atomic.Int64
	lastLog    time.Time
	cursor     map[string]cursor // how far a mark being recomputed got, by key
	// young is each mark last read too young to recompute, by key: an
	// import leaves a mark per commit, and reading each of them at every
	// step of the backfill cost the square of the marks.
	young map[string]youngMark
	// held is the top unit of the backfill span last put off for young
	// marks, and since when (ms; holdBackfill).
	held, heldSince int64
	// ripe is when the youngest mark the last step left waiting is old
	// enough (ms; 0: none waits), so that Run wakes then rather than
	// after the interval.
	ripe int64
	// sparse says the last backfill span wrote no bucket: the next one
	// looks for the rows below first (dataBelow).
	sparse bool
}

// cursor is the next unit of a mark to recompute, for the mark as stored
// at written.
type cursor struct{ next, written int64 }

// youngMark is a mark read before it ripened: its units, when it ripens
// (ms), and whether this process stored it as the keyspace holds it.
type youngMark struct {
	from, to, ripe int64
	own            bool
}

// oldestEvery is how often the job lists the metrics and their oldest rows
// again: a metric new since is rolled up forward from its first unit on;
// data older than what was known is backfilled at the next step when it
// came through this process's store (older), at most this long after it
// was written when another process wrote it.
const oldestEvery = 10 * time.Minute

type metrics struct {
	buckets    *prometheus.CounterVec
	lag        *prometheus.GaugeVec
	backfill   *prometheus.GaugeVec
	recomputed *prometheus.CounterVec
	errors     prometheus.Counter
	rawRead    prometheus.Counter
	leader     prometheus.Gauge
	marks      prometheus.Gauge
}

// New returns a job; it does nothing until Run.
func New(st Store, cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Job, error) {
	if len(cfg.Resolutions) == 0 {
		return nil, errors.New("rollup job without resolutions")
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = time.Minute
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 15 * time.Second
	}
	if cfg.DutyCycle <= 0 || cfg.DutyCycle > 1 {
		cfg.DutyCycle = 0.25
	}
	if cfg.CommitCells <= 0 {
		cfg.CommitCells = 5000
	}
	if cfg.MarkSlack <= 0 {
		cfg.MarkSlack = 30 * time.Second
	}
	if cfg.Span <= 0 {
		cfg.Span = 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := promauto.With(reg)
	j := &Job{
		st: st, cfg: cfg, log: logger,
		units: units{
			res:   cfg.Resolutions,
			unit:  cfg.Resolutions[len(cfg.Resolutions)-1].Millis(),
			delay: cfg.Delay.Milliseconds(),
		},
		stored:   map[string]int64{},
		view:     map[rollup.Resolution]progress{},
		oldest:   math.MaxInt64,
		wake:     make(chan struct{}, 1),
		cursor:   map[string]cursor{},
		rowWidth: st.Spec().WidthMillis(),
		m: metrics{
			buckets: f.NewCounterVec(prometheus.CounterOpts{
				Namespace: "kairos_adapter", Subsystem: "rollup", Name: "buckets_written_total",
				Help: "Rollup buckets written (one per series, resolution and bucket; each holds five aggregates), by resolution.",
			}, []string{"resolution"}),
			lag: f.NewGaugeVec(prometheus.GaugeOpts{
				Namespace: "kairos_adapter", Subsystem: "rollup", Name: "lag_seconds",
				Help: "How far behind now the newest rolled-up bucket end is, by resolution (the unit, --rollup.delay and the job's own delay).",
			}, []string{"resolution"}),
			backfill: f.NewGaugeVec(prometheus.GaugeOpts{
				Namespace: "kairos_adapter", Subsystem: "rollup", Name: "backfill_position_seconds",
				Help: "The oldest rolled-up bucket end, Unix seconds, by resolution: backfill moves it back to the oldest stored row.",
			}, []string{"resolution"}),
			recomputed: f.NewCounterVec(prometheus.CounterOpts{
				Namespace: "kairos_adapter", Subsystem: "rollup", Name: "recomputations_total",
				Help: "Units of one metric rolled up again, by cause: write (samples received for a closed unit), delete, admin (POST /api/v1/admin/rollups/recompute).",
			}, []string{"cause"}),
			errors: f.NewCounter(prometheus.CounterOpts{
				Namespace: "kairos_adapter", Subsystem: "rollup", Name: "errors_total",
				Help: "Failed steps of the rollup job; each is retried after --rollup's interval.",
			}),
			rawRead: f.NewCounter(prometheus.CounterOpts{
				Namespace: "kairos_adapter", Subsystem: "rollup", Name: "raw_samples_read_total",
				Help: "Raw float samples the rollup job read (each is read twice: once for its unit, once as the unit before the next).",
			}),
			leader: f.NewGauge(prometheus.GaugeOpts{
				Namespace: "kairos_adapter", Subsystem: "rollup", Name: "leader",
				Help: "1 while this adapter holds the rollup lease and does the work, 0 while another does.",
			}),
			marks: f.NewGauge(prometheus.GaugeOpts{
				Namespace: "kairos_adapter", Subsystem: "rollup", Name: "recomputation_marks",
				Help: "Ranges of units marked for recomputation and not done yet, as last listed.",
			}),
		},
	}
	return j, nil
}

func (j *Job) now() int64 { return j.cfg.Now().UnixMilli() }

// stamp is the write time of a service_index write: the clock, but later
// than this process's previous one, so that of two writes of a key in one
// millisecond the second wins (a tie goes to the larger value, §5.4).
func (j *Job) stamp() int64 {
	for {
		last := j.lastStamp.Load()
		next := max(j.now(), last+1)
		if j.lastStamp.CompareAndSwap(last, next) {
			return next
		}
	}
}

// Run works until ctx ends. Errors are logged and counted, and the step
// is tried again after the interval.
func (j *Job) Run(ctx context.Context) {
	defer j.release()
	for ctx.Err() == nil {
		start := time.Now()
		worked, err := j.step(ctx)
		if err != nil && ctx.Err() == nil {
			j.m.errors.Inc()
			j.log.Warn("Rollup job step failed; retrying", "err", err, "retry_in", j.cfg.Interval)
			worked = false
		}
		wait := j.cfg.Interval
		if worked {
			// The pauses rollUnit took between metrics count as rest.
			wait = j.rest(time.Since(start) - j.paused)
		}
		if j.ripe != 0 {
			wait = max(0, min(wait, time.Duration(j.ripe-j.now())*time.Millisecond))
		}
		j.paused = 0
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-j.wake:
		}
		t.Stop()
	}
}

// step is Step with a panic turned into its error: the job runs on a
// goroutine of its own over rows other processes write, and a step that
// panics must fail as one that errs does (retried after the interval; it
// holds no lock across its reads), not end the process.
func (j *Job) step(ctx context.Context) (worked bool, err error) {
	defer recovered.Into(&err, j.log, "rollup job step")
	return j.Step(ctx)
}

// span is Config.Span in units.
func (j *Job) span() int64 {
	return max(1, j.cfg.Span.Milliseconds()/j.units.unit)
}

// rest is the pause that keeps the job at its duty cycle after working
// for spent.
func (j *Job) rest(spent time.Duration) time.Duration {
	return time.Duration(float64(max(spent, 0)) * (1 - j.cfg.DutyCycle) / j.cfg.DutyCycle)
}

// pause sleeps d, or until ctx ends.
func (j *Job) pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	start := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	j.paused += time.Since(start)
	return nil
}

// release gives the lease up on the way out, so that another adapter
// takes over at once rather than after LeaseTTL.
func (j *Job) release() {
	if j.leaseUntil <= j.now() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, ok, err := j.st.ServiceValue(ctx, rollup.Service, rollup.ServiceKey, leaseKey)
	if owner, _, okL := parseLease(v); err == nil && ok && okL && owner == j.cfg.Owner {
		_ = j.st.DeleteServiceValue(ctx, rollup.Service, rollup.ServiceKey, leaseKey, j.stamp())
	}
	j.m.leader.Set(0)
}

// Step does one piece of work: holding the lease, it recomputes one
// marked unit, or rolls up the next closed unit, or backfills one unit,
// in that order. worked says whether there was such work.
func (j *Job) Step(ctx context.Context) (worked bool, err error) {
	prog, err := j.readProgress(ctx)
	if err != nil {
		return false, err
	}
	if err := j.refreshOldest(ctx, false); err != nil {
		return false, err
	}
	leader, err := j.holdLease(ctx)
	if err != nil || !leader {
		return false, err
	}
	now := j.now()
	j.logProgress(prog, now)

	// Expired rollups leave the done range first.
	for _, r := range j.units.res {
		if floor := j.units.retentionFloor(now, j.cfg.Retention[r]); prog[r].ok && prog[r].from < floor-j.units.unit+r.Millis() {
			if err := j.writeProgress(ctx, r, j.units.raise(r, prog[r], floor)); err != nil {
				return false, err
			}
		}
	}
	if ok, err := j.recomputeOne(ctx, prog); ok || err != nil {
		return ok, err
	}
	closed := j.units.closed(now)
	// Forward: the earliest unit some resolution still needs.
	if e, rs := j.next(prog, func(r rollup.Resolution, p progress) (int64, bool) { return j.units.forward(r, p, closed) }, false); rs != nil {
		return true, j.rollUnits(ctx, e, min(e+(j.span()-1)*j.units.unit, closed), rs, prog, false)
	}
	// Backfill: the latest unit some resolution still needs.
	j.mu.Lock()
	oldest := j.oldest
	j.mu.Unlock()
	floor := func(r rollup.Resolution) int64 { return max(oldest, j.units.retentionFloor(now, j.cfg.Retention[r])) }
	if e, rs := j.next(prog, func(r rollup.Resolution, p progress) (int64, bool) {
		return j.units.backfill(r, p, floor(r))
	}, true); rs != nil {
		lo := e - (j.span()-1)*j.units.unit
		if j.sparse {
			// The span before held no sample: this one is a row's width,
			// and starts where a row of some metric is, however far
			// below (a sample at Prometheus's minimum time must not cost
			// a step per span of the time between). That row's unit is
			// read for the counters' start; the empty units above it
			// are done with it.
			lo = min(lo, max(e-j.rowWidth, minTime)+j.units.unit)
			d, err := j.dataBelow(ctx, e)
			if err != nil {
				return false, err
			}
			if d < lo {
				lo = max(d, minTime) + j.units.unit
			}
			lo = j.units.unitOf(lo)
		}
		for _, r := range rs {
			lo = max(lo, j.units.unitOf(floor(r)))
		}
		lo, ok := j.holdBackfill(lo, e)
		if !ok {
			return false, nil
		}
		return true, j.rollUnits(ctx, lo, e, rs, prog, true)
	}
	return false, nil
}

// next is the unit to do and the resolutions that need it: the earliest
// (or with latest, the latest) of the units each resolution asks for.
func (j *Job) next(prog map[rollup.Resolution]progress, want func(rollup.Resolution, progress) (int64, bool), latest bool) (int64, []rollup.Resolution) {
	var best int64
	var rs []rollup.Resolution
	for _, r := range j.units.res {
		e, ok := want(r, prog[r])
		switch {
		case !ok:
		case rs == nil || e == best:
			best, rs = e, append(rs, r)
		case (e < best) != latest:
			best, rs = e, []rollup.Resolution{r}
		}
	}
	return best, rs
}

// rollUnits writes units lo to hi of every metric at resolutions rs and
// then extends their progress. Between metrics it renews the lease, and
// stands down without writing progress when another process holds it.
func (j *Job) rollUnits(ctx context.Context, lo, hi int64, rs []rollup.Resolution, prog map[rollup.Resolution]progress, backfill bool) error {
	// A metric first written in the span must be in the list: list again
	// unless that was done after the span's end.
	j.mu.Lock()
	stale := j.oldestAt.UnixMilli() < hi
	j.mu.Unlock()
	if stale {
		if err := j.refreshOldest(ctx, true); err != nil {
			return err
		}
	}
	names, err := j.metricsAt(ctx, hi, backfill)
	if err != nil {
		return err
	}
	if backfill {
		// metricsAt may have learnt the oldest samples: no unit below
		// the oldest one's.
		j.mu.Lock()
		if j.oldest < hi {
			lo = max(lo, j.units.unitOf(j.oldest))
		}
		j.mu.Unlock()
	}
	written := 0
	for _, m := range names {
		start := time.Now()
		n, err := j.rollMetric(ctx, m, lo, hi, rs, false)
		if err != nil {
			return err
		}
		written += n
		// Paced per metric, not per span: a span of a keyspace with
		// many series is minutes of work.
		if err := j.pause(ctx, j.rest(time.Since(start))); err != nil {
			return err
		}
		if leader, err := j.holdLease(ctx); err != nil || !leader {
			return err
		}
	}
	for _, r := range rs {
		if err := j.writeProgress(ctx, r, j.units.extend(r, j.units.extend(r, prog[r], lo), hi)); err != nil {
			return err
		}
	}
	j.sparse = backfill && written == 0
	return nil
}

// dataBelow is the end of the latest unit at or before e that a row of
// some listed metric overlaps (row_key_time_index), or minTime when none
// does: no sample is stored after it up to e.
func (j *Job) dataBelow(ctx context.Context, e int64) (int64, error) {
	j.mu.Lock()
	names := slices.Collect(maps.Keys(j.oldestOf))
	j.mu.Unlock()
	d := int64(minTime)
	for _, m := range names {
		err := j.st.RowTimes(ctx, m, math.MinInt64, e, func(rt int64) error {
			d = max(d, j.units.unitOf(min(e, rt+(j.rowWidth-1))))
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("row times of %s: %w", m, err)
		}
	}
	return d, nil
}

// metricAge is what the job knows of a metric's oldest sample.
type metricAge struct {
	row   int64 // its oldest row time: no sample is older
	exact int64 // its oldest sample, once known
	known bool
}

// metricsAt lists the metrics that may hold samples in unit e or before:
// those whose oldest row starts before its end. With exact (backfill), a
// metric whose oldest row holds the unit is first asked for its oldest
// sample (one cell read per series of that row), so that backfill does not
// read the empty weeks of a row before the data; forward units, near the
// present, need not ask.
func (j *Job) metricsAt(ctx context.Context, e int64, exact bool) ([]string, error) {
	j.mu.Lock()
	var out, ask []string
	for m, a := range j.oldestOf {
		switch {
		case a.row > e:
		case a.known && a.exact > e:
		case exact && !a.known && e < a.row+j.rowWidth:
			ask = append(ask, m)
		default:
			out = append(out, m)
		}
	}
	j.mu.Unlock()
	for _, m := range ask {
		t, ok, err := j.st.OldestSample(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("oldest sample of %s: %w", m, err)
		}
		if !ok {
			t = math.MaxInt64 // no sample left in the oldest row: deleted
		}
		j.mu.Lock()
		if a := j.oldestOf[m]; a != nil {
			a.exact, a.known = max(t, a.row), true
			if a.exact <= e {
				out = append(out, m)
			}
		}
		j.mu.Unlock()
	}
	j.mu.Lock()
	j.oldest = j.floor()
	j.mu.Unlock()
	slices.Sort(out)
	return out, nil
}

// floor is the oldest sample any metric may hold. Called with mu held.
func (j *Job) floor() int64 {
	f := int64(math.MaxInt64)
	for _, a := range j.oldestOf {
		if a.known {
			f = min(f, a.exact)
		} else {
			f = min(f, a.row)
		}
	}
	return f
}

// refreshOldest lists the metrics and their oldest rows when the list is
// older than oldestEvery, or with force. What is known of a metric's
// oldest sample is kept while its oldest row stays.
func (j *Job) refreshOldest(ctx context.Context, force bool) error {
	j.mu.Lock()
	fresh := j.oldestOf != nil && j.cfg.Now().Sub(j.oldestAt) < oldestEvery
	j.mu.Unlock()
	if fresh && !force {
		return nil
	}
	names, err := j.st.MetricNames(ctx)
	if err != nil {
		return fmt.Errorf("list metrics: %w", err)
	}
	rows := make(map[string]int64, len(names))
	for _, m := range names {
		t, ok, err := j.st.OldestRowTime(ctx, m)
		if err != nil {
			return fmt.Errorf("oldest row of %s: %w", m, err)
		}
		if ok {
			rows[m] = t
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	of := make(map[string]*metricAge, len(rows))
	for m, row := range rows {
		if a := j.oldestOf[m]; a != nil && a.row == row {
			of[m] = a
			continue
		}
		of[m] = &metricAge{row: row}
	}
	j.oldestOf, j.oldestAt = of, j.cfg.Now()
	j.oldest = j.floor()
	return nil
}

// readProgress reads every resolution's done range.
func (j *Job) readProgress(ctx context.Context) (map[rollup.Resolution]progress, error) {
	prog := map[rollup.Resolution]progress{}
	now := j.now()
	for _, r := range j.units.res {
		v, ok, err := j.st.ServiceValue(ctx, rollup.Service, rollup.ServiceKey, rollup.DoneKey(r))
		if err != nil {
			return nil, fmt.Errorf("read rollup progress: %w", err)
		}
		var p progress
		if ok {
			from, to, err := rollup.ParseDone(v)
			if err != nil {
				return nil, err
			}
			p = progress{from: from, to: to, ok: true}
			j.m.lag.WithLabelValues(r.String()).Set(float64(now-to) / 1000)
			j.m.backfill.WithLabelValues(r.String()).Set(float64(from) / 1000)
		}
		prog[r] = p
	}
	j.mu.Lock()
	j.view, j.viewRead = prog, true
	j.mu.Unlock()
	return prog, nil
}

func (j *Job) writeProgress(ctx context.Context, r rollup.Resolution, p progress) error {
	if err := j.st.SetServiceValue(ctx, rollup.Service, rollup.ServiceKey, rollup.DoneKey(r), rollup.FormatDone(p.from, p.to), j.stamp()); err != nil {
		return fmt.Errorf("write rollup progress: %w", err)
	}
	return nil
}

// holdLease takes or renews the lease when it is free, expired or this
// process's, and reads it back: service_index keeps the last write, so of
// two processes writing at once both read the same winner.
func (j *Job) holdLease(ctx context.Context) (bool, error) {
	now := j.now()
	// Read every step, also while this process holds the lease: without
	// conditional writes two processes can both read the lease free, both
	// write it and each read back its own (the other's read came between);
	// the one whose lease the keyspace kept stays, the other stands down
	// here, after one unit rather than half a lease.
	v, ok, err := j.st.ServiceValue(ctx, rollup.Service, rollup.ServiceKey, leaseKey)
	if err != nil {
		return false, fmt.Errorf("read rollup lease: %w", err)
	}
	owner, expiry, okL := parseLease(v)
	if ok && okL && owner != j.cfg.Owner && expiry > now {
		j.setLeader(false, 0)
		return false, nil
	}
	if j.leaseUntil-now > j.cfg.LeaseTTL.Milliseconds()/2 {
		return true, nil
	}
	until := now + j.cfg.LeaseTTL.Milliseconds()
	if err := j.st.SetServiceValue(ctx, rollup.Service, rollup.ServiceKey, leaseKey, formatLease(j.cfg.Owner, until), j.stamp()); err != nil {
		return false, fmt.Errorf("write rollup lease: %w", err)
	}
	v, _, err = j.st.ServiceValue(ctx, rollup.Service, rollup.ServiceKey, leaseKey)
	if err != nil {
		return false, fmt.Errorf("read rollup lease: %w", err)
	}
	owner, _, _ = parseLease(v)
	if owner != j.cfg.Owner {
		j.setLeader(false, 0)
		return false, nil
	}
	j.setLeader(true, until)
	return true, nil
}

func (j *Job) setLeader(leader bool, until int64) {
	if leader && j.leaseUntil == 0 {
		j.log.Info("Rollup job holds the lease; rolling up", "owner", j.cfg.Owner)
	} else if !leader && j.leaseUntil != 0 {
		j.log.Info("Rollup job lost the lease; standing by", "owner", j.cfg.Owner)
	}
	j.leaseUntil = until
	if leader {
		j.m.leader.Set(1)
	} else {
		j.m.leader.Set(0)
	}
}

// logProgress logs where each resolution stands, once a minute.
func (j *Job) logProgress(prog map[rollup.Resolution]progress, now int64) {
	if time.Since(j.lastLog) < time.Minute {
		return
	}
	j.lastLog = time.Now()
	for _, r := range j.units.res {
		p := prog[r]
		if !p.ok {
			continue
		}
		j.log.Info("Rollup progress", "resolution", r.String(),
			"from", time.UnixMilli(p.from).UTC(), "to", time.UnixMilli(p.to).UTC(),
			"lag", time.Duration(now-p.to)*time.Millisecond)
	}
}

// ResolutionStatus is the progress of one resolution, for the status page.
type ResolutionStatus struct {
	Resolution string `json:"resolution"`
	// From and To are the done range of bucket ends (Unix ms); Done is
	// false before the first unit is written.
	From int64 `json:"from"`
	To   int64 `json:"to"`
	Done bool  `json:"done"`
	// LagSeconds is how far To is behind now.
	LagSeconds float64 `json:"lag_seconds"`
}

// Status is the progress as this process last read it from service_index
// (every step of the job, leader or not).
func (j *Job) Status() []ResolutionStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := j.now()
	out := make([]ResolutionStatus, 0, len(j.units.res))
	for _, r := range j.units.res {
		p := j.view[r]
		st := ResolutionStatus{Resolution: r.String(), From: p.from, To: p.to, Done: p.ok}
		if p.ok {
			st.LagSeconds = float64(now-p.to) / 1000
		}
		out = append(out, st)
	}
	return out
}
