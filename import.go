package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"golang.org/x/term"

	"github.com/kairos-remote/kairos-adapter/config"
	"github.com/kairos-remote/kairos-adapter/importer"
	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// importCommands are the import subcommands; the storage flags are the
// server's, so an import writes where the adapter reads.
type importCommands struct {
	tsdbDir, sandbox        *string
	url, slice, timeout     *string
	start, end, rate, batch map[string]*string
	retries                 map[string]*int
	match                   map[string]*[]string
}

func addImportCommands(app *kingpin.Application) *importCommands {
	c := &importCommands{start: map[string]*string{}, end: map[string]*string{}, rate: map[string]*string{}, batch: map[string]*string{}, retries: map[string]*int{}, match: map[string]*[]string{}}
	imp := app.Command("import", "Import history into the store: from a Prometheus TSDB or over remote read. The storage flags say where to; the import is resumable and idempotent (README: Importing history).")
	tsdb := imp.Command("tsdb", "Import a Prometheus TSDB: a data directory (--storage.tsdb.path) or a snapshot (/api/v1/admin/tsdb/snapshot), read-only; every block, then the head from the WAL.")
	c.tsdbDir = tsdb.Arg("dir", "The TSDB directory.").Required().String()
	c.sandbox = tsdb.Flag("sandbox-dir-root", "Where the WAL is replayed (as promtool's flag); empty means the TSDB directory. It must be on the TSDB's file system.").Default("").String()
	rr := imp.Command("remote-read", "Import over remote read from any endpoint that serves it (Prometheus, Thanos, another adapter), slice by slice.")
	c.url = rr.Flag("url", "The remote-read endpoint, e.g. http://prometheus:9090/api/v1/read.").Required().String()
	c.slice = rr.Flag("slice", "Time range of one request and one progress mark.").Default("1h").String()
	c.timeout = rr.Flag("timeout", "Timeout of one request, its answer included.").Default("5m").String()
	for _, cmd := range []*kingpin.CmdClause{tsdb, rr} {
		name := cmd.FullCommand()
		if cmd == rr {
			c.start[name] = cmd.Flag("start", "Import samples from this time on (RFC 3339 or Unix seconds).").Required().String()
		} else {
			c.start[name] = cmd.Flag("start", "Import samples from this time on (RFC 3339 or Unix seconds).").Default(timeparam.MinText).String()
		}
		if cmd == rr {
			c.end[name] = cmd.Flag("end", "Import samples up to this time, included; empty means now.").Default("").String()
		} else {
			c.end[name] = cmd.Flag("end", "Import samples up to this time, included.").Default(timeparam.MaxText).String()
		}
		c.match[name] = cmd.Flag("match", "Series selector, e.g. {job=\"node\"}; repeat for more; none means every series.").Strings()
		c.rate[name] = cmd.Flag("rate", "Most samples per second written, so a live adapter on the same store keeps serving; 0 means no limit.").Default("0").String()
		c.batch[name] = cmd.Flag("batch", "Samples per store write.").Default("10000").String()
		c.retries[name] = cmd.Flag("retries", "Times a block or slice whose store writes or remote reads failed for a reason that may pass (a timeout, a 5xx, a cut connection) is tried again, after 1 s, 2 s, 4 s ... up to 30 s; then the import stops, to be run again.").Default("5").Int()
	}
	return c
}

// runImport runs the import subcommand cmd; the exit status is 0 when all
// was imported, 1 when the import failed (what was recorded as done stays
// done), 2 for bad arguments.
func (c *importCommands) run(ctx context.Context, cmd string, cfg *config.Config, stderr io.Writer, logger *slog.Logger) int {
	o, err := c.options(cmd)
	if err != nil {
		fmt.Fprintf(stderr, "kairos-adapter %s: %v\n", cmd, err)
		return 2
	}
	var slice, timeout time.Duration
	if cmd == "import remote-read" {
		if slice, err = timeparam.ParseDuration(*c.slice); err != nil || slice <= 0 {
			fmt.Fprintf(stderr, "kairos-adapter %s: invalid --slice %q: want a positive duration such as 1h\n", cmd, *c.slice)
			return 2
		}
		if timeout, err = timeparam.ParseDuration(*c.timeout); err != nil || timeout <= 0 {
			fmt.Fprintf(stderr, "kairos-adapter %s: invalid --timeout %q: want a positive duration such as 5m\n", cmd, *c.timeout)
			return 2
		}
	}
	if cmd == "import tsdb" {
		// Before the store opens, which creates an embedded one.
		if err := importer.CheckTSDB(*c.tsdbDir); err != nil {
			logger.Error("Cannot import", "err", err)
			return 1
		}
	}
	st, closeStore, err := openImportStore(ctx, cfg, logger)
	if err != nil {
		logger.Error("Cannot open the destination store", "storage", cfg.Storage.Type, "err", err)
		return 1
	}
	defer closeStore()

	unit := "blocks"
	if cmd == "import remote-read" {
		unit = "slices"
	}
	var tty io.Writer
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		tty = f
	}
	o.Progress = importer.NewProgress(tty, logger, unit, 10*time.Second)
	began := time.Now()
	var sum importer.Summary
	switch cmd {
	case "import tsdb":
		sum, err = importer.ImportTSDB(ctx, st, importer.TSDB{Dir: *c.tsdbDir, SandboxDir: *c.sandbox}, o, logger)
	case "import remote-read":
		sum, err = importer.ImportRemoteRead(ctx, st, importer.RemoteRead{URL: *c.url, Slice: slice, Timeout: timeout}, o, logger)
	}
	o.Progress.Stop()
	attrs := []any{"units", sum.Units, "skipped_done_before", sum.Skipped, "series", sum.Series, "samples", sum.Samples,
		"refused", sum.Refused, "seconds", time.Since(began).Seconds()}
	if err != nil {
		logger.Error("Import failed; run it again to resume from the last unit recorded as done", append(attrs, "err", err)...)
		return 1
	}
	logger.Info("Import done", attrs...)
	if len(cfg.Rollup.Resolutions) == 0 && sum.Samples > 0 {
		// With rollups off here no mark was stored: adapters that roll
		// the store up need one for what they rolled up already.
		q := url.Values{"start": {time.UnixMilli(sum.MinT).UTC().Format(time.RFC3339Nano)}, "end": {time.UnixMilli(sum.MaxT).UTC().Format(time.RFC3339Nano)}}
		for _, m := range *c.match[cmd] {
			q.Add("match[]", m)
		}
		logger.Info("The import ran with --rollup.resolutions= and stored no rollup recomputation marks; if adapters serving this store run rollups, mark the imported range there (with --web.enable-admin-api), or import with their --rollup.* flags",
			"request", "POST /api/v1/admin/rollups/recompute?"+q.Encode())
	}
	return 0
}

