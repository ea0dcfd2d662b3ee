// Package adapter is the HTTP side of the remote-storage adapter: remote
// write 1.0 and 2.0, remote read (SAMPLES and STREAMED_XOR_CHUNKS), health,
// the profiler and the adapter's own metrics; the query API (package
// queryapi) serves every other /api/v1/ path on the same mux. It knows nothing of Cassandra: it
// talks to the Store interface declared in store.go.
//
// Choices where the specs leave room (docs/remote-protocols.md):
//   - Write Content-Type: missing, application/x-protobuf or
//     proto=prometheus.WriteRequest is 1.0; proto=io.prometheus.write.v2.Request
//     (quoted or spaced, RFC 9110) is 2.0; anything else 415 without the 2.0
//     headers, as the version is unknown.
//   - Write Content-Encoding must be snappy (case-insensitive); missing or
//     anything else is 415 for both versions. Read accepts a missing
//     Content-Encoding as snappy, as Prometheus's own read handler does.
//   - Size: body or snappy-declared decoded size over MaxRequestBytes is 413;
//     a zero-byte body, framed snappy, gzip or other corrupt input is 400; an
//     empty message (snappy "\x00") is 204 (2.0: with zero counts).
//   - A body that is not the message the Content-Type announces (2.0 as 1.0
//     and the reverse, a ReadRequest posted to write) is 400 and nothing is
//     stored; the message names the message it looks like.
//   - 2.0 symbol-table violations reject the whole request (refs cannot be
//     trusted); per-series problems (no labels, duplicate names, both or
//     neither samples and histograms, invalid histogram, store refusal) are
//     partial: the rest is committed, then 400 listing up to 10 series.
//   - A failed Commit (5xx) wins over rejected series and confirms nothing:
//     the 2.0 headers say 0. 2.0 metadata goes to the series' __name__ as is.
//   - Concurrency limits answer 503 at once; 0 means unlimited.
package adapter

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kairos-remote/kairos-adapter/internal/selfmetric"
)

// Defaults for zero Options fields.
const (
	DefaultMaxRequestBytes = 32 << 20 // as Prometheus's receiver (#18642)
	DefaultMaxBytesInFrame = 1 << 20  // as --storage.remote.read-max-bytes-in-frame
)

// Options configure the handlers. Zero values select the defaults or, for
// limits, no limit.
type Options struct {
	// MaxRequestBytes caps both the compressed body and its decoded size
	// (as declared by the snappy header, checked before allocating) of
	// write and read requests; over it the answer is 413. Default 32 MiB.
	MaxRequestBytes int64
	// MaxConcurrentWrites and MaxConcurrentReads bound the requests served
	// at once; one more is answered 503 at once (Prometheus retries it with
	// backoff) rather than queued without bound. 0 means unlimited.
	MaxConcurrentWrites int
	MaxConcurrentReads  int
	// MaxWriteBytesInFlight bounds the estimated memory of the write
	// requests in flight together (budget.go); a request that does not fit
	// is answered 503 at once, unless nothing else is in flight. 0 means
	// unlimited.
	MaxWriteBytesInFlight int64
	// MaxSamplesPerQuery bounds the samples one remote-read query loads
	// from the store (--query.max-samples), counted by the store's budget
	// that SampleLimit puts in the query's context, the same budget a PromQL
	// query's selectors get. Over the limit the answer is 400
	// "exceeded sample limit (N)" when no byte was sent yet; a stream
	// already started is aborted. 0 means unlimited. (The store bounds the
	// series of a query, --query.max-series, for every reader.)
	MaxSamplesPerQuery int
	// SampleLimit returns a context under which the store's reads of one
	// query load at most limit samples and then fail with
	// storeerr.ErrTooManySamples (kairosstore.WithSampleLimit, passed by
	// main.go). Required when MaxSamplesPerQuery is set.
	SampleLimit func(ctx context.Context, limit int) context.Context
	// MaxBytesInFrame is the target size of a streamed-read frame; a frame
	// overshoots it by at most one chunk. Default 1 MiB.
	MaxBytesInFrame int
	// Gatherer is served on /metrics. When nil, the Registerer passed to New
	// is used if it is also a Gatherer; otherwise /metrics is not served.
	Gatherer prometheus.Gatherer
	// ReadTimeout bounds one remote-read request (all of its queries); 0
	// means only the client's own timeout applies.
	ReadTimeout time.Duration
	// SeriesCacheSize bounds the series whose store ref the write handler
	// remembers, per generation (two are kept). It should exceed the
	// series count of the senders; default 200,000
	// (--web.write-series-cache-size).
	SeriesCacheSize int
	// SeriesCacheTTL is how long the write handler keeps a ref before it
	// decodes the series' labels again; default 5m
	// (--web.write-series-cache-ttl).
	SeriesCacheTTL time.Duration
}

// Handlers are the adapter's endpoints: remote write and read, health,
// readiness, self-metrics and the profiler.
type Handlers struct {
	store    Store
	write    *writeHandler
	read     *readHandler
	gatherer prometheus.Gatherer
	reg      prometheus.Registerer
	logger   *slog.Logger
	m        *metrics
}

