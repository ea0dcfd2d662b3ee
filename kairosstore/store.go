// Package kairosstore keeps Prometheus samples in KairosDB's Cassandra layout:
// row keys, column names and values byte for byte as KairosDB writes them
// (docs/kairosdb-layout.md, cited as §n), the index tables, and the
// three-phase tag-filtered read. Where rows are kept is an Engine's business.
package kairosstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/prometheus/model/metadata"

	"github.com/kairos-remote/kairos-adapter/internal/lru"
	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
	"github.com/kairos-remote/kairos-adapter/translate"
)

// Options configures a Store.
type Options struct {
	// RowTimeUnit and RowWidth are the row spec a fresh keyspace is created
	// with; the store stores the width in the unit's terms (rowSpec). An
	// existing keyspace's spec table wins; a contradiction is an error
	// (§3.3). A zero RowWidth means KairosDB's default of three weeks.
	RowTimeUnit codec.TimeUnit
	RowWidth    time.Duration
	// TTL is the time to live of samples in seconds; 0 keeps them forever.
	TTL int32
	// TagIndexed lists metrics whose row keys also go to tag_indexed_row_keys
	// (§6.1): metric name -> indexed tag names (empty = all tags). The key "*"
	// stands for every metric.
	TagIndexed map[string][]string
	// IndexCacheSize bounds the entries of each index cache (cache.go):
	// that many per generation, twice that in all. Default 200,000
	// (DefaultIndexCacheSize).
	IndexCacheSize int
	// IndexCacheTTL is how long an index row this store wrote is trusted to
	// still exist (cache.go): one another writer deleted is written again
	// at most this long after. Default 5 minutes (defaultIndexCacheTTL).
	IndexCacheTTL time.Duration
	// RowKeysCacheBytes bounds the memory of the row_keys listings kept
	// for phase 2 of the read (index/kept.go); 0 keeps none.
	RowKeysCacheBytes int64
	// RowKeysCacheTTL is how long a kept listing is used after it was
	// read: the staleness bound of series other writers add. Default 5
	// minutes.
	RowKeysCacheTTL time.Duration
	// MetricPrefix is added to every metric name written and required of
	// every name read.
	MetricPrefix string
	// MaxMetrics, MaxSeries bound one query; 0 means no limit.
	MaxMetrics, MaxSeries int
	// ReadConcurrency bounds the data_points slices read at once per query.
	ReadConcurrency int
	// ReadAheadSamples bounds the samples a query reads ahead of its
	// consumer (16 bytes each): a depth of ReadConcurrency series
	// shrinks to ReadAheadSamples / samples per series, never below one,
	// so a query of long series holds about 64 MiB of them by default, not
	// ReadConcurrency whole series. Default 4 Mi.
	ReadAheadSamples int64
	// Now is the clock for write timestamps and the caches' ages; nil means
	// time.Now.
	Now func() time.Time
	// OnChange, when set, hears of every commit and delete: which metrics
	// and which times they touched, so that what is derived from stored
	// samples (rollups, cached query results) can be redone. It is called
	// after the engine returns, also when it failed (some rows may be
	// stored), on the caller's goroutine: it must not block.
	OnChange func([]Change)
	// Guard, when set, is told of a commit of received samples and of a
	// delete before the engine writes it and again once the engine has
	// confirmed it, on the caller's goroutine, with the changes OnChange
	// hears; an error fails the commit or the delete. What is derived
	// from stored samples and kept on disk (the rollup job's
	// recomputation marks) is stored there, so that it is as durable as
	// the samples by the time the caller answers: OnChange, called after
	// the write and allowed no I/O, would leave a window in which a
	// stopped process loses it. Commits of Appender.SetDerived skip it.
	Guard Guard
}

// Guard is what Options.Guard is told. It is on every write's path: it
// must not do I/O for a change it has no use for.
type Guard interface {
	// BeforeChange is called before the engine writes; an error returns
	// at once, with nothing written.
	BeforeChange(ctx context.Context, cs []Change) error
	// AfterChange is called once the engine has confirmed the write,
	// with the time BeforeChange was called (Options.Now); an error
	// fails the commit or delete, whose rows are stored: the caller
	// answers an error, and a retry writes the same rows again.
	AfterChange(ctx context.Context, cs []Change, began time.Time) error
}

// Change is the samples of one metric a commit or a delete touched.
type Change struct {
	Metric     string // the Prometheus metric name, without --store.metric-prefix
	MinT, MaxT int64  // inclusive, ms
	Deleted    bool
	// Derived is a commit of samples computed from others (rollups,
	// Appender.SetDerived), not of samples received.
	Derived bool
}

