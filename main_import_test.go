package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// TestImportCommandBadInput: the import subcommands refuse bad flags with
// status 2 and a message naming the flag, fail with status 1 naming the
// path or store at fault, and an import into an embedded store a server
// holds says why it cannot run.
func TestImportCommandBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"import", "tsdb", "/nonexistent/data", "--storage.path=" + dir}, 1, "no Prometheus TSDB at /nonexistent/data: the directory does not exist"},
		{[]string{"import", "tsdb", dir, "--storage.path=" + dir, "--start=NaN"}, 2, "invalid --start"},
		{[]string{"import", "tsdb", dir, "--storage.path=" + dir, "--start=10", "--end=5"}, 2, "--end 1970-01-01T00:00:05Z is before --start"},
		{[]string{"import", "tsdb", dir, "--storage.path=" + dir, "--match=up{"}, 2, `invalid --match "up{"`},
		{[]string{"import", "tsdb", dir, "--storage.path=" + dir, `--match={job=~".*"}`}, 2, "does not match the empty string"},
		{[]string{"import", "tsdb", dir, "--storage.path=" + dir, "--rate=-1"}, 2, "invalid --rate"},
		{[]string{"import", "tsdb", dir, "--storage.path=" + dir, "--batch=0"}, 2, "invalid --batch"},
		{[]string{"import", "remote-read", "--url=http://127.0.0.1:1/api/v1/read", "--storage.path=" + dir}, 2, "required flag(s) '--start' not provided"},
		{[]string{"import", "remote-read", "--url=http://127.0.0.1:1/api/v1/read", "--start=0", "--slice=1ms", "--storage.path=" + dir}, 1, "more than 1000000"},
		{[]string{"import", "remote-read", "--url=http://127.0.0.1:1/api/v1/read", "--start=0", "--slice=300y", "--storage.path=" + dir}, 2, "invalid --slice"},
		{[]string{"import", "remote-read", "--url=http://127.0.0.1:1/api/v1/read", "--start=0", "--end=1", "--retries=0", "--storage.path=" + dir}, 1, "cannot reach the remote-read endpoint"},
		{[]string{"import", "remote-read", "--url=http://127.0.0.1:1/api/v1/read", "--start=0", "--retries=-1", "--storage.path=" + dir}, 2, "invalid --retries -1"},
	} {
		var out bytes.Buffer
		code := run(context.Background(), c.args, &out)
		require.Equal(t, c.code, code, "%v:\n%s", c.args, out.String())
		require.Contains(t, out.String(), c.want, "%v", c.args)
	}

	locked := t.TempDir()
	eng, err := pebblekv.Open(locked, pebblekv.DefaultOptions(), nil)
	require.NoError(t, err)
	defer eng.Close()
	var out bytes.Buffer
	require.Equal(t, 1, run(context.Background(), []string{"import", "remote-read", "--url=http://127.0.0.1:1/api/v1/read", "--start=0", "--end=1", "--retries=0", "--storage.path=" + locked}, &out))
	require.Contains(t, out.String(), "is open in another process")
}
