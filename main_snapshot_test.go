package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// TestSnapshotCommandBadInput: the snapshot subcommand refuses what it
// cannot snapshot, naming the flag at fault, and creates nothing: no empty
// store at a mistyped --storage.path, no half snapshot.
func TestSnapshotCommandBadInput(t *testing.T) {
	store := t.TempDir()
	eng, err := pebblekv.Open(store, pebblekv.DefaultOptions(), nil)
	require.NoError(t, err)
	require.NoError(t, eng.Setup(t.Context()))
	missing := filepath.Join(t.TempDir(), "typo")
	existing := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"snapshot", "--storage.path=" + store}, 2, "required flag(s) '--output' not provided"},
		{[]string{"snapshot", "--storage.path=" + missing, "--output=" + filepath.Join(t.TempDir(), "o")}, 2, "holds no embedded store"},
		{[]string{"snapshot", "--storage.path=" + store, "--output=" + existing}, 2, "exists: give a directory that does not"},
		{[]string{"snapshot", "--storage=cassandra", "--output=" + filepath.Join(t.TempDir(), "o")}, 2, "nodetool snapshot"},
		{[]string{"snapshot", "--storage.path=" + store, "--output=" + filepath.Join(t.TempDir(), "o")}, 1, "POST /api/v1/admin/tsdb/snapshot"},
	} {
		var out bytes.Buffer
		code := run(context.Background(), c.args, &out)
		require.Equal(t, c.code, code, "%v:\n%s", c.args, out.String())
		require.Contains(t, out.String(), c.want, "%v", c.args)
	}
	_, err = os.Stat(missing)
	require.ErrorIs(t, err, os.ErrNotExist, "no store created at a mistyped path")

	require.NoError(t, eng.Close())
	out := filepath.Join(t.TempDir(), "snap")
	var log bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"snapshot", "--storage.path=" + store, "--output=" + out}, &log), log.String())
	ok, err := pebblekv.IsStore(out)
	require.NoError(t, err)
	require.True(t, ok)
}
