package e2e

import (
	"math"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"
)

// requireStored reads every series whose name starts with prefix, in both
// response types, and requires exactly want.
func requireStored(t *testing.T, a *adapter, prefix string, want []series, when string) {
	t.Helper()
	q := readQuery{Start: math.MinInt64/1000 + 62135596801, End: math.MaxInt64/1000 - 62135596801, Matchers: []*labels.Matcher{
		mustMatcher(labels.MatchRegexp, "__name__", prefix+".*")}}
	for _, rt := range []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS} {
		require.Equal(t, expectRead(want, q), remoteRead(t, a, rt, q)[0], "%s (%v)", when, rt)
	}
}

// TestRestartKeepsData runs in both commit-log modes: periodic answers
// before any fsync (its period here outlasts the test), and what it
// answered must survive kill -9 all the same.
func TestRestartKeepsData(t *testing.T) {
	t.Run("batch", func(t *testing.T) { restartKeepsData(t, embeddedStorage(t.TempDir())) })
	t.Run("periodic", func(t *testing.T) {
		restartKeepsData(t, append(embeddedStorage(t.TempDir()),
			"--storage.embedded-commitlog-sync=periodic", "--storage.embedded-commitlog-sync-period=10m"))
	})
}

func restartKeepsData(t *testing.T, storage storageArgs) {
	a := startAdapter(t, "", storage)

	first := testSeries("e2e_restart_a")
	mustWrite(t, a, false, first[:3])
	mustWrite(t, a, true, first[3:])
	requireStored(t, a, "e2e_restart_", first, "before the restart")

	require.Equal(t, 0, a.stop(t, syscall.SIGTERM), "exit code after SIGTERM")
	a = startAdapter(t, "", storage)
	requireStored(t, a, "e2e_restart_", first, "after SIGTERM and a restart")

	// One request per series, so that the kill follows many synced
	// commits; what was answered 204 must survive kill -9.
	second := testSeries("e2e_restart_b")
	for i, s := range second {
		mustWrite(t, a, i%2 == 1, []series{s})
	}
	require.Equal(t, -1, a.stop(t, syscall.SIGKILL), "exit code after SIGKILL")
	a = startAdapter(t, "", storage)
	all := slices.Concat(first, second)
	requireStored(t, a, "e2e_restart_", all, "after SIGKILL and a restart")

	// Pebble allows one process per directory: a second adapter must say
	// so and exit 1, and leave the first one working.
	second2 := startProcess(t, "second adapter", adapterBin, append([]string{"--web.listen-address=" + freeAddr(t)}, storage...)...)
	require.Equal(t, 1, second2.wait(t, time.Minute), "exit code of a second adapter on the same --storage.path; output:\n%s", second2.out.String())
	require.Contains(t, strings.ToLower(second2.out.String()), "lock", "the message names the lock")
	requireStored(t, a, "e2e_restart_", all, "after a second adapter tried the same directory")
}
