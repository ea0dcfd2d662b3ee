package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/kairos-remote/kairos-adapter/config"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/queryapi"
)

// snapshotsDir is where the admin API puts snapshots, inside the store's
// directory as Prometheus puts them inside its data directory: on the same
// file system, so that Pebble hard-links the tables instead of copying them.
const snapshotsDir = "snapshots"

// snapshotRoute is what serves POST /api/v1/admin/tsdb/snapshot: a
// checkpoint of the embedded store under <storage.path>/snapshots/<name>,
// named as Prometheus names its snapshots (UTC time, then random hex, so
// two calls in the same second get two names). Cassandra's snapshots are
// its own business, per node: the call says so.
func snapshotRoute(cfg *config.Config, embedded func() *pebblekv.Engine) func(context.Context) (string, error) {
	if cfg.Storage.Type != "embedded" {
		return func(context.Context) (string, error) {
			return "", fmt.Errorf("%w: the storage is Cassandra; snapshot its keyspace %q on every node with nodetool snapshot (the adapter keeps nothing of its own to save)", queryapi.ErrCannotSnapshot, cfg.Cassandra.Keyspace)
		}
	}
	return func(ctx context.Context) (string, error) {
		e := embedded()
		if e == nil {
			return "", fmt.Errorf("%w: the store is not open", queryapi.ErrCannotSnapshot)
		}
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := time.Now().UTC().Format("20060102T150405Z0700") + "-" + hex.EncodeToString(b[:])
		parent := filepath.Join(cfg.Storage.Path, snapshotsDir)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return "", err
		}
		if err := e.Checkpoint(ctx, filepath.Join(parent, name)); err != nil {
			return "", err
		}
		return name, nil
	}
}

// snapshotCommand is `kairos-adapter snapshot`: the same checkpoint of a
// stopped embedded store, into a directory of the operator's choosing.
type snapshotCommand struct{ output *string }

func addSnapshotCommand(app *kingpin.Application) *snapshotCommand {
	cmd := app.Command("snapshot", "Snapshot a stopped embedded store (--storage.path) into --output; a serving adapter's store is snapshotted through POST /api/v1/admin/tsdb/snapshot instead (README: Snapshots).")
	return &snapshotCommand{output: cmd.Flag("output", "The snapshot's directory; it must not exist. Restore: use it as --storage.path.").Required().String()}
}

// run exits 0 with the snapshot written, 1 when it could not be, 2 for bad
// arguments.
func (c *snapshotCommand) run(ctx context.Context, cfg *config.Config, stderr io.Writer, logger *slog.Logger) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "kairos-adapter snapshot: "+format+"\n", args...)
		return code
	}
	if cfg.Storage.Type != "embedded" {
		return fail(2, "the storage is %s: snapshot Cassandra's keyspace %q on every node with nodetool snapshot", cfg.Storage.Type, cfg.Cassandra.Keyspace)
	}
	if _, err := os.Lstat(*c.output); err == nil {
		return fail(2, "--output %s exists: give a directory that does not", *c.output)
	}
	// Checked before Open, which would create an empty store at a
	// mistyped path.
	ok, err := pebblekv.IsStore(cfg.Storage.Path)
	if err != nil {
		return fail(1, "cannot read --storage.path %s: %v", cfg.Storage.Path, err)
	}
	if !ok {
		return fail(2, "--storage.path %s holds no embedded store", cfg.Storage.Path)
	}
	e, err := pebblekv.Open(cfg.Storage.Path, pebblekv.DefaultOptions(), logger)
	if err != nil {
		if strings.Contains(err.Error(), "is locked") {
			return fail(1, "the store %s is open in another process, an adapter serving it: snapshot it through that adapter's POST /api/v1/admin/tsdb/snapshot (with --web.enable-admin-api): %v", cfg.Storage.Path, err)
		}
		return fail(1, "cannot open the store %s: %v", cfg.Storage.Path, err)
	}
	err = e.Checkpoint(ctx, *c.output)
	closeEngine(e, logger)
	if err != nil {
		return fail(1, "%v", err)
	}
	logger.Info("Snapshot written", "storage_path", cfg.Storage.Path, "output", *c.output)
	return 0
}
