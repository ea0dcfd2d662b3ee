package e2e

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/copier"
	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/internal/rolluptest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// copyShape is the seeded store: float series of e2e_copy_a, the same of
// the tag-indexed e2e_copy_b, samples every 15 s.
const (
	copySeriesA  = 700
	copySeriesB  = 300
	copySamples  = 10000
	copyStepMs   = 15000
	copyHistos   = 40
	copyHistoPer = 1000
	copyTTLSer   = 50
	copyTTLPer   = 1000
)

// seedCopySource writes at least 10 M samples into an embedded store
// through the store's appender in large batches: floats (NaN, ±Inf, 1e300
// among them), a tag-indexed metric, native histograms, a metric with a
// TTL, rollups of some series and their progress key, and deletes of a
// whole series and of a range of another. It returns the samples written.
func seedCopySource(t *testing.T, dir string, t0 int64) int64 {
	ctx := context.Background()
	eng, err := pebblekv.Open(dir, pebblekv.Options{}, nil) // no fsync per batch: a seed
	require.NoError(t, err)
	require.NoError(t, eng.Setup(ctx))
	st, err := kairosstore.Open(ctx, eng, kairosstore.Options{TagIndexed: map[string][]string{"e2e_copy_b": {"i"}}}, nil, nil)
	require.NoError(t, err)
	vals := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, -0.5, 42}
	var total int64
	app := st.NewAppender()
	flush := func() {
		require.NoError(t, app.Commit(ctx))
		app = st.NewAppender()
	}
	n := 0
	var rolled []rolluptest.Series
	for _, m := range []struct {
		name   string
		series int
	}{{"e2e_copy_a", copySeriesA}, {"e2e_copy_b", copySeriesB}} {
		for i := range m.series {
			ls := labels.FromStrings("__name__", m.name, "i", strconv.Itoa(i), "job", "copy")
			var rs rolluptest.Series
			if m.name == "e2e_copy_a" && i < 20 {
				rs.Labels = ls
			}
			for j := range copySamples {
				ts, v := t0+int64(j)*copyStepMs, float64(i*j)
				if j%97 == 0 {
					v = vals[(i+j)%len(vals)]
				}
				_, err := app.Append(0, ls, ts, v)
				require.NoError(t, err)
				if rs.Labels.Len() > 0 {
					rs.T, rs.V = append(rs.T, ts), append(rs.V, v)
				}
				if n++; n%200000 == 0 {
					flush()
				}
			}
			total += copySamples
			if rs.Labels.Len() > 0 {
				rolled = append(rolled, rs)
			}
		}
	}
	for i := range copyHistos {
		ls := labels.FromStrings("__name__", "e2e_copy_hist", "i", strconv.Itoa(i))
		for j := range copyHistoPer {
			h := &histogram.Histogram{
				Schema: 1, Count: uint64(j + 3), Sum: float64(j), ZeroCount: 1, ZeroThreshold: 0.001,
				PositiveSpans:   []histogram.Span{{Offset: int32(i % 3), Length: 2}},
				PositiveBuckets: []int64{1, int64(j % 5)},
			}
			h.Count = h.ZeroCount + 1 + uint64(1+j%5)
			_, err := app.AppendHistogram(0, ls, t0+int64(j)*copyStepMs, h, nil)
			require.NoError(t, err)
		}
		total += copyHistoPer
	}
	flush()
	require.NoError(t, rolluptest.Write(ctx, st, eng, []rollup.Resolution{rollup.Resolution(5 * time.Minute), rollup.Resolution(time.Hour)},
		t0, t0+copySamples*copyStepMs, rolled))

	// A TTL'd metric, from a store with a TTL on the same engine.
	ttlStore, err := kairosstore.Open(ctx, eng, kairosstore.Options{TTL: 86400}, nil, nil)
	require.NoError(t, err)
	app = ttlStore.NewAppender()
	for i := range copyTTLSer {
		ls := labels.FromStrings("__name__", "e2e_copy_ttl", "i", strconv.Itoa(i))
		for j := range copyTTLPer {
			_, err := app.Append(0, ls, t0+int64(j)*copyStepMs, float64(j))
			require.NoError(t, err)
		}
		total += copyTTLPer
	}
	flush()

	// Deletes done before the copy.
	_, err = st.Delete(ctx, math.MinInt64/2, math.MaxInt64/2, labels.MustNewMatcher(labels.MatchEqual, "__name__", "e2e_copy_a"), labels.MustNewMatcher(labels.MatchEqual, "i", "0"))
	require.NoError(t, err)
	_, err = st.Delete(ctx, t0+1000*copyStepMs, t0+3000*copyStepMs, labels.MustNewMatcher(labels.MatchEqual, "__name__", "e2e_copy_a"), labels.MustNewMatcher(labels.MatchEqual, "i", "1"))
	require.NoError(t, err)
	// A row_key_index cell, as KairosDB before 1.2 wrote them.
	require.NoError(t, eng.Write(ctx, &engine.Batch{WriteTime: time.Now().UnixMilli(),
		LegacyRowKeys: []engine.LegacyRowKey{{Metric: "e2e_copy_legacy", RowKey: []byte("e2e_copy_legacy\x00\x00\x00\x01\x5e\x6d\x1c\x00\x00kairos_double\x00h=1:")}}}))
	require.NoError(t, eng.Close())
	return total
}

