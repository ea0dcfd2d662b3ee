package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kairos-remote/kairos-adapter/adapter"
	"github.com/kairos-remote/kairos-adapter/config"
	"github.com/kairos-remote/kairos-adapter/frontend"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/queryapi"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
	webui "github.com/kairos-remote/kairos-adapter/web"
)

// parts are the running parts of the server, owned by serve: the store,
// the engine under it, the rollup job, the query frontend, the adapter's
// handlers and the route table they all serve in. The engine and the store
// are set once each, when they open (the Cassandra ones on the store
// actor's goroutine, while requests are served); the rest before serving.
type parts struct {
	cfg     *config.Config
	started time.Time

	store     lazyStore
	embedded  atomic.Pointer[pebblekv.Engine]
	cassandra atomic.Pointer[cql.Engine]
	rolls     *rollupjob.Runner
	front     *frontend.Frontend
	adapter   *adapter.Handlers
	routes    *adapter.Routes
}

// newRollups is the rollup job's Runner, configured from the flags.
func newRollups(cfg *config.Config, logger *slog.Logger, reg prometheus.Registerer) (*rollupjob.Runner, error) {
	rc, err := rollupjob.ConfigFrom(cfg)
	if err != nil {
		return nil, err
	}
	return rollupjob.NewRunner(rc, logger, reg)
}

// openStore sets up the engine's tables and the layout, starts the rollup
// job over the store and then makes the store available to the HTTP
// handlers, in that order: every write must find the job to store its
// recomputation marks (rollupjob.Runner.BeforeChange). The store's changes
// go to the job (Guard) and to the frontend's cache.
func (p *parts) openStore(ctx context.Context, eng engine.Engine, logger *slog.Logger, reg prometheus.Registerer) error {
	if err := eng.Setup(ctx); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	opts := storeOptions(p.cfg)
	opts.OnChange = p.front.OnChange
	opts.Guard = p.rolls
	s, err := kairosstore.Open(ctx, eng, opts, logger, reg)
	if err != nil {
		return err
	}
	if err := p.checkTTL(ctx, eng, s); err != nil {
		return err
	}
	logger.Info("Store ready", "row_time_unit", s.Spec().Unit, "row_width", s.Spec().Width)
	if err := p.rolls.Start(s); err != nil {
		return err
	}
	p.store.set(s)
	return nil
}

// ttlChecker is an engine that can refuse a TTL (the Cassandra one).
type ttlChecker interface {
	CheckTTL(ctx context.Context, ttl int32) error
}

// checkTTL refuses to start with a TTL the engine refuses: every write
// would fail with a 5xx that Prometheus retries for ever. The longest TTL
// written is the index rows' of the data or of the longest-kept rollup.
func (p *parts) checkTTL(ctx context.Context, eng engine.Engine, s *kairosstore.Store) error {
	c, ok := eng.(ttlChecker)
	longest := max(time.Duration(p.cfg.KairosDB.DatapointTTL), p.rolls.LongestRetention())
	if !ok || longest <= 0 {
		return nil
	}
	// Both are at most 20 years (config), so in range of int32 seconds.
	ttl := s.IndexTTL(int32(longest / time.Second))
	if err := c.CheckTTL(ctx, ttl); err != nil {
		return fmt.Errorf("the longest TTL the adapter would write (--kairosdb.datapoint-ttl=%s or --rollup.retention=%q, plus the row width for index rows) is %d seconds, and every write with it would fail: %w",
			p.cfg.KairosDB.DatapointTTL, strings.Join(p.cfg.Rollup.Retention, ","), ttl, err)
	}
	return nil
}

// recomputeRoute is what serves the query API's recomputation endpoint:
// none when the job is off, and no Recomputer before the job exists.
func (p *parts) recomputeRoute() func() queryapi.Recomputer {
	if !p.rolls.Enabled() {
		return nil
	}
	return func() queryapi.Recomputer {
		if j := p.rolls.Job(); j != nil {
			return j
		}
		return nil
	}
}

// closeEngine closes whichever engine opened.
func (p *parts) closeEngine(logger *slog.Logger) {
	var eng engine.Engine
	if e := p.embedded.Load(); e != nil {
		eng = e
	} else if e := p.cassandra.Load(); e != nil {
		eng = e
	} else {
		return
	}
	if err := eng.Close(); err != nil {
		logger.Warn("Closing the store", "storage", p.cfg.Storage.Type, "err", err)
	}
}

// webStore is the store as the web UI reads it, nil while it starts.
func (p *parts) webStore() webui.Store {
	if s := p.store.get(); s != nil {
		return s
	}
	return nil
}

// status is each running part's own status, for the status page.
func (p *parts) status() webui.Status {
	st := webui.Status{
		Runtime:  p.runtime(),
		Engine:   p.engine(),
		Adapter:  p.adapter.Status(),
		Frontend: p.front.Status(),
	}
	if s := p.store.get(); s != nil {
		st.Store = s.Status()
	}
	if p.rolls.Enabled() {
		st.Rollups = p.rolls.Status()
	}
	return st
}

// engineStatus is the engine's part of the status page: which, where, and
// the status of the one that opened.
type engineStatus struct {
	Engine     string                `json:"engine"`
	Keyspace   string                `json:"keyspace,omitempty"`
	Path       string                `json:"path,omitempty"`
	Cassandra  *cql.Status           `json:"cassandra,omitempty"`
	BlockCache *pebblekv.CacheStatus `json:"block_cache,omitempty"`
	// CommitLogSync is the embedded store's --storage.embedded-commitlog-sync,
	// with its period in seconds when periodic.
	CommitLogSync        string  `json:"commitlog_sync,omitempty"`
	CommitLogSyncPeriodS float64 `json:"commitlog_sync_period_s,omitempty"`
}

func (p *parts) engine() engineStatus {
	st := engineStatus{Engine: p.cfg.Storage.Type}
	switch p.cfg.Storage.Type {
	case "cassandra":
		st.Keyspace = p.cfg.Cassandra.Keyspace
		if e := p.cassandra.Load(); e != nil {
			cs := e.Status()
			st.Cassandra = &cs
		}
	case "embedded":
		st.Path = p.cfg.Storage.Path
		if e := p.embedded.Load(); e != nil {
			bc := e.CacheStatus()
			st.BlockCache = &bc
			mode, period := e.CommitLogSync()
			st.CommitLogSync, st.CommitLogSyncPeriodS = mode, period.Seconds()
		}
	}
	return st
}

// runtimeStatus is the process's part of the status page.
type runtimeStatus struct {
	StartTime time.Time `json:"start_time"`
	// ResidentBytes is the process's resident memory, 0 where
	// /proc/self/statm is not.
	ResidentBytes  int64   `json:"resident_bytes"`
	HeapInuseBytes uint64  `json:"heap_inuse_bytes"`
	InFlight       float64 `json:"in_flight_requests"`
}

func (p *parts) runtime() runtimeStatus {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return runtimeStatus{StartTime: p.started, ResidentBytes: residentBytes(), HeapInuseBytes: ms.HeapInuse, InFlight: p.routes.InFlight()}
}

// residentBytes reads the resident set from /proc/self/statm (its second
// field, in pages), as the process collector does on Linux.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