// Store is the KairosDB layout over an Engine.
type Store struct {
	eng    engine.Engine
	opts   Options
	spec   codec.RowSpec
	mapper translate.Mapper
	log    *slog.Logger
	// The caches of cache.go. rowKeys and metricRows map what they
	// remember to the stamp of the write that confirmed it.
	rowKeys    *lru.Cache[string, int64] // series rows whose row_keys entries are stored
	metricRows *lru.Cache[string, int64] // (metric, row time) whose row_key_time_index and string_index entries are stored
	series     *lru.Cache[uint64, *series]
	names      *lru.Cache[string, string]            // metric names, interned for series.name
	refs       *refTable                             // of the series, for Appender refs
	meta       *lru.Cache[string, metadata.Metadata] // by metric family
	bufs       sync.Pool                             // *appendBuffers
	samples    sync.Pool                             // *listSeries whose slices a read may fill again (listseries.go)
	readers    readers                               // the goroutines of reads ahead (seriesset.go)
	// idx answers which series and rows a selector selects, and keeps
	// the row_keys listings (index/).
	idx *index.Index
	// born is the origin of stamps; indexClearedAt is the stamp of the
	// last delete that removed index rows (Store.fresh).
	born           time.Time
	indexClearedAt atomic.Int64
	// lastDeleteMillis is the write time (ms) of the latest delete: later
	// writes carry a later one, as a tie goes to the tombstone (§5.4).
	lastDeleteMillis atomic.Int64
	m                storeMetrics
	// done is the rollup progress reads trust (rollupread.go).
	done doneCache
}

type storeMetrics struct {
	// The index cache counters, resolved once: Commit adds to them for
	// every request.
	rowKeyHits, rowKeyMisses, metricRowHits, metricRowMisses prometheus.Counter
	skipped                                                  *prometheus.CounterVec
	opDuration                                               *prometheus.HistogramVec
	// cellsRead is the data_points cells reads fetched, raw or of rollups
	// (rollupread.go): what a read plan is meant to reduce.
	cellsRead *prometheus.CounterVec
}

// rowSpec is the spec table's form of a row width (§3.3): whole seconds
// with unit SECONDS, where KairosDB reads row_width as seconds, and
// milliseconds otherwise.
func rowSpec(unit codec.TimeUnit, width time.Duration) codec.RowSpec {
	if width == 0 {
		width = time.Duration(codec.DefaultRowSpec().Width) * time.Millisecond
	}
	if unit == codec.Seconds {
		return codec.RowSpec{Unit: unit, Width: int64(width / time.Second)}
	}
	return codec.RowSpec{Unit: unit, Width: width.Milliseconds()}
}

// Open reads or initialises the keyspace's spec and returns a Store. The
// engine must already be set up (Engine.Setup).
func Open(ctx context.Context, eng engine.Engine, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Store, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	spec := rowSpec(opts.RowTimeUnit, opts.RowWidth)
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("configured row spec: %w", err)
	}
	if opts.ReadConcurrency <= 0 {
		opts.ReadConcurrency = 16
	}
	if opts.ReadAheadSamples <= 0 {
		opts.ReadAheadSamples = 1 << 22
	}
	if opts.IndexCacheSize <= 0 {
		opts.IndexCacheSize = DefaultIndexCacheSize
	}
	if opts.IndexCacheTTL <= 0 {
		opts.IndexCacheTTL = defaultIndexCacheTTL
	}
	if opts.RowKeysCacheTTL <= 0 {
		opts.RowKeysCacheTTL = defaultIndexCacheTTL
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := promauto.With(reg)
	s := &Store{
		eng:        eng,
		opts:       opts,
		mapper:     translate.Mapper{Prefix: opts.MetricPrefix},
		log:        logger,
		rowKeys:    lru.New[string, int64](opts.IndexCacheSize, opts.IndexCacheTTL, opts.Now),
		metricRows: lru.New[string, int64](opts.IndexCacheSize, opts.IndexCacheTTL, opts.Now),
		series:     lru.New[uint64, *series](opts.IndexCacheSize, opts.IndexCacheTTL, opts.Now),
		names:      lru.New[string, string](maxInternedNames, opts.IndexCacheTTL, opts.Now),
		// The series cache holds up to two generations of entries.
		refs: newRefTable(2 * opts.IndexCacheSize),
		meta: lru.New[string, metadata.Metadata](maxCachedFamilies, opts.IndexCacheTTL, opts.Now),
		born: opts.Now(),
		m: storeMetrics{
			cellsRead: f.NewCounterVec(prometheus.CounterOpts{
				Namespace: "kairos_adapter", Name: "read_cells_total",
				Help: "data_points cells that reads fetched from the engine: of raw series, or of rollup series read in their place.",
			}, []string{"kind"}),
			skipped: f.NewCounterVec(prometheus.CounterOpts{
				Namespace: "kairos_adapter", Name: "read_skipped_values_total",
				Help: "Stored values a read skipped because they are not numbers (kairos_string, unknown types, empty null values).",
			}, []string{"data_type"}),
			opDuration: f.NewHistogramVec(prometheus.HistogramOpts{
				Namespace: "kairos_adapter", Name: "store_operation_duration_seconds",
				Help:    "Duration of store operations against the engine.",
				Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
			}, []string{"operation"}),
		},
	}
	hits := f.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kairos_adapter", Name: "index_cache_hits_total",
		Help: "Index rows not written again because this process already stored them.",
	}, []string{"cache"})
	misses := f.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kairos_adapter", Name: "index_cache_misses_total",
		Help: "Index rows written because this process had not stored them yet.",
	}, []string{"cache"})
	s.m.rowKeyHits, s.m.rowKeyMisses = hits.WithLabelValues("row_keys"), misses.WithLabelValues("row_keys")
	s.m.metricRowHits, s.m.metricRowMisses = hits.WithLabelValues("row_key_time_index"), misses.WithLabelValues("row_key_time_index")
	spec, err := s.initSpec(ctx, spec)
	if err != nil {
		return nil, err
	}
	s.spec = spec
	s.idx = index.New(eng, index.Options{
		Logger:          s.log,
		Spec:            spec,
		Mapper:          s.mapper,
		MinTime:         s.minTime(),
		TagIndexed:      opts.TagIndexed,
		MaxMetrics:      opts.MaxMetrics,
		ReadConcurrency: opts.ReadConcurrency,
		ListingBytes:    opts.RowKeysCacheBytes,
		ListedOnce:      opts.IndexCacheSize,
		TTL:             opts.RowKeysCacheTTL,
		Now:             opts.Now,
	}, index.Metrics{Skipped: s.m.skipped, OpDuration: s.m.opDuration}, reg)
	return s, nil
}

