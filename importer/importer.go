// Package importer moves history into the store through its own write path
// (kairosstore's Appender, as remote write does): a Prometheus TSDB read with
// Prometheus's tsdb package, or any remote-read endpoint. Work is cut into
// units (a block, a time slice) and each unit done is recorded in the
// destination's service_index once its samples are durably written, so that
// a rerun after a crash skips what is done and redoes the rest.
package importer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"golang.org/x/time/rate"

	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
)

// MarkService is the service_index service of the import marks: one
// service key per import source and selection, one key per unit done.
const MarkService = "kairos_import"

// Options are what both sources share.
type Options struct {
	// Start and End (ms, both included) bound what is imported.
	Start, End int64
	// Selectors, each a list of matchers; a series matching any of them
	// is imported. None means every series.
	Selectors [][]*labels.Matcher
	// Rate is the most samples per second written; 0 means no limit.
	Rate float64
	// Batch is the samples per store commit; 0 means 10,000.
	Batch int
	// Parallel is the commits in flight at once; 0 means 4.
	Parallel int
	// Retries is how many times a unit whose writes or reads failed for
	// a reason that may pass (a store write, the network, a 5xx) is tried
	// again, after 1 s, 2 s, 4 s ... up to 30 s.
	Retries int
	// Progress reports as the import goes; nil reports nothing.
	Progress *Progress
}

// retryable marks an error that trying the unit again may not meet.
type retryable struct{ error }

func (r retryable) Unwrap() error { return r.error }

// withRetries runs one unit, again after a retryable failure, at most
// o.Retries more times.
func withRetries(ctx context.Context, o *Options, log *slog.Logger, unit string, run func() (markValue, error)) (markValue, error) {
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		v, err := run()
		var r retryable
		if err == nil || !errors.As(err, &r) || attempt > o.Retries || ctx.Err() != nil {
			return v, err
		}
		log.Warn("Importing a unit failed; trying it again", "unit", unit, "attempt", attempt, "retry_in", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// Summary is what one run did.
type Summary struct {
	Units, Skipped int   // units imported now, units found done before
	Series         int64 // series read in the units imported now
	Samples        int64 // samples and histograms written
	Refused        int64 // samples the store refused (logged), not written
	// MinT and MaxT bound the times written (ms), when Samples > 0.
	MinT, MaxT int64
}

func (o *Options) selectors() [][]*labels.Matcher {
	if len(o.Selectors) > 0 {
		return o.Selectors
	}
	return [][]*labels.Matcher{{labels.MustNewMatcher(labels.MatchRegexp, labels.MetricName, ".+")}}
}

// sourceKey is the service key of a source's marks: what it is and which
// series were selected, hashed to a fixed length.
func (o *Options) sourceKey(kind, source string) string {
	var sel []string
	for _, ms := range o.selectors() {
		var parts []string
		for _, m := range ms {
			parts = append(parts, m.String())
		}
		slices.Sort(parts)
		sel = append(sel, "{"+strings.Join(parts, ",")+"}")
	}
	slices.Sort(sel)
	h := sha256.Sum256([]byte(source + "\n" + strings.Join(sel, " or ")))
	return kind + "/" + hex.EncodeToString(h[:8])
}

// marks reads and records the units of one source done.
type marks struct {
	st  *kairosstore.Store
	key string
}

type markValue struct {
	Series  int64  `json:"series"`
	Samples int64  `json:"samples"`
	Refused int64  `json:"refused,omitempty"`
	MinT    int64  `json:"min_time_ms,omitempty"`
	MaxT    int64  `json:"max_time_ms,omitempty"`
	At      string `json:"at"`
}

func (m marks) done(ctx context.Context, unit string) (bool, error) {
	_, ok, err := m.st.ServiceValue(ctx, MarkService, m.key, unit)
	if err != nil {
		return false, fmt.Errorf("read the import's progress (service_index %s/%s): %w", MarkService, m.key, err)
	}
	return ok, nil
}

func (m marks) set(ctx context.Context, unit string, v markValue) error {
	now := time.Now()
	v.At = now.UTC().Format(time.RFC3339)
	b, _ := json.Marshal(v)
	if err := m.st.SetServiceValue(ctx, MarkService, m.key, unit, string(b), now.UnixMilli()); err != nil {
		return fmt.Errorf("record %s as imported: %w", unit, err)
	}
	return nil
}

// writer appends series to the store in batches of Options.Batch samples,
// committing up to Options.Parallel batches at once while the next fills.
type writer struct {
	st    *kairosstore.Store
	log   *slog.Logger
	prog  *Progress
	lim   *rate.Limiter
	batch int
	sem   chan struct{}

	app *kairosstore.Appender
	n   int // samples in app
	it  chunkenc.Iterator

	wg  sync.WaitGroup
	mu  sync.Mutex
	err error // the first commit that failed

	// Of the unit being imported.
	series, samples, refused int64
	minT, maxT               int64
}

func newWriter(st *kairosstore.Store, o *Options, log *slog.Logger) *writer {
	w := &writer{st: st, log: log, prog: o.Progress, batch: o.Batch}
	if w.batch <= 0 {
		w.batch = 10_000
	}
	par := o.Parallel
	if par <= 0 {
		par = 4
	}
	w.sem = make(chan struct{}, par)
	if o.Rate > 0 {
		// A batch is at most a second's worth, so the limiter's burst
		// (one batch) keeps the rate even over short windows.
		if o.Rate < float64(w.batch) {
			w.batch = max(1, int(o.Rate))
		}
		w.lim = rate.NewLimiter(rate.Limit(o.Rate), w.batch)
	}
	w.app = st.NewAppender()
	w.minT, w.maxT = math.MaxInt64, math.MinInt64
	return w
}

// refusal says whether the store refused one item for what it is (a time
// the layout cannot hold, an invalid histogram or label set): importing it
// again would be refused again, so it is counted and logged, not fatal.
func refusal(err error) bool {
	var item interface{ RefusesItemOnly() }
	return errors.Is(err, storeerr.ErrInvalid) || errors.As(err, &item)
}

// writeSeries appends the samples of s within [mint, maxt]: a remote-read
// server may answer whole chunks reaching outside the range asked.
func (w *writer) writeSeries(ctx context.Context, s storage.Series, mint, maxt int64) error {
	ls := s.Labels()
	w.it = s.Iterator(w.it)
	w.series++
	w.prog.AddSeries(1)
	// The store's ref of the series, valid across appenders while the
	// store remembers it (and the labels go with it for when it does
	// not): an append by ref skips comparing the labels.
	var ref storage.SeriesRef
	for vt := w.it.Next(); vt != chunkenc.ValNone; vt = w.it.Next() {
		t := w.it.AtT()
		if t < mint || t > maxt {
			continue
		}
		var err error
		switch vt {
		case chunkenc.ValFloat:
			_, v := w.it.At()
			ref, err = w.app.Append(ref, ls, t, v)
		case chunkenc.ValHistogram:
			_, h := w.it.AtHistogram(nil)
			ref, err = w.app.AppendHistogram(ref, ls, t, h, nil)
		case chunkenc.ValFloatHistogram:
			_, fh := w.it.AtFloatHistogram(nil)
			ref, err = w.app.AppendHistogram(ref, ls, t, nil, fh)
		default:
			return fmt.Errorf("series %s: unknown value type %v at %d", ls, vt, t)
		}
		if err != nil {
			if !refusal(err) {
				return fmt.Errorf("series %s at %s: %w", ls, fmtMillis(t), err)
			}
			w.refused++
			w.prog.AddRefused(1)
			if w.refused <= 10 {
				w.log.Warn("The store refused a sample; it is skipped", "series", ls.String(), "time", fmtMillis(t), "err", err)
			}
			continue
		}
		w.minT, w.maxT = min(w.minT, t), max(w.maxT, t)
		w.n++
		if w.n >= w.batch {
			if err := w.flush(ctx); err != nil {
				return err
			}
		}
	}
	if err := w.it.Err(); err != nil {
		return fmt.Errorf("series %s: %w", ls, err)
	}
	return nil
}

// flush hands the current batch to a commit of its own.
func (w *writer) flush(ctx context.Context) error {
	if err := w.failed(); err != nil {
		return err
	}
	if w.n == 0 {
		return nil
	}
	app, n := w.app, w.n
	w.app, w.n = w.st.NewAppender(), 0
	if w.lim != nil {
		if err := w.lim.WaitN(ctx, n); err != nil {
			return err
		}
	}
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.sem }()
		if err := app.Commit(ctx); err != nil {
			w.mu.Lock()
			if w.err == nil {
				w.err = err
			}
			w.mu.Unlock()
			return
		}
		w.prog.AddSamples(int64(n))
		w.mu.Lock()
		w.samples += int64(n)
		w.mu.Unlock()
	}()
	return nil
}

