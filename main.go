// Command kairos-adapter is a Prometheus remote-write and remote-read endpoint
// that stores samples in Apache Cassandra in KairosDB's layout, or in an
// embedded store with the same layout.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	oklogrun "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/kairos-remote/kairos-adapter/adapter"
	"github.com/kairos-remote/kairos-adapter/config"
	"github.com/kairos-remote/kairos-adapter/frontend"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/queryapi"
	webui "github.com/kairos-remote/kairos-adapter/web"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program: it serves until ctx ends (SIGINT or SIGTERM in
// main), then drains in-flight requests. Everything it prints goes to
// stderr, so tests can run it in-process and read its log.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	app := kingpin.New("kairos-adapter", "Prometheus remote storage in Apache Cassandra, in KairosDB's layout.")
	app.HelpFlag.Short('h')
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	// The server is the default command, so that no arguments serve.
	app.Command("serve", "Serve remote write, remote read, the query API and the web UI (the default).").Default()
	imports := addImportCommands(app)
	snapshot := addSnapshotCommand(app)
	cfg, cmd, err := config.ParseCommand(app, args)
	if err != nil {
		fmt.Fprintf(stderr, "kairos-adapter: %v\n", err)
		fmt.Fprintln(stderr, "Try --help.")
		return 2
	}
	logger := newLogger(cfg, stderr)
	if strings.HasPrefix(cmd, "import ") {
		return imports.run(ctx, cmd, cfg, stderr, logger)
	}
	if cmd == "snapshot" {
		return snapshot.run(ctx, cfg, stderr, logger)
	}
	// Checked before any store opens, so a broken TLS or auth setup fails
	// fast instead of after a Cassandra connection.
	if cfg.Web.ConfigFile != "" {
		if err := web.Validate(cfg.Web.ConfigFile); err != nil {
			logger.Error("Invalid --web.config.file", "file", cfg.Web.ConfigFile, "err", err)
			return 1
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rolls, err := newRollups(cfg, logger, reg)
	if err != nil {
		logger.Error("Invalid rollup configuration", "err", err)
		return 1
	}

	store := &lazyStore{}
	var embedded *pebblekv.Engine // for the status page's block cache and snapshots
	// Prometheus's query API, so Grafana can query the adapter directly.
	queryAPI := queryapi.New(store, queryapi.Options{
		Timeout:             time.Duration(cfg.Query.Timeout),
		LookbackDelta:       time.Duration(cfg.Query.LookbackDelta),
		MaxConcurrency:      cfg.Query.MaxConcurrency,
		MaxSamples:          cfg.Query.MaxSamples,
		SampleLimit:         kairosstore.WithSampleLimit,
		EnableAdminAPI:      cfg.Web.EnableAdminAPI,
		RollupResolutions:   rolls.cfg.Resolutions,
		Rollups:             rolls.recomputeRoute(),
		Snapshot:            snapshotRoute(cfg, func() *pebblekv.Engine { return embedded }),
		MaxSourceResolution: cfg.Query.MaxSourceResolution,
		Limits: queryapi.Limits{
			MaxLength:        cfg.Query.MaxLength,
			MaxDepth:         cfg.Query.MaxDepth,
			MaxSubquerySteps: cfg.Query.MaxSubquerySteps,
		},
	}, logger, reg)
	// Range queries go through the frontend: split by day, sharded, and
	// cached; the store's change notices invalidate the cache, so the
	// frontend exists before the store opens.
	var queryRange frontend.Inner
	queryAPI.Register(func(_, name string, h http.Handler) {
		if name == "query_range" {
			queryRange = h.(frontend.Inner)
		}
	})
	front := frontend.New(queryRange, frontend.Options{
		SplitInterval:  splitInterval(cfg),
		Parallelism:    cfg.Query.Parallelism,
		Shards:         cfg.Query.Shards,
		CacheBytes:     cfg.Query.ResultsCacheBytes,
		CacheFreshness: time.Duration(cfg.Query.ResultsCacheFreshness),
		CacheTTL:       time.Duration(cfg.Query.ResultsCacheTTL),
		AlignSteps:     cfg.Query.AlignSteps,
		LookbackDelta:  time.Duration(cfg.Query.LookbackDelta),
	}, reg, logger)

	// The engine is closed once, on the way out, after the HTTP server has
	// drained: the embedded one opens below, the Cassandra one in the store
	// actor, which has returned by the time run does.
	var eng engine.Engine
	defer func() {
		if eng == nil {
			return
		}
		if err := eng.Close(); err != nil {
			logger.Warn("Closing the store", "storage", cfg.Storage.Type, "err", err)
		}
	}()
	defer rolls.stop() // before the engine closes
	var cqlCfg cql.Config
	switch cfg.Storage.Type {
	case "embedded":
		// A local store either opens now or never: fail fast.
		opts := pebblekv.DefaultOptions()
		opts.CacheSize = cfg.Storage.EmbeddedCacheBytes
		e, err := pebblekv.Open(cfg.Storage.Path, opts, logger)
		if err == nil {
			eng, embedded = e, e // not before: a nil *pebblekv.Engine is a non-nil Engine
			err = openStore(ctx, cfg, e, store, rolls, front.OnChange, logger, reg)
		}
		if err != nil {
			logger.Error("Cannot open the embedded store", "path", cfg.Storage.Path, "err", err)
			return 1
		}
	case "cassandra":
		if cqlCfg, err = cassandraConfig(cfg); err != nil {
			logger.Error("Invalid Cassandra configuration", "err", err)
			return 1
		}
	}

	var cqlEngine atomic.Pointer[cql.Engine] // for the status page's hosts
	ui := webui.New(webui.Options{
		Store: func() webui.Store {
			if s := store.get(); s != nil {
				return s
			}
			return nil
		},
		Gatherer: reg, MetricPrefix: cfg.KairosDB.MetricPrefix, Config: cfg, API: queryAPI.JSON, MaxMetrics: cfg.Query.MaxMetrics, Logger: logger,
		Status: func() map[string]any {
			st := map[string]any{"engine": cfg.Storage.Type, "keyspace": cfg.Cassandra.Keyspace, "path": cfg.Storage.Path}
			if e := cqlEngine.Load(); e != nil {
				st["hosts"] = e.Hosts()
			}
			if embedded != nil {
				st["block_cache"] = embedded.CacheStatus()
			}
			if rolls.enabled() {
				st["rollups"] = rolls.status()
			}
			return st
		},
	})
	handler := adapter.New(store, adapter.Options{
		MaxRequestBytes:       cfg.Web.MaxRequestBytes,
		MaxConcurrentWrites:   cfg.Web.MaxConcurrentWrites,
		MaxWriteBytesInFlight: cfg.Web.MaxWriteBytesInFlight,
		MaxConcurrentReads:    cfg.Web.MaxConcurrentReads,
		MaxSamplesPerQuery:    cfg.Query.MaxSamples,
		SampleLimit:           kairosstore.WithSampleLimit,
		Gatherer:              reg,
		SeriesCacheSize:       cfg.KairosDB.IndexCacheSize,
		SeriesCacheTTL:        time.Duration(cfg.KairosDB.IndexCacheTTL),
		Routes: func(handle func(string, string, http.Handler)) {
			queryAPI.Register(func(pattern, name string, h http.Handler) {
				if name == "query_range" {
					h = front
				}
				handle(pattern, name, h)
			})
			ui.Register(handle)
		},
	}, logger, reg)
	// --web.read-timeout bounds the whole request, headers included: a
	// client that trickles its headers holds a connection no longer than
	// one that trickles its body.
	readTimeout := time.Duration(cfg.Web.ReadTimeout)
	srv := &http.Server{
		Handler:           handler,
		ReadTimeout:       readTimeout,
		ReadHeaderTimeout: readTimeout,
		// Handler panics and TLS handshake errors go to our log.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError),
	}
	webFlags := &web.FlagConfig{
		WebListenAddresses: &[]string{cfg.Web.ListenAddress},
		WebSystemdSocket:   new(bool),
		WebConfigFile:      &cfg.Web.ConfigFile,
	}

	// The process is three actors; the first to return ends the others:
	// ctx (a signal), the HTTP server failing, or the Cassandra store
	// failing to open.
	var g oklogrun.Group
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			<-ctx.Done()
			return nil
		}, func(error) { cancel() })
	}
	g.Add(func() error {
		logger.Info("Serving", "address", cfg.Web.ListenAddress, "storage", cfg.Storage.Type, "web_config_file", cfg.Web.ConfigFile)
		// exporter-toolkit serves TLS and basic auth as the web config file
		// says (plain HTTP when the flag is empty) and logs the address it
		// listens on.
		err := web.ListenAndServe(srv, webFlags, logger)
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		logger.Error("HTTP server failed", "err", err)
		return err
	}, func(error) {
		logger.Info("Shutting down: draining in-flight requests")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			logger.Warn("Shutdown did not drain every request", "err", err)
		}
	})
	if cfg.Storage.Type == "cassandra" {
		// Cassandra may come up after the adapter: serve health checks (not
		// ready) meanwhile and keep trying. Once open, the store stays until
		// the end; eng is read only after g.Run has returned.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			e, err := connectCassandra(ctx, cqlCfg, logger)
			if err != nil {
				return nil // interrupted
			}
			eng = e
			cqlEngine.Store(e)
			reg.MustRegister(e.Collectors()...)
			if err := openStore(ctx, cfg, e, store, rolls, front.OnChange, logger, reg); err != nil {
				if ctx.Err() != nil {
					return nil // interrupted
				}
				logger.Error("Cannot open the Cassandra store", "err", err)
				return err
			}
			<-ctx.Done()
			return nil
		}, func(error) { cancel() })
	}
	if err := g.Run(); err != nil {
		return 1
	}
	return 0
}

