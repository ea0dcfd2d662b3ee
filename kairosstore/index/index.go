// Package index answers which series a selector selects, and in which rows,
// from KairosDB's index tables alone (docs/kairosdb-layout.md §7.2 to §7.4,
// cited as §n): metric names from string_index (metric planning), row
// times from row_key_time_index (phase 1), row keys from row_keys or
// tag_indexed_row_keys (phase 2) and from the legacy row_key_index
// (phase 0). It keeps listings of row_keys partitions in memory
// (listing.go, kept.go) and is told of the entries this process writes
// (NoteWritten), so that a kept listing never hides a series this process
// stored. Reading samples (phase 3) is the caller's business.
//
// Select is the one way from matchers to rows: reads, chunked reads, the
// series API, deletes and exemplar queries all take their series from it,
// and the metric names it read (Selection.Metrics: what a delete touches).
// The label lookups plan and walk the same phases
// (eachEntry, labels.go) without building series.
package index

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/kairos-remote/kairos-adapter/internal/lru"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/translate"
)

// NonFiniteSuffix names the side index of a metric's non-finite values: their
// null-typed rows keep the metric's own row key, but their row_keys and
// row_key_time_index entries go under <metric>#nonfinite, which is not in
// string_index. KairosDB reads only the index of the metric it queries (§7),
// so it never meets these rows: a NullDataPoint prints as null in a raw
// query but fails every aggregator that asks for its value. Select looks
// up both indexes. A real metric of that name is harmless: Select takes
// only null rows from a side index, and their keys carry the other name.
const NonFiniteSuffix = "#nonfinite"

// Reader is what the index reads of an engine (kairosstore/engine.Engine).
type Reader interface {
	MetricNames(ctx context.Context, fn func(name string) error) error
	RowTimes(ctx context.Context, metric string, lo, hi int64, fn func(rowTime int64) error) error
	RowKeys(ctx context.Context, metric string, rowTime int64, fn func(dataType string, tags []codec.Tag) error) error
	TagIndexedRowKeys(ctx context.Context, metric string, rowTime int64, pair string, fn func(dataType string, tags []codec.Tag) error) error
	RowKeyExists(ctx context.Context, metric string, rowTime int64, dataType string, tags []codec.Tag) (bool, error)
	LegacyRowKeys(ctx context.Context, metric string, lo, hi []byte, fn func(rowKey []byte) error) error
}

// Options configures an Index. Spec and Mapper are required.
type Options struct {
	Spec   codec.RowSpec
	Mapper translate.Mapper
	// MinTime is the earliest timestamp the layout holds: nothing is
	// stored before it, and row-time arithmetic overflows below it.
	MinTime int64
	// TagIndexed is kairosstore.Options.TagIndexed: the metrics whose row
	// keys also go to tag_indexed_row_keys (§6.1).
	TagIndexed map[string][]string
	// MaxMetrics bounds the metric names one selector reads; 0: no limit.
	MaxMetrics int
	// ReadConcurrency bounds the index reads of one Select at once, per
	// phase.
	ReadConcurrency int
	// ListingBytes bounds the memory of the kept row_keys listings; 0
	// keeps none. Listings expire TTL after they were read.
	ListingBytes int64
	// ListedOnce bounds how many partitions listed once (not kept yet) are
	// remembered.
	ListedOnce int
	// TTL is how long a kept listing is used (kairosstore's
	// RowKeysCacheTTL): the staleness bound of entries other writers add.
	TTL time.Duration
	// Now is the clock of the listings' ages; nil means time.Now.
	Now func() time.Time
	// Logger gets the stacks of panics recovered on the index's own
	// goroutines; nil logs nothing.
	Logger *slog.Logger
}

// Index resolves selectors over KairosDB's index tables.
type Index struct {
	r    Reader
	opts Options
	m    Metrics
	// listings holds kept row_keys listings by (metric, row time), nil
	// when disabled; fills are the listings being read (kept.go).
	listings   *lru.Cache[string, *listing]
	listedOnce *lru.Cache[string, struct{}] // partitions listed, not yet kept
	building   chan struct{}                // a slot per listing being built at once
	seed       maphash.Seed
	fillMu     sync.Mutex
	fills      map[string]*listingBuilder
}