// failed is the first commit that failed: retryable, as the store's
// write errors are (a timeout, an overloaded node) when they reach here.
func (w *writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return retryable{w.err}
	}
	return nil
}

// reset readies the writer for a unit, after one that failed; no commit
// is in flight then (finish or abort waited for them).
func (w *writer) reset() {
	w.err = nil
	w.app, w.n = w.st.NewAppender(), 0
	w.series, w.samples, w.refused = 0, 0, 0
	w.minT, w.maxT = math.MaxInt64, math.MinInt64
}

// finish commits what is left and waits for every commit of the unit: nil
// means all its samples are stored. It resets the unit's counts.
func (w *writer) finish(ctx context.Context) (markValue, error) {
	err := w.flush(ctx)
	w.wg.Wait()
	if err == nil {
		err = w.failed()
	}
	if err != nil {
		return markValue{}, fmt.Errorf("write to the store: %w", err)
	}
	v := markValue{Series: w.series, Samples: w.samples, Refused: w.refused}
	if w.samples > 0 {
		v.MinT, v.MaxT = w.minT, w.maxT
	}
	w.series, w.samples, w.refused = 0, 0, 0
	w.minT, w.maxT = math.MaxInt64, math.MinInt64
	return v, nil
}

// abort waits for the commits in flight after a failure, so that none
// runs on once the store closes.
func (w *writer) abort() { w.wg.Wait() }

// selectAll is the series of q matching any of sels, each once.
func selectAll(ctx context.Context, q storage.Querier, sels [][]*labels.Matcher, hints *storage.SelectHints) storage.SeriesSet {
	if len(sels) == 1 {
		return q.Select(ctx, false, hints, sels[0]...)
	}
	sets := make([]storage.SeriesSet, 0, len(sels))
	for _, ms := range sels {
		sets = append(sets, q.Select(ctx, true, hints, ms...))
	}
	return storage.NewMergeSeriesSet(sets, 0, storage.ChainedSeriesMerge)
}