func openEmbeddedRaw(t *testing.T, dir string) copier.Store {
	eng, err := pebblekv.Open(dir, pebblekv.DefaultOptions(), nil)
	require.NoError(t, err)
	return eng
}

// storeDigests lists every table of a store, engine-independently.
func storeDigests(t *testing.T, e copier.Store) map[engine.Table]copier.Digest {
	out := map[engine.Table]copier.Digest{}
	for _, table := range engine.Tables {
		d, err := copier.TableDigest(context.Background(), e, table)
		require.NoError(t, err, "%s", table)
		out[table] = d
	}
	return out
}

var copyDoneLine = regexp.MustCompile(`msg="Copy done".* rows=(\d+) cells=(\d+) seconds=([0-9.e+]+)`)

// copyFigures reads the rows, cells and seconds of a finished copy's log.
func copyFigures(t *testing.T, out string) (rows, cells int64, seconds float64) {
	m := copyDoneLine.FindStringSubmatch(out)
	require.NotNil(t, m, "no summary line in:\n%s", out)
	rows, _ = strconv.ParseInt(m[1], 10, 64)
	cells, _ = strconv.ParseInt(m[2], 10, 64)
	seconds, _ = strconv.ParseFloat(m[3], 64)
	return rows, cells, seconds
}

// TestCopyEmbeddedToCassandra copies an embedded store of over 10 M samples
// (floats, a tag-indexed metric, histograms, rollups, a TTL, deletes done
// before) into Cassandra with the real binary, kills the copy with SIGKILL
// well after it has recorded a position, and reruns it: the rerun continues
// from the position, and every table holds the same rows on both sides
// (the engines' own listings compared, through the copy back). An adapter on the keyspace answers
// queries as one on the embedded store does, so the copy reads as KairosDB's
// layout. A third run changes nothing; the keyspace copied back into a new
// embedded store is the source again.
func TestCopyEmbeddedToCassandra(t *testing.T) {
	addr, ks := cassandratest.Keyspace(t)
	began := time.Now()
	dir := filepath.Join(t.TempDir(), "src")
	t0 := (time.Now().Add(-72*time.Hour).UnixMilli() / 3600000) * 3600000
	samples := seedCopySource(t, dir, t0)
	require.GreaterOrEqual(t, samples, int64(10_000_000))
	t.Logf("seeded %d samples in %s", samples, time.Since(began).Round(time.Second))

	src := openEmbeddedRaw(t, dir)
	want := storeDigests(t, src)
	require.NoError(t, src.Close())
	var total int64
	for table, d := range want {
		require.NotZero(t, d.Rows, "the source has no %s rows: fix the test", table)
		total += d.Rows
	}
	t.Logf("source: %d rows, %d data_points cells", total, want[engine.DataPoints].Rows)

	args := []string{"copy", "--log.level=info",
		"--from.storage=embedded", "--from.storage.path=" + dir,
		"--to.storage=cassandra", "--to.cassandra.hosts=" + addr, "--to.cassandra.keyspace=" + ks,
		"--cassandra.write-consistency=ONE", "--cassandra.read-consistency=ONE", "--cassandra.timeout=60s"}

	// First run: killed once a position of data_points is recorded.
	session := cassandratest.Session(t, ks)
	first := startProcess(t, "copy", adapterBin, args...)
	deadline := time.Now().Add(3 * time.Minute)
	var mark string
	for mark == "" || mark == "done" {
		require.False(t, first.exited(), "the copy ended before it could be killed:\n%s", first.out.String())
		require.True(t, time.Now().Before(deadline), "no position recorded after 3 minutes:\n%s", first.out.String())
		time.Sleep(200 * time.Millisecond)
		mark = ""
		_ = session.Query(`SELECT value FROM service_index WHERE service = ? AND service_key = ? AND key = ?`,
			copier.MarkService, "embedded:"+dir, "data_points").Scan(&mark)
	}
	time.Sleep(20 * time.Second) // well into the table
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.done
	t.Logf("killed the first run at position %s", mark)

	// The rerun resumes. (Its --verify would read both stores whole once
	// more; the copy back below holds Cassandra's rows to the source's.)
	second := startProcess(t, "copy", adapterBin, args...)
	require.Equal(t, 0, second.wait(t, 15*time.Minute), "rerun:\n%s", second.out.String())
	rows, cells, secs := copyFigures(t, second.out.String())
	require.Less(t, rows, total-100_000, "the rerun starts at the recorded position")
	require.Contains(t, second.out.String(), "Resuming the copy of a table")
	t.Logf("embedded -> Cassandra rerun: %d rows, %d cells in %.1f s: %.0f rows/s, %.0f cells/s", rows, cells, secs, float64(rows)/secs, float64(cells)/secs)

	// Idempotent: a third run finds everything done.
	third := startProcess(t, "copy", adapterBin, args...)
	require.Equal(t, 0, third.wait(t, 5*time.Minute), "third run:\n%s", third.out.String())
	require.Contains(t, third.out.String(), "skipped_done_before=8 rows=0 cells=0")

	// Back: the keyspace into a new embedded store is the source again.
	back := filepath.Join(t.TempDir(), "back")
	backArgs := []string{"copy", "--log.level=info",
		"--from.storage=cassandra", "--from.cassandra.hosts=" + addr, "--from.cassandra.keyspace=" + ks,
		"--to.storage=embedded", "--to.storage.path=" + back,
		"--cassandra.read-consistency=ONE", "--cassandra.timeout=60s"}
	fourth := startProcess(t, "copy-back", adapterBin, backArgs...)
	require.Equal(t, 0, fourth.wait(t, 15*time.Minute), "copy back:\n%s", fourth.out.String())
	rows, cells, secs = copyFigures(t, fourth.out.String())
	t.Logf("Cassandra -> embedded: %d rows, %d cells in %.1f s: %.0f rows/s, %.0f cells/s", rows, cells, secs, float64(rows)/secs, float64(cells)/secs)
	// Read here, not by the binary: the copy back holds the source's rows,
	// so the keyspace between held them too.
	backStore := openEmbeddedRaw(t, back)
	require.Equal(t, want, storeDigests(t, backStore))
	require.NoError(t, backStore.Close())

	// Read through the layout: an adapter on the keyspace answers as one on
	// the source.
	emb := startAdapter(t, "", embeddedStorage(dir))
	onCas := startAdapter(t, "", cassandraStorage(addr, ks))
	end := t0 + copySamples*copyStepMs
	for _, q := range []url.Values{
		{"query": {`e2e_copy_a{i=~"0|1|2"}`}},
		{"query": {`sum by (job) (e2e_copy_b{i=~"7|8|9"})`}},
		{"query": {`rate(e2e_copy_b{i="7"}[5m])`}},
		{"query": {`histogram_quantile(0.9, e2e_copy_hist{i=~"3|4"})`}},
		{"query": {`sum(e2e_copy_ttl{i=~"1|2"})`}},
		{"query": {`count by (__name__, rollup_resolution) ({__name__=~"e2e_copy_a.+", i="5"})`}},
	} {
		q.Set("start", strconv.FormatInt(t0/1000, 10))
		q.Set("end", strconv.FormatInt(end/1000, 10))
		q.Set("step", "3600")
		path := "/api/v1/query_range?" + q.Encode()
		ws, wb, err := httpGet(emb.url(path))
		require.NoError(t, err)
		gs, gb, err := httpGet(onCas.url(path))
		require.NoError(t, err)
		require.Equal(t, 200, ws, "%s: %s", path, wb)
		require.Contains(t, wb, `"result":[{`, "%s selects nothing: fix the test", path)
		require.Equal(t, ws, gs, path)
		require.Equal(t, wb, gb, path)
	}
	for _, path := range []string{"/api/v1/labels", "/api/v1/label/__name__/values", "/api/v1/series?match[]=e2e_copy_b&start=" + fmt.Sprint(t0/1000)} {
		_, wb, err := httpGet(emb.url(path))
		require.NoError(t, err)
		_, gb, err := httpGet(onCas.url(path))
		require.NoError(t, err)
		require.Equal(t, wb, gb, path)
	}
	t.Logf("test wall time %s", time.Since(began).Round(time.Second))
}
