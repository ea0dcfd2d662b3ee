package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// TestCopyCommandBadInput: the copy refuses bad flags with status 2 and a
// message naming the flag, and a source that is missing, not a store or
// unreachable with status 1 naming it, before anything is written.
func TestCopyCommandBadInput(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	eng, err := pebblekv.Open(store, pebblekv.DefaultOptions(), nil)
	require.NoError(t, err)
	require.NoError(t, eng.Setup(t.Context()))
	require.NoError(t, eng.Close())
	notStore := filepath.Join(dir, "plain")
	require.NoError(t, os.MkdirAll(notStore, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(notStore, "file"), []byte("x"), 0o644))
	dst := filepath.Join(dir, "dst")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"copy", "--to.storage=embedded", "--to.storage.path=" + dst}, 2, "required flag(s) '--from.storage' not provided"},
		{[]string{"copy", "--from.storage=pebble", "--to.storage=embedded", "--to.storage.path=" + dst}, 2, "enum value must be one of embedded,cassandra"},
		{[]string{"copy", "--from.storage=embedded", "--to.storage=embedded", "--to.storage.path=" + dst}, 2, "--from.storage=embedded needs --from.storage.path"},
		{[]string{"copy", "--from.storage=embedded", "--from.storage.path=" + store, "--to.storage=cassandra"}, 2, "--to.storage=cassandra needs --to.cassandra.hosts"},
		{[]string{"copy", "--from.storage=embedded", "--from.storage.path=" + store, "--to.storage=cassandra", "--to.cassandra.hosts=h", "--to.cassandra.keyspace=a-b"}, 2, `--to.cassandra.keyspace "a-b"`},
		{[]string{"copy", "--from.storage=embedded", "--from.storage.path=" + store, "--to.storage=embedded", "--to.storage.path=" + store + "/"}, 2, "the source and the destination are the same store"},
		{[]string{"copy", "--from.storage=embedded", "--from.storage.path=" + store, "--to.storage=embedded", "--to.storage.path=" + dst, "--rate=NaN"}, 2, "invalid --rate"},
		{[]string{"copy", "--from.storage=embedded", "--from.storage.path=" + store, "--to.storage=embedded", "--to.storage.path=" + dst, "--batch=1e300"}, 2, "invalid --batch"},
		{[]string{"copy", "--from.storage=embedded", "--from.storage.path=" + store, "--to.storage=embedded", "--to.storage.path=" + dst, "--mark-interval=-1s"}, 2, "invalid --mark-interval"},
		{[]string{"copy", "--from.storage=embedded", "--from.storage.path=/nonexistent/data", "--to.storage=embedded", "--to.storage.path=" + dst}, 1, "the source --from.storage.path /nonexistent/data holds no embedded store"},
		{[]string{"copy", "--from.storage=embedded", "--from.storage.path=" + notStore, "--to.storage=embedded", "--to.storage.path=" + dst}, 1, "holds no embedded store"},
		{[]string{"copy", "--from.storage=cassandra", "--from.cassandra.hosts=127.0.0.1:1", "--cassandra.connect-timeout=1s", "--to.storage=embedded", "--to.storage.path=" + dst}, 1, "connect to Cassandra at 127.0.0.1:1"},
	} {
		var out bytes.Buffer
		code := run(context.Background(), c.args, &out)
		require.Equal(t, c.code, code, "%v:\n%s", c.args, out.String())
		require.Contains(t, out.String(), c.want, "%v", c.args)
	}
	_, err = os.Stat(dst)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was created at the destination")
}

// TestCopyCommand copies an embedded store into another and verifies it;
// a second run finds every table done.
func TestCopyCommand(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	eng, err := pebblekv.Open(src, pebblekv.DefaultOptions(), nil)
	require.NoError(t, err)
	require.NoError(t, eng.Setup(t.Context()))
	wt := time.Now().UnixMilli()
	require.NoError(t, eng.Write(t.Context(), &engine.Batch{WriteTime: wt, Cells: []engine.Cell{{Key: []byte("k"), Column: 1, Value: []byte("v"), TTL: 60}}, MetricNames: []string{"m"}}))
	require.NoError(t, eng.Close())
	args := []string{"copy", "--from.storage=embedded", "--from.storage.path=" + src, "--to.storage=embedded", "--to.storage.path=" + filepath.Join(dir, "dst"), "--verify"}
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), args, &out), out.String())
	require.Contains(t, out.String(), "Table verified")
	require.Contains(t, out.String(), "cells=1")
	out.Reset()
	require.Equal(t, 0, run(context.Background(), args, &out), out.String())
	require.Contains(t, out.String(), "skipped_done_before=8")
}

// TestCopyCommandNoCassandraStore: a source keyspace that does not exist,
// or holds no KairosDB tables, is refused naming what is missing, and no
// keyspace is created for it.
func TestCopyCommandNoCassandraStore(t *testing.T) {
	addr, ks := cassandratest.Keyspace(t) // exists, without tables
	dst := filepath.Join(t.TempDir(), "dst")
	for _, c := range []struct{ keyspace, want string }{
		{"nokeyspace_" + strings.ToLower(strconv.FormatInt(time.Now().UnixNano(), 36)), "is not a store of this layout: keyspace"},
		{ks, "is not a store of this layout: cassandra: read spec"},
	} {
		var out bytes.Buffer
		code := run(context.Background(), []string{"copy", "--from.storage=cassandra", "--from.cassandra.hosts=" + addr, "--from.cassandra.keyspace=" + c.keyspace,
			"--cassandra.read-consistency=ONE", "--to.storage=embedded", "--to.storage.path=" + dst}, &out)
		require.Equal(t, 1, code, out.String())
		require.Contains(t, out.String(), c.want)
		require.Contains(t, out.String(), "the source cassandra:"+addr+"/"+c.keyspace)
	}
	_, err := os.Stat(dst)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was created at the destination")
}
