package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"golang.org/x/term"

	"github.com/kairos-remote/kairos-adapter/config"
	"github.com/kairos-remote/kairos-adapter/copier"
	"github.com/kairos-remote/kairos-adapter/importer"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// copyCommand is `kairos-adapter copy`: every table of one store into
// another, embedded or Cassandra either way (package copier). The
// --cassandra.* flags other than hosts and keyspace (authentication, TLS,
// consistency, timeouts) apply to whichever side is Cassandra.
type copyCommand struct {
	side          map[string]*copySide
	rate, batch   *string
	retries       *int
	verify        *bool
	markEveryText *string
}

type copySide struct {
	storage, path, keyspace *string
	hosts                   *string
}

func addCopyCommand(app *kingpin.Application) *copyCommand {
	cmd := app.Command("copy", "Copy a store into another, embedded or Cassandra either way, row by row in every table with write times and TTLs; resumable and idempotent (README: Copy between engines).")
	c := &copyCommand{side: map[string]*copySide{}}
	for _, name := range []string{"from", "to"} {
		what := map[string]string{"from": "source", "to": "destination"}[name]
		s := &copySide{}
		s.storage = cmd.Flag(name+".storage", "The "+what+"'s engine: embedded or cassandra.").Required().Enum("embedded", "cassandra")
		s.path = cmd.Flag(name+".storage.path", "The "+what+"'s embedded store directory.").Default("").String()
		s.hosts = cmd.Flag(name+".cassandra.hosts", "The "+what+"'s Cassandra hosts, comma-separated host[:port].").Default("").String()
		s.keyspace = cmd.Flag(name+".cassandra.keyspace", "The "+what+"'s keyspace.").Default("kairosdb").String()
		c.side[name] = s
	}
	c.rate = cmd.Flag("rate", "Most rows per second written to the destination, so that the stores keep serving; 0 means no limit.").Default("0").String()
	c.batch = cmd.Flag("batch", "Rows per destination write.").Default("5000").String()
	c.retries = cmd.Flag("retries", "Times a table's copy starts again from its last recorded position after an error that may pass, after 1 s, 2 s, 4 s ... 30 s; then the copy stops, to be run again.").Default("5").Int()
	c.verify = cmd.Flag("verify", "After the copy, read both stores whole and compare every table's rows (engine-independent digests).").Bool()
	c.markEveryText = cmd.Flag("mark-interval", "How often the position of the table being copied is recorded in the destination.").Default("1s").String()
	return c
}