// Spec is the keyspace's row spec in force.
func (s *Store) Spec() codec.RowSpec { return s.spec }

// Ready reports whether the engine answers.
func (s *Store) Ready(ctx context.Context) error { return s.eng.Ready(ctx) }

// initSpec follows KairosDB's start-up (§3.3): the spec table wins; on a
// keyspace without spec rows the configured spec is written before any data,
// except that a keyspace which already lists metric names is LEGACY.
func (s *Store) initSpec(ctx context.Context, want codec.RowSpec) (codec.RowSpec, error) {
	now := s.opts.Now().UnixMilli()
	unitText, haveUnit, err := s.eng.Spec(ctx, "row_time_unit")
	if err != nil {
		return codec.RowSpec{}, fmt.Errorf("read spec row_time_unit: %w", err)
	}
	widthText, haveWidth, err := s.eng.Spec(ctx, "row_width")
	if err != nil {
		return codec.RowSpec{}, fmt.Errorf("read spec row_width: %w", err)
	}
	got := want
	if haveUnit {
		got.Unit = codec.ParseTimeUnit(unitText)
	} else {
		hasNames := false
		err := s.eng.MetricNames(ctx, func(string) error { hasNames = true; return errStop })
		if err != nil && !errors.Is(err, errStop) {
			return codec.RowSpec{}, fmt.Errorf("check for legacy data: %w", err)
		}
		if hasNames {
			got.Unit = codec.Legacy
			s.log.Warn("Keyspace has metric names but no spec; treating it as KairosDB LEGACY layout, as KairosDB does")
		}
	}
	if haveWidth {
		w, err := strconv.ParseInt(widthText, 10, 64)
		if err != nil || w <= 0 {
			return codec.RowSpec{}, fmt.Errorf("spec table has row_width %q, which is not a positive integer", widthText)
		}
		got.Width = w
	}
	if err := got.Validate(); err != nil {
		return codec.RowSpec{}, fmt.Errorf("the keyspace's spec table is unusable: %w", err)
	}
	if haveUnit || haveWidth {
		if (want.Unit == codec.Seconds) != (got.Unit == codec.Seconds) || want.WidthMillis() != got.WidthMillis() {
			return codec.RowSpec{}, fmt.Errorf("keyspace was created with row time unit %s and row width %s, but the configuration asks for %s and %s: "+
				"set --kairosdb.row-time-unit=%s and --kairosdb.row-width=%s, or use another keyspace",
				got.Unit, time.Duration(got.WidthMillis())*time.Millisecond, want.Unit, time.Duration(want.WidthMillis())*time.Millisecond,
				unitFlag(got.Unit), time.Duration(got.WidthMillis())*time.Millisecond)
		}
	}
	// Unit first: a KairosDB that starts between the two writes must not
	// see a width without a unit and guess LEGACY.
	if !haveUnit {
		if err := s.eng.SetSpec(ctx, "row_time_unit", got.Unit.String(), now); err != nil {
			return codec.RowSpec{}, fmt.Errorf("write spec row_time_unit: %w", err)
		}
	}
	if !haveWidth {
		if err := s.eng.SetSpec(ctx, "row_width", strconv.FormatInt(got.Width, 10), now); err != nil {
			return codec.RowSpec{}, fmt.Errorf("write spec row_width: %w", err)
		}
	}
	return got, nil
}

func unitFlag(u codec.TimeUnit) string {
	if u == codec.Seconds {
		return "SECONDS"
	}
	return "MILLISECONDS"
}

var errStop = errors.New("stop")

// badRequest is a storeerr.ErrInvalid error: one the caller must not retry.
func badRequest(format string, args ...any) error {
	return storeerr.Invalid(fmt.Errorf(format, args...))
}

// observe records how long an engine operation took.
func (s *Store) observe(op string, start time.Time) {
	s.m.opDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
}
