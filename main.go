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
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	oklogrun "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/kairos-remote/kairos-adapter/adapter"
	"github.com/kairos-remote/kairos-adapter/config"
	"github.com/kairos-remote/kairos-adapter/frontend"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
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
	copyCmd := addCopyCommand(app)
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
	if cmd == "copy" {
		return copyCmd.run(ctx, cfg, stderr, logger)
	}
	// Checked before any store opens, so a broken TLS or auth setup fails
	// fast instead of after a Cassandra connection.
	if cfg.Web.ConfigFile != "" {
		if err := web.Validate(cfg.Web.ConfigFile); err != nil {
			logger.Error("Invalid --web.config.file", "file", cfg.Web.ConfigFile, "err", err)
			return 1
		}
	}

	return serve(ctx, cfg, logger)
}

// serve runs the server until ctx ends: it builds the running parts, lets
// each register its routes in the one route table, opens the store (the
// embedded one now, Cassandra's when it answers) and serves.
func serve(ctx context.Context, cfg *config.Config, logger *slog.Logger) int {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rolls, err := newRollups(cfg, logger, reg)
	if err != nil {
		logger.Error("Invalid rollup configuration", "err", err)
		return 1
	}
	p := &parts{cfg: cfg, started: time.Now(), rolls: rolls}

	// Prometheus's query API, so Grafana can query the adapter directly;
	// its range queries go through the frontend: split by day, sharded,
	// and cached. The store's change notices invalidate the cache, so the
	// frontend exists before the store opens.
	api := queryapi.New(&p.store, queryAPIOptions(cfg, p), logger, reg)
	fo := frontendOptions(cfg)
	for _, r := range rolls.Resolutions() {
		fo.AlignGrain = max(fo.AlignGrain, time.Duration(r))
	}
	p.front = frontend.New(api.RangeHandler(), fo, reg, logger)
	p.adapter = adapter.NewHandlers(&p.store, adapter.Options{
		MaxRequestBytes:       int64(cfg.Web.MaxRequestBytes),
		MaxConcurrentWrites:   cfg.Web.MaxConcurrentWrites,
		MaxWriteBytesInFlight: int64(cfg.Web.MaxWriteBytesInFlight),
		MaxConcurrentReads:    cfg.Web.MaxConcurrentReads,
		MaxSamplesPerQuery:    cfg.Query.MaxSamples,
		SampleLimit:           kairosstore.WithSampleLimit,
		Gatherer:              reg,
		SeriesCacheSize:       cfg.Web.WriteSeriesCacheSize,
		SeriesCacheTTL:        time.Duration(cfg.Web.WriteSeriesCacheTTL),
	}, logger, reg)
	ui := webui.New(webui.Options{
		Store: p.webStore, Config: cfg, Status: p.status,
		API: api.JSON, MaxMetrics: cfg.Query.MaxMetrics, Logger: logger,
	})

	// The one route table: every part registers its own routes.
	p.routes = adapter.NewRoutes(reg)
	p.adapter.Register(p.routes.Handle)
	api.Register(p.routes.Handle)
	p.front.Register(p.routes.Handle)
	ui.Register(p.routes.Handle)

	// The engine is closed once, on the way out, after the HTTP server has
	// drained and the rollup job stopped: the embedded one opens below,
	// the Cassandra one in the store actor, which has returned by the time
	// serve does.
	defer p.closeEngine(logger)
	defer rolls.Stop()
	var cqlCfg cql.Config
	switch cfg.Storage.Type {
	case "embedded":
		// A local store either opens now or never: fail fast.
		e, err := pebblekv.Open(cfg.Storage.Path, embeddedOptions(cfg), logger)
		if err == nil {
			p.embedded.Store(e)
			reg.MustRegister(e.Collectors()...)
			err = p.openStore(ctx, e, logger, reg)
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

	// --web.read-timeout bounds the whole request, headers included: a
	// client that trickles its headers holds a connection no longer than
	// one that trickles its body.
	readTimeout := time.Duration(cfg.Web.ReadTimeout)
	srv := &http.Server{
		Handler:           p.routes,
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
		// the end.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			e, err := connectCassandra(ctx, cqlCfg, logger)
			if err != nil {
				return nil // interrupted
			}
			p.cassandra.Store(e)
			reg.MustRegister(e.Collectors()...)
			if err := p.openStore(ctx, e, logger, reg); err != nil {
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

// queryAPIOptions are the query API's options from the configuration; the
// rollup job and the embedded engine it reaches through p.
func queryAPIOptions(cfg *config.Config, p *parts) queryapi.Options {
	return queryapi.Options{
		Timeout:             time.Duration(cfg.Query.Timeout),
		LookbackDelta:       time.Duration(cfg.Query.LookbackDelta),
		MaxConcurrency:      cfg.Query.MaxConcurrency,
		MaxSamples:          cfg.Query.MaxSamples,
		SampleLimit:         kairosstore.WithSampleLimit,
		EnableAdminAPI:      cfg.Web.EnableAdminAPI,
		RollupResolutions:   p.rolls.Resolutions(),
		Rollups:             p.recomputeRoute(),
		Snapshot:            snapshotRoute(cfg, p.embedded.Load),
		MaxSourceResolution: cfg.Query.MaxSourceResolution,
		RangeFrontend:       true,
		Runtime:             queryapi.Runtime{StartTime: p.started, Retention: retention(cfg), Flags: cfg.Flags()},
		Limits: queryapi.Limits{
			MaxLength:        cfg.Query.MaxLength,
			MaxDepth:         cfg.Query.MaxDepth,
			MaxSubquerySteps: cfg.Query.MaxSubquerySteps,
		},
	}
}

// retention is the samples' TTL as Prometheus's storageRetention says it:
// none when they are kept forever.
func retention(cfg *config.Config) string {
	if cfg.KairosDB.DatapointTTL == 0 {
		return ""
	}
	return cfg.KairosDB.DatapointTTL.String()
}

// frontendOptions are the frontend's options from the flags. A zero field
// takes the frontend's default, so a flag whose 0 means "none" passes a
// negative duration, which the frontend reads as none.
func frontendOptions(cfg *config.Config) frontend.Options {
	none := func(d model.Duration) time.Duration {
		if d == 0 {
			return -1
		}
		return time.Duration(d)
	}
	return frontend.Options{
		SplitInterval:  none(cfg.Query.SplitInterval),         // 0: no splitting
		CacheFreshness: none(cfg.Query.ResultsCacheFreshness), // 0: cache up to now
		Parallelism:    cfg.Query.Parallelism,
		Shards:         cfg.Query.Shards,
		CacheBytes:     int64(cfg.Query.ResultsCacheBytes),
		CacheTTL:       time.Duration(cfg.Query.ResultsCacheTTL),
		AlignSteps:     cfg.Query.AlignSteps,
		LookbackDelta:  time.Duration(cfg.Query.LookbackDelta),
		RowAlign:       rowAlign(cfg),
	}
}

// rowAlign is the frontend's RowAlign: the row width on Cassandra, where a
// row read twice costs the node a partition read; none on the embedded
// engine, where a row costs a seek and parts of equal length keep the cores
// evenly busy (BENCHMARKS.md, "Issue #30 on Cassandra: rows read once").
func rowAlign(cfg *config.Config) time.Duration {
	if cfg.Storage.Type != "cassandra" {
		return 0
	}
	return time.Duration(cfg.KairosDB.RowWidth)
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	lvl, format := promslog.NewLevel(), promslog.NewFormat()
	_ = lvl.Set(cfg.Log.Level) // validated by config
	_ = format.Set(cfg.Log.Format)
	return promslog.New(&promslog.Config{Level: lvl, Format: format, Writer: w})
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
		RowKeysCacheBytes: int64(cfg.KairosDB.RowKeysCacheBytes),
		RowKeysCacheTTL:   time.Duration(cfg.KairosDB.RowKeysCacheTTL),
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