// run exits 0 with everything copied (and verified, with --verify), 1 when
// the copy failed (what was recorded as done stays done), 2 for bad
// arguments.
func (c *copyCommand) run(ctx context.Context, cfg *config.Config, stderr io.Writer, logger *slog.Logger) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "kairos-adapter copy: "+format+"\n", args...)
		return code
	}
	o := copier.Options{Retries: *c.retries}
	var err error
	if o.Rate, err = parseFloat(*c.rate); err != nil || o.Rate < 0 || math.IsInf(o.Rate, 0) {
		return fail(2, "invalid --rate %q: want rows per second, 0 for no limit", *c.rate)
	}
	b, err := parseFloat(*c.batch)
	if err != nil || b < 1 || b > 100000 || b != math.Trunc(b) {
		return fail(2, "invalid --batch %q: want a whole number of rows from 1 to 100000", *c.batch)
	}
	o.Batch = int(b)
	if o.Retries < 0 {
		return fail(2, "invalid --retries %d: must not be negative", o.Retries)
	}
	if o.MarkEvery, err = time.ParseDuration(*c.markEveryText); err != nil || o.MarkEvery <= 0 {
		return fail(2, "invalid --mark-interval %q: want a positive duration such as 1s", *c.markEveryText)
	}
	from, to := c.side["from"], c.side["to"]
	srcName, err := from.check("from")
	if err != nil {
		return fail(2, "%v", err)
	}
	dstName, err := to.check("to")
	if err != nil {
		return fail(2, "%v", err)
	}
	if srcName == dstName {
		return fail(2, "the source and the destination are the same store, %s", srcName)
	}
	o.Source = srcName

	src, err := from.open(ctx, cfg, "from", srcName, logger)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer closeEngine(src, logger)
	dst, err := to.open(ctx, cfg, "to", dstName, logger)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer closeEngine(dst, logger)

	var tty io.Writer
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		tty = f
	}
	p := importer.NewNamedProgress(tty, logger, "tables", importer.Names{Title: "Copy progress", Series: "rows", Samples: "cells"}, 10*time.Second)
	o.Progress = p
	began := time.Now()
	logger.Info("Copying", "from", srcName, "to", dstName)
	sum, err := copier.Copy(ctx, src, dst, o, logger)
	p.Stop()
	attrs := []any{"from", srcName, "to", dstName, "tables", sum.Tables, "skipped_done_before", sum.Skipped, "rows", sum.Rows, "cells", sum.Cells, "seconds", time.Since(began).Seconds()}
	if err != nil {
		logger.Error("Copy failed; run it again to resume from the last position recorded", append(attrs, "err", err)...)
		return 1
	}
	logger.Info("Copy done", attrs...)
	if *c.verify {
		return verifyCopy(ctx, src, dst, logger)
	}
	return 0
}

// verifyCopy compares the digests of every table of both stores.
func verifyCopy(ctx context.Context, src, dst copier.Store, logger *slog.Logger) int {
	differ := 0
	for _, table := range engine.Tables {
		sd, err := copier.TableDigest(ctx, src, table)
		if err != nil {
			logger.Error("Cannot read the source to verify", "table", table, "err", err)
			return 1
		}
		dd, err := copier.TableDigest(ctx, dst, table)
		if err != nil {
			logger.Error("Cannot read the destination to verify", "table", table, "err", err)
			return 1
		}
		if sd != dd {
			differ++
			logger.Error("Table differs", "table", table, "source", sd.String(), "destination", dd.String())
			continue
		}
		logger.Info("Table verified", "table", table, "digest", sd.String())
	}
	if differ > 0 {
		logger.Error("Verification failed: the stores differ; was one written to during the copy?", "tables", differ)
		return 1
	}
	return 0
}

// check validates one side's flags and names it.
func (s *copySide) check(name string) (string, error) {
	switch *s.storage {
	case "embedded":
		if *s.path == "" {
			return "", fmt.Errorf("--%s.storage=embedded needs --%s.storage.path", name, name)
		}
		abs, err := filepath.Abs(*s.path)
		if err != nil {
			return "", fmt.Errorf("--%s.storage.path %s: %w", name, *s.path, err)
		}
		return "embedded:" + abs, nil
	default:
		hosts := splitHosts(*s.hosts)
		if len(hosts) == 0 {
			return "", fmt.Errorf("--%s.storage=cassandra needs --%s.cassandra.hosts", name, name)
		}
		for _, h := range hosts {
			if strings.ContainsAny(h, " /") {
				return "", fmt.Errorf("--%s.cassandra.hosts: %q is not host[:port]", name, h)
			}
		}
		if !config.ValidKeyspace(*s.keyspace) {
			return "", fmt.Errorf("--%s.cassandra.keyspace %q must be 1-48 letters, digits or underscores", name, *s.keyspace)
		}
		return "cassandra:" + strings.Join(hosts, ",") + "/" + *s.keyspace, nil
	}
}