// Metrics are the store's metrics the index adds to; the index registers
// its own (newMetrics).
type Metrics struct {
	// Skipped counts values skipped, by reason; OpDuration the duration
	// of engine operations.
	Skipped    *prometheus.CounterVec
	OpDuration *prometheus.HistogramVec
	// The index's own, which New registers (a caller's are replaced):
	// phase 2, by KairosDB metric, what an operator reads to find the
	// metrics worth --kairosdb.tag-indexed-metrics; and the listings'
	// lookups.
	Scanned, Selected *prometheus.CounterVec
	ScannedPerQuery   prometheus.Histogram
	ListingLookups    *prometheus.CounterVec
}

// New returns an Index over r. Its own counters are registered on reg (nil
// registers nothing) and read back by Status and EntriesRead.
func New(r Reader, opts Options, m Metrics, reg prometheus.Registerer) *Index {
	m.Scanned, m.Selected, m.ScannedPerQuery, m.ListingLookups = newMetrics(reg)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReadConcurrency <= 0 {
		opts.ReadConcurrency = 16
	}
	x := &Index{r: r, opts: opts, m: m, seed: maphash.MakeSeed(), fills: map[string]*listingBuilder{}}
	if opts.ListingBytes > 0 {
		x.listings = lru.NewWeighted[string, *listing](opts.ListingBytes/2, opts.TTL, opts.Now, func(l *listing) int64 { return l.bytes })
		x.listedOnce = lru.New[string, struct{}](max(opts.ListedOnce, 1), opts.TTL, opts.Now)
		x.building = make(chan struct{}, maxBuilding)
	}
	return x
}

// Kind says which metrics and rows of them a Query selects.
type Kind int

const (
	// Samples selects the series of samples: the metric names the
	// matchers accept (never an exemplar metric), at most MaxMetrics of
	// them, with kept listings used (each candidate checked against
	// row_keys) and orphaned non-finite rows left out (withoutOrphans).
	Samples Kind = iota
	// Exemplars selects the exemplar series (codec.ExemplarSuffix) of the
	// metric names the matchers accept, named after the exemplar metric.
	Exemplars
	// Deletion selects what a delete removes: the series of samples and
	// their exemplars, from row_keys as they are now (no kept listing: a
	// delete must find entries other writers just added), orphaned rows
	// included, with no limit on the metric names.
	Deletion
)

// Query is a selector over a time range.
type Query struct {
	// Matchers select the series; none selects nothing (All selects
	// every series).
	Matchers []*labels.Matcher
	// Start and End bound the range (ms, inclusive): the rows of the row
	// windows that overlap it are selected.
	Start, End int64
	Kind       Kind
	// Fresh lists row_keys rather than taking kept listings, as a
	// Deletion does: for the rollup job, whose buckets must hold the
	// series other writers (an import, a second adapter) added since a
	// listing was kept, or stay wrong.
	Fresh bool
}

// All selects every series, for lookups without matchers: the label APIs
// then mean "all", where a selector without matchers means nothing.
var All = []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")}

// Series is one Prometheus series: every stored row of it in the range.
// A series spans several rows: one per row window and data type.
type Series struct {
	Labels labels.Labels
	Rows   []Row
}

// Row is one stored row of a series.
type Row struct {
	Key         []byte
	IndexMetric string // the metric its index rows are under, when not the key's (NonFiniteSuffix)
	RowTime     int64
	DataType    string
	Legacy      bool // a type-less key from row_key_index: values typed by the column's low bit (§4.8)
}

// ErrBadSelector marks the errors of a selector that cannot be answered as
// asked: matchers no plan can be made of, or more metric names than
// Options.MaxMetrics. The message says which.
var ErrBadSelector = errors.New("bad selector")

type selectorError struct{ err error }

func (e *selectorError) Error() string        { return e.err.Error() }
func (e *selectorError) Unwrap() error        { return e.err }
func (e *selectorError) Is(target error) bool { return target == ErrBadSelector }

func badSelector(format string, args ...any) error {
	return &selectorError{fmt.Errorf(format, args...)}
}

// Selection is what a Query selects.
type Selection struct {
	// Metrics are the KairosDB metric names read (metric planning): those
	// a delete may touch.
	Metrics []string
	// Series are sorted by labels.
	Series []*Series
}

