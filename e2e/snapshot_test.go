package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// snapshotSeries are n series of e2e_snap_<name>, each with samples every
// 15 s from t0, values including NaN, ±Inf and 1e300.
func snapshotSeries(name string, t0 int64, n int) []series {
	vals := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, -0.5, 42}
	out := make([]series, n)
	for i := range out {
		out[i].Labels = labels.FromStrings("__name__", "e2e_snap_"+name, "i", fmt.Sprint(i))
		for j := range 20 {
			out[i].Samples = append(out[i].Samples, sample{T: t0 + int64(j)*15_000, Bits: math.Float64bits(vals[(i+j)%len(vals)])})
		}
	}
	return out
}

// snapshotCall POSTs (or PUTs) the snapshot admin call and returns the
// status and the decoded answer.
type snapshotAnswer struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		Name string `json:"name"`
	} `json:"data"`
}

func snapshotCall(t *testing.T, a *adapter, method, query string) (int, snapshotAnswer, string) {
	t.Helper()
	req, err := http.NewRequest(method, a.url("/api/v1/admin/tsdb/snapshot")+query, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var res snapshotAnswer
	var raw json.RawMessage
	if resp.StatusCode != http.StatusNotFound {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&raw))
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields() // Prometheus's shape, nothing more
		require.NoError(t, dec.Decode(&res), "%s", raw)
	}
	return resp.StatusCode, res, string(raw)
}

// TestSnapshotRestore takes snapshots of a serving embedded store through
// the admin API, writes on, kills the adapter, and restores one the
// documented way (its directory as --storage.path of a new adapter): the
// restored store answers exactly what was written before the snapshot, in
// remote read and the query API.
func TestSnapshotRestore(t *testing.T) {
	storePath := filepath.Join(t.TempDir(), "store")
	a := startAdapter(t, "", append(embeddedStorage(storePath), "--web.enable-admin-api"))
	now := time.Now().Add(-time.Minute).Truncate(time.Second).UnixMilli()

	before := append(snapshotSeries("a", now-20*time.Minute.Milliseconds(), 3), testSeries("e2e_snap_x")...)
	mustWrite(t, a, false, before[:2])
	mustWrite(t, a, true, before[2:])
	inWindow := url.Values{"query": {`{__name__=~"e2e_snap_.+"}[30m]`}, "time": {fmt.Sprint(now / 1000)}}
	_, wantLines := queryAPI(t, "http://"+a.addr, "/api/v1/query", inWindow)
	require.NotEmpty(t, wantLines)

	// Hostile parameters are refused before anything is written.
	for _, q := range []string{"?skip_head=maybe", "?skip_head=true&skip_head=false", "?skip_head=NaN"} {
		code, res, raw := snapshotCall(t, a, http.MethodPost, q)
		require.Equal(t, http.StatusBadRequest, code, raw)
		require.Equal(t, "bad_data", res.ErrorType, raw)
		require.Contains(t, res.Error, "skip_head", raw)
	}
	_, err := os.Stat(filepath.Join(storePath, "snapshots"))
	require.ErrorIs(t, err, os.ErrNotExist, "a refused call wrote nothing")

	// Concurrent calls each get a snapshot of their own.
	var mu sync.Mutex
	var names []string
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			method, q := http.MethodPost, "?skip_head=true"
			if i%2 == 1 {
				method, q = http.MethodPut, ""
			}
			code, res, raw := snapshotCall(t, a, method, q)
			if !(code == http.StatusOK && res.Status == "success") {
				t.Errorf("snapshot call: %d %s", code, raw)
				return
			}
			mu.Lock()
			names = append(names, res.Data.Name)
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Len(t, names, 4)
	slices.Sort(names)
	require.Len(t, slices.Compact(slices.Clone(names)), 4, "every call names a snapshot of its own: %v", names)
	for _, n := range names {
		require.Regexp(t, regexp.MustCompile(`^\d{8}T\d{6}Z-[0-9a-f]{16}$`), n)
		_, err := os.Stat(filepath.Join(storePath, "snapshots", n))
		require.NoError(t, err)
	}

	// The command line refuses a store a live adapter holds, and says what
	// to do instead.
	cli := startProcess(t, "snapshot command", adapterBin, "snapshot", "--storage.path="+storePath, "--output="+filepath.Join(t.TempDir(), "cli"))
	require.Equal(t, 1, cli.wait(t, time.Minute), cli.out.String())
	require.Contains(t, cli.out.String(), "/api/v1/admin/tsdb/snapshot")

	// Written after the snapshots: more samples of the same series and new
	// series, then kill -9.
	after := append(snapshotSeries("a", now-5*time.Minute.Milliseconds(), 3), snapshotSeries("b", now-20*time.Minute.Milliseconds(), 2)...)
	mustWrite(t, a, false, after)
	_, allLines := queryAPI(t, "http://"+a.addr, "/api/v1/query", inWindow)
	require.Greater(t, len(allLines), len(wantLines), "the later writes are in the live store")
	require.Equal(t, -1, a.stop(t, syscall.SIGKILL))

	// Restore: move the snapshot out and serve it, the admin API off.
	restored := filepath.Join(t.TempDir(), "restored")
	require.NoError(t, os.Rename(filepath.Join(storePath, "snapshots", names[0]), restored))
	r := startAdapter(t, "", embeddedStorage(restored))
	requireStored(t, r, "e2e_snap_", before, "in the restored snapshot")
	_, got := queryAPI(t, "http://"+r.addr, "/api/v1/query", inWindow)
	require.Equal(t, wantLines, got, "the query API on the restored snapshot")

	// The admin API off: 404, as for the other admin calls.
	code, _, _ := snapshotCall(t, r, http.MethodPost, "")
	require.Equal(t, http.StatusNotFound, code)

	// A stopped store snapshots from the command line, and that opens too.
	require.Equal(t, 0, r.stop(t, syscall.SIGTERM))
	out := filepath.Join(t.TempDir(), "cli")
	cli = startProcess(t, "snapshot command", adapterBin, "snapshot", "--storage.path="+restored, "--output="+out)
	require.Equal(t, 0, cli.wait(t, time.Minute), cli.out.String())
	r = startAdapter(t, "", embeddedStorage(out))
	requireStored(t, r, "e2e_snap_", before, "in the command line's snapshot")
}

// TestSnapshotCassandra: on the Cassandra engine the call says how
// Cassandra is snapshotted (422, Prometheus's answer to an admin call its
// mode cannot serve), and so does the command.
func TestSnapshotCassandra(t *testing.T) {
	addr, keyspace := cassandratest.Keyspace(t)
	a := startAdapter(t, "", append(cassandraStorage(addr, keyspace), "--web.enable-admin-api"))
	code, res, raw := snapshotCall(t, a, http.MethodPost, "")
	require.Equal(t, http.StatusUnprocessableEntity, code, raw)
	require.Equal(t, "error", res.Status)
	require.Equal(t, "execution", res.ErrorType)
	require.Contains(t, res.Error, "nodetool snapshot")
	require.Contains(t, res.Error, keyspace)

	cli := startProcess(t, "snapshot command", adapterBin, append([]string{"snapshot", "--output=" + filepath.Join(t.TempDir(), "x")}, cassandraStorage(addr, keyspace)...)...)
	require.Equal(t, 2, cli.wait(t, time.Minute), cli.out.String())
	require.Contains(t, cli.out.String(), "nodetool snapshot")
}