func splitHosts(s string) []string {
	var out []string
	for h := range strings.SplitSeq(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// open opens one side. The source must be a store already: it is only read
// (no Setup, which would create an empty store at a mistyped path or
// keyspace); the destination is created if missing.
func (s *copySide) open(ctx context.Context, cfg *config.Config, name, display string, logger *slog.Logger) (copier.Store, error) {
	source := name == "from"
	what := map[bool]string{true: "source", false: "destination"}[source]
	c := *cfg
	c.Storage.Type, c.Storage.Path = *s.storage, *s.path
	c.Cassandra.Hosts, c.Cassandra.Keyspace = splitHosts(*s.hosts), *s.keyspace
	if source && c.Storage.Type == "embedded" {
		ok, err := pebblekv.IsStore(c.Storage.Path)
		if err != nil {
			return nil, fmt.Errorf("cannot read the source --from.storage.path %s: %w", c.Storage.Path, err)
		}
		if !ok {
			return nil, fmt.Errorf("the source --from.storage.path %s holds no embedded store", c.Storage.Path)
		}
	}
	eng, err := openEngine(ctx, &c, logger)
	if err != nil {
		return nil, fmt.Errorf("cannot open the %s %s: %w", what, display, err)
	}
	st, ok := eng.(copier.Store)
	if !ok {
		closeEngine(eng, logger)
		return nil, fmt.Errorf("the %s engine %T cannot be copied", what, eng)
	}
	if source {
		// A Cassandra keyspace that is not there, or holds no KairosDB
		// tables, fails here with what is missing.
		err := st.ScanRaw(ctx, engine.Spec, nil, func(*engine.Row, []byte) error { return nil })
		if errors.Is(err, cql.ErrNoKeyspace) {
			err = fmt.Errorf("keyspace %q does not exist", c.Cassandra.Keyspace)
		}
		if err != nil {
			closeEngine(eng, logger)
			return nil, fmt.Errorf("the source %s is not a store of this layout: %w", display, err)
		}
		return st, nil
	}
	if err := eng.Setup(ctx); err != nil {
		closeEngine(eng, logger)
		return nil, fmt.Errorf("cannot create the tables of the destination %s: %w", display, err)
	}
	return st, nil
}

// openEngine opens the engine cfg.Storage names, as the server, the import
// and the copy open it; it does not run Setup.
func openEngine(ctx context.Context, cfg *config.Config, logger *slog.Logger) (engine.Engine, error) {
	switch cfg.Storage.Type {
	case "embedded":
		e, err := pebblekv.Open(cfg.Storage.Path, embeddedOptions(cfg), logger)
		if err != nil {
			if strings.Contains(err.Error(), "is locked") {
				return nil, fmt.Errorf("the embedded store %s is open in another process, an adapter serving it: Pebble lets one process at a time open it, so stop that adapter first: %w", cfg.Storage.Path, err)
			}
			return nil, fmt.Errorf("open the embedded store %s: %w", cfg.Storage.Path, err)
		}
		return e, nil
	case "cassandra":
		cqlCfg, err := cassandraConfig(cfg)
		if err != nil {
			return nil, err
		}
		e, err := cql.Open(ctx, cqlCfg, logger)
		if err != nil {
			return nil, fmt.Errorf("connect to Cassandra at %s: %w", strings.Join(cqlCfg.Hosts, ","), err)
		}
		return e, nil
	}
	return nil, fmt.Errorf("unknown storage %q", cfg.Storage.Type)
}

// embeddedOptions are the embedded engine's options from the flags.
func embeddedOptions(cfg *config.Config) pebblekv.Options {
	opts := pebblekv.DefaultOptions()
	opts.CacheSize = int64(cfg.Storage.EmbeddedCacheBytes)
	if cfg.Storage.EmbeddedCommitlogSync == "periodic" {
		opts.SyncPeriod = time.Duration(cfg.Storage.EmbeddedCommitlogSyncPeriod)
	}
	return opts
}

func closeEngine(e engine.Engine, logger *slog.Logger) {
	if err := e.Close(); err != nil && !errors.Is(err, pebblekv.ErrClosed) {
		logger.Warn("Closing the store", "err", err)
	}
}