// splitInterval is --query.split-interval as the frontend takes it: 0
// turns splitting off.
func splitInterval(cfg *config.Config) time.Duration {
	if cfg.Query.SplitInterval == 0 {
		return -1
	}
	return time.Duration(cfg.Query.SplitInterval)
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	lvl, format := promslog.NewLevel(), promslog.NewFormat()
	_ = lvl.Set(cfg.Log.Level) // validated by config
	_ = format.Set(cfg.Log.Format)
	return promslog.New(&promslog.Config{Level: lvl, Format: format, Writer: w})
}

// openStore sets up the engine's tables and the layout, starts the rollup
// job over the store and then makes the store available to the HTTP
// handlers, in that order: every write must find the job to store its
// recomputation marks (rollups.BeforeChange). The store's changes go to
// the job (Guard) and to onChange (the frontend's cache).
func openStore(ctx context.Context, cfg *config.Config, eng engine.Engine, into *lazyStore, rolls *rollups, onChange func([]kairosstore.Change), logger *slog.Logger, reg prometheus.Registerer) error {
	if err := eng.Setup(ctx); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	opts := storeOptions(cfg)
	opts.OnChange = onChange
	opts.Guard = rolls
	s, err := kairosstore.Open(ctx, eng, opts, logger, reg)
	if err != nil {
		return err
	}
	logger.Info("Store ready", "row_time_unit", s.Spec().Unit, "row_width", s.Spec().Width)
	if err := rolls.start(s); err != nil {
		return err
	}
	into.set(s)
	return nil
}