// options reads the flags both subcommands share, strictly.
func (c *importCommands) options(cmd string) (importer.Options, error) {
	var o importer.Options
	start, err := timeparam.Parse(*c.start[cmd])
	if err != nil {
		return o, fmt.Errorf("invalid --start: %w", err)
	}
	end := time.Now()
	if s := *c.end[cmd]; s != "" {
		if end, err = timeparam.Parse(s); err != nil {
			return o, fmt.Errorf("invalid --end: %w", err)
		}
	}
	o.Start, o.End = timeparam.CeilMilli(start), timeparam.FloorMilli(end)
	if o.End < o.Start {
		return o, fmt.Errorf("--end %s is before --start %s", end.Format(time.RFC3339Nano), start.Format(time.RFC3339Nano))
	}
	for _, m := range *c.match[cmd] {
		ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector(m)
		if err != nil {
			return o, fmt.Errorf("invalid --match %q: %w", m, err)
		}
		if matchesEmpty(ms) {
			return o, fmt.Errorf("invalid --match %q: it must contain at least one matcher that does not match the empty string, as Prometheus's selectors", m)
		}
		o.Selectors = append(o.Selectors, ms)
	}
	if o.Rate, err = parseFloat(*c.rate[cmd]); err != nil || o.Rate < 0 || math.IsInf(o.Rate, 0) {
		return o, fmt.Errorf("invalid --rate %q: want samples per second, 0 for no limit", *c.rate[cmd])
	}
	b, err := parseFloat(*c.batch[cmd])
	if err != nil || b < 1 || b > 1e6 || b != math.Trunc(b) {
		return o, fmt.Errorf("invalid --batch %q: want a whole number of samples from 1 to 1000000", *c.batch[cmd])
	}
	o.Batch = int(b)
	if o.Retries = *c.retries[cmd]; o.Retries < 0 {
		return o, fmt.Errorf("invalid --retries %d: must not be negative", o.Retries)
	}
	return o, nil
}

func parseFloat(s string) (float64, error) {
	var f float64
	_, err := fmt.Sscan(strings.TrimSpace(s), &f)
	if err == nil && math.IsNaN(f) {
		err = fmt.Errorf("NaN")
	}
	return f, err
}

func matchesEmpty(ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches("") {
			return false
		}
	}
	return true
}

// openImportStore opens the destination as the server would, without the
// rollup job and the HTTP side.
func openImportStore(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*kairosstore.Store, func(), error) {
	eng, err := openEngine(ctx, cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	closeEng := func() {
		if err := eng.Close(); err != nil {
			logger.Warn("Closing the store", "err", err)
		}
	}
	if err := eng.Setup(ctx); err != nil {
		closeEng()
		return nil, nil, fmt.Errorf("create tables: %w", err)
	}
	st, err := importStore(ctx, eng, cfg, logger)
	if err != nil {
		closeEng()
		return nil, nil, err
	}
	return st, closeEng, nil
}

// importStore is the store the import writes through. With rollups on
// (the import's --rollup.* flags, which must be those of the adapters
// serving the store, as for any adapter sharing a keyspace), its Guard is
// a rollup job that stores the recomputation marks of every write into a
// unit that may be rolled up already, as a serving adapter's writes do;
// the job does not run: a serving adapter's job recomputes the marked
// units, and learns from the marks of metrics it has not listed yet
// (package rollupjob, older).
func importStore(ctx context.Context, eng engine.Engine, cfg *config.Config, logger *slog.Logger) (*kairosstore.Store, error) {
	rolls, err := newRollups(cfg, logger, prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	opts := storeOptions(cfg)
	opts.Guard = rolls
	st, err := kairosstore.Open(ctx, eng, opts, logger, prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	if err := rolls.MarkOnly(st); err != nil {
		return nil, err
	}
	return st, nil
}