// New returns the adapter's endpoints alone in a route table of their own.
func New(store Store, opts Options, logger *slog.Logger, reg prometheus.Registerer) http.Handler {
	rt := NewRoutes(reg)
	NewHandlers(store, opts, logger, reg).Register(rt.Handle)
	return rt
}

// NewHandlers returns the adapter's endpoints; Register adds them to the
// process's route table.
func NewHandlers(store Store, opts Options, logger *slog.Logger, reg prometheus.Registerer) *Handlers {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.MaxBytesInFrame <= 0 {
		opts.MaxBytesInFrame = DefaultMaxBytesInFrame
	}
	if opts.MaxSamplesPerQuery > 0 && opts.SampleLimit == nil {
		panic("adapter: Options.MaxSamplesPerQuery needs Options.SampleLimit, the store's budget")
	}
	if opts.Gatherer == nil {
		if g, ok := reg.(prometheus.Gatherer); ok {
			opts.Gatherer = g
		}
	}
	m := newMetrics(reg)
	return &Handlers{
		store: store, gatherer: opts.Gatherer, reg: reg, logger: logger, m: m,
		write: &writeHandler{
			store:    store,
			logger:   logger,
			m:        m,
			maxBytes: opts.MaxRequestBytes,
			limit:    newRequestSlots(opts.MaxConcurrentWrites),
			budget:   newByteBudget(opts.MaxWriteBytesInFlight),
			series:   newSeriesCache(cmp.Or(opts.SeriesCacheSize, 200_000), cmp.Or(opts.SeriesCacheTTL, 5*time.Minute)),
			// A series has a few symbols of its own (instance, pod...); the
			// rest are shared.
			symbols: newSymbolTable(8 * cmp.Or(opts.SeriesCacheSize, 200_000)),
		},
		read: &readHandler{
			store:      store,
			logger:     logger,
			m:          m,
			maxBytes:   opts.MaxRequestBytes,
			limit:      newRequestSlots(opts.MaxConcurrentReads),
			maxSamples: max(opts.MaxSamplesPerQuery, 0),
			budget:     opts.SampleLimit,
			maxFrame:   opts.MaxBytesInFrame,
			timeout:    opts.ReadTimeout,
		},
	}
}

// Register passes each of the adapter's routes to handle (Routes.Handle): a
// ServeMux pattern, a name for the request metrics ("" for none), the
// handler.
func (a *Handlers) Register(handle func(pattern, name string, h http.Handler)) {
	// Prometheus's own paths, and the short ones older adapters used.
	handle("POST /api/v1/write", "write", a.write)
	handle("POST /write", "write", a.write)
	handle("POST /api/v1/read", "read", a.read)
	handle("POST /read", "read", a.read)
	handle("GET /-/healthy", "healthy", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("Healthy.\n"))
	}))
	handle("GET /-/ready", "ready", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.store.Ready(r.Context()); err != nil {
			http.Error(w, "Not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("Ready.\n"))
	}))
	// Go's profiler, served as Prometheus serves it: what an operator asks
	// for first when the adapter is slow, and where BENCHMARKS.md's profiles
	// come from. The web config's TLS and basic auth cover it like any path.
	// Not counted: a profile lasts as long as it asks.
	handle("GET /debug/pprof/", "", http.HandlerFunc(pprof.Index))
	handle("GET /debug/pprof/cmdline", "", http.HandlerFunc(pprof.Cmdline))
	handle("GET /debug/pprof/profile", "", http.HandlerFunc(pprof.Profile))
	handle("GET /debug/pprof/symbol", "", http.HandlerFunc(pprof.Symbol))
	handle("GET /debug/pprof/trace", "", http.HandlerFunc(pprof.Trace))
	if a.gatherer != nil {
		handle("GET /metrics", "metrics", promhttp.HandlerFor(a.gatherer, promhttp.HandlerOpts{
			EnableOpenMetrics: true,
			ErrorHandling:     promhttp.ContinueOnError,
			ErrorLog:          slog.NewLogLogger(a.logger.Handler(), slog.LevelError),
			Registry:          a.reg,
		}))
	}
}

// Status is the adapter's part of the status page.
type Status struct {
	// Rejections are the requests answered 503 by a concurrency limit or
	// the write byte budget since the process started, by handler.
	Rejections map[string]float64 `json:"rejections"`
}

// Status reads the adapter's own counters.
func (a *Handlers) Status() Status {
	st := Status{Rejections: map[string]float64{}}
	selfmetric.Each(a.m.limitRejections, a.logger, func(handler string, v float64) { st.Rejections[handler] += v })
	return st
}

// requestSlots bounds the requests served at once without queueing: when
// every slot is taken the next request is answered 503 at once. Nil admits
// everything.
type requestSlots chan struct{}

func newRequestSlots(n int) requestSlots {
	if n <= 0 {
		return nil
	}
	return make(requestSlots, n)
}

func (l requestSlots) tryAcquire() bool {
	if l == nil {
		return true
	}
	select {
	case l <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l requestSlots) release() {
	if l != nil {
		<-l
	}
}