// storeOptions are the store's options from the configuration, but for
// OnChange and Guard.
func storeOptions(cfg *config.Config) kairosstore.Options {
	tagIndexed := map[string][]string{}
	for _, m := range cfg.KairosDB.TagIndexedMetrics {
		tagIndexed[m] = nil
	}
	return kairosstore.Options{
		RowTimeUnit:       codec.ParseTimeUnit(cfg.KairosDB.RowTimeUnit),
		RowWidth:          time.Duration(cfg.KairosDB.RowWidth),
		TTL:               int32(time.Duration(cfg.KairosDB.DatapointTTL).Seconds()),
		TagIndexed:        tagIndexed,
		IndexCacheSize:    cfg.KairosDB.IndexCacheSize,
		IndexCacheTTL:     time.Duration(cfg.KairosDB.IndexCacheTTL),
		RowKeysCacheBytes: cfg.KairosDB.RowKeysCacheBytes,
		MetricPrefix:      cfg.KairosDB.MetricPrefix,
		MaxMetrics:        cfg.Query.MaxMetrics,
		MaxSeries:         cfg.Query.MaxSeries,
	}
}

func cassandraConfig(cfg *config.Config) (cql.Config, error) {
	c := cfg.Cassandra
	out := cql.Config{
		Hosts:             c.Hosts,
		Keyspace:          c.Keyspace,
		Replication:       c.Replication,
		WriteConsistency:  strings.ToUpper(c.WriteConsistency),
		ReadConsistency:   strings.ToUpper(c.ReadConsistency),
		LocalDC:           c.LocalDC,
		Username:          c.Username,
		Timeout:           time.Duration(c.Timeout),
		ConnectTimeout:    time.Duration(c.ConnectTimeout),
		MaxInFlight:       c.MaxInFlightRequests,
		SlowRequest:       time.Duration(c.SlowRequest),
		QueueTimeout:      time.Duration(c.QueueTimeout),
		ReconnectInterval: time.Duration(c.ReconnectInterval),
	}
	if out.SlowRequest == 0 {
		out.SlowRequest = -1 // 0 turns the latency signal off; cql reads 0 as its default
	}
	pw, err := cfg.CassandraPassword()
	if err != nil {
		return out, err
	}
	out.Password = pw
	if c.TLS.CAFile != "" || c.TLS.CertFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.TLS.CAFile != "" {
			pem, err := os.ReadFile(c.TLS.CAFile)
			if err != nil {
				return out, fmt.Errorf("--cassandra.tls.ca-file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return out, fmt.Errorf("--cassandra.tls.ca-file %s: no PEM certificate found", c.TLS.CAFile)
			}
		}
		if c.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
			if err != nil {
				return out, fmt.Errorf("--cassandra.tls.cert-file/key-file: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		out.TLS = tc
	}
	return out, nil
}