// Select turns a selector and a time range into the series it selects,
// each with its rows in the row windows that overlap the range (phases 0
// to 2, §7.2 to §7.4). It reads no sample.
func (x *Index) Select(ctx context.Context, q Query) (Selection, error) {
	plan, metrics, err := x.plan(ctx, q)
	if err != nil || len(metrics) == 0 {
		return Selection{Metrics: metrics}, err
	}
	series, err := x.findSeries(ctx, metrics, plan, q.Start, q.End, q.Kind != Deletion && !q.Fresh)
	if err != nil {
		return Selection{}, err
	}
	if q.Kind == Samples {
		series = withoutOrphans(series)
	}
	return Selection{Metrics: metrics, Series: series}, nil
}

// plan is metric planning: the matchers' plan and the metric names of q,
// none when the plan selects nothing.
func (x *Index) plan(ctx context.Context, q Query) (translate.Plan, []string, error) {
	plan, err := x.opts.Mapper.Plan(q.Matchers)
	if err != nil {
		return plan, nil, badSelector("%w", err)
	}
	if plan.Empty() || q.Start > q.End {
		return plan, nil, nil
	}
	var metrics []string
	switch q.Kind {
	case Samples:
		metrics, err = x.metricNames(ctx, plan, func(name string) bool {
			// Exemplar metrics hold no samples.
			return !isExemplarMetric(name) && plan.MatchName(name)
		})
	case Exemplars:
		if plan.Metrics != nil {
			for _, m := range plan.Metrics {
				metrics = append(metrics, m+codec.ExemplarSuffix)
			}
			break
		}
		metrics, err = x.metricNames(ctx, plan, func(name string) bool {
			base, ok := strings.CutSuffix(name, codec.ExemplarSuffix)
			return ok && plan.MatchName(base)
		})
	case Deletion:
		metrics = plan.Metrics
		if metrics == nil {
			err = x.r.MetricNames(ctx, func(name string) error {
				if plan.MatchName(name) {
					metrics = append(metrics, name)
				}
				return nil
			})
			if err != nil {
				return plan, nil, fmt.Errorf("list metric names: %w", err)
			}
		}
		// A series' exemplars go with it.
		for _, m := range metrics {
			if !isExemplarMetric(m) && !slices.Contains(metrics, m+codec.ExemplarSuffix) {
				metrics = append(metrics, m+codec.ExemplarSuffix)
			}
		}
	}
	return plan, metrics, err
}

// metricNames is the metric names a plan reads: its pinned names, or those
// of string_index that accept accepts, at most MaxMetrics of them.
func (x *Index) metricNames(ctx context.Context, plan translate.Plan, accept func(name string) bool) ([]string, error) {
	if plan.Metrics != nil {
		return plan.Metrics, nil
	}
	var metrics []string
	start := time.Now()
	err := x.r.MetricNames(ctx, func(name string) error {
		if accept(name) {
			metrics = append(metrics, name)
			if x.opts.MaxMetrics > 0 && len(metrics) > x.opts.MaxMetrics {
				return badSelector("the selector matches more than %d metric names (--query.max-metrics); add a __name__ matcher", x.opts.MaxMetrics)
			}
		}
		return nil
	})
	x.observe("metric_names", start)
	return metrics, err
}

// isExemplarMetric reports whether a stored metric name is an exemplar
// metric rather than a series' metric.
func isExemplarMetric(name string) bool { return strings.HasSuffix(name, codec.ExemplarSuffix) }

// withoutOrphans drops the non-finite rows (those indexed under the side
// metric, NonFiniteSuffix) of every row window in which the series has no row
// in its metric's own index, and the series left with no rows. KairosDB's
// delete (docs/kairosdb-layout.md §8) finds keys only in that index, so a
// non-finite row without such a sibling is what a delete of the row window, by
// KairosDB or an operator, left behind. The writer indexes the series'
// kairos_double row of the row window with every non-finite sample, so rows it
// wrote always have one. A Deletion query keeps them, so that a delete
// still removes the orphans.
func withoutOrphans(series []*Series) []*Series {
	out := series[:0]
	for _, sr := range series {
		if slices.ContainsFunc(sr.Rows, func(r Row) bool { return r.IndexMetric != "" }) {
			own := map[int64]bool{}
			for _, r := range sr.Rows {
				if r.IndexMetric == "" {
					own[r.RowTime] = true
				}
			}
			sr.Rows = slices.DeleteFunc(sr.Rows, func(r Row) bool { return r.IndexMetric != "" && !own[r.RowTime] })
			if len(sr.Rows) == 0 {
				continue
			}
		}
		out = append(out, sr)
	}
	clear(series[len(out):])
	return out
}

// observe records how long an engine operation took.
func (x *Index) observe(op string, start time.Time) {
	x.m.OpDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
}
