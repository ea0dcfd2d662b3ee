package importer

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/adapter"
	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

const (
	t0   = int64(1_700_000_000_000) // ms
	hour = int64(time.Hour / time.Millisecond)
)

func newStore(t *testing.T) *kairosstore.Store {
	t.Helper()
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { eng.Close() })
	require.NoError(t, eng.Setup(context.Background()))
	st, err := kairosstore.Open(context.Background(), eng, kairosstore.Options{RowWidth: 24 * time.Hour}, nil, nil)
	require.NoError(t, err)
	return st
}

type smp struct {
	t  int64
	f  float64
	h  *histogram.Histogram
	fh *histogram.FloatHistogram
}

func (s smp) T() int64                      { return s.t }
func (s smp) ST() int64                     { return 0 }
func (s smp) F() float64                    { return s.f }
func (s smp) H() *histogram.Histogram       { return s.h }
func (s smp) FH() *histogram.FloatHistogram { return s.fh }
func (s smp) Copy() chunks.Sample           { return s }
func (s smp) Type() chunkenc.ValueType {
	switch {
	case s.h != nil:
		return chunkenc.ValHistogram
	case s.fh != nil:
		return chunkenc.ValFloatHistogram
	}
	return chunkenc.ValFloat
}

// blockSeries are the series of one block covering [from, from+span): a
// counter, a gauge with the hostile values (NaN, a stale marker, ±Inf,
// 1e300, -0) and an integer and a float native histogram, each sample
// every 15 s.
func blockSeries(from, span int64) []storage.Series {
	var c, g, h, fh []chunks.Sample
	hostile := []float64{math.NaN(), math.Float64frombits(value.StaleNaN), math.Inf(1), math.Inf(-1), 1e300, math.Copysign(0, -1)}
	for i, ts := 0, from; ts < from+span; i, ts = i+1, ts+15_000 {
		c = append(c, smp{t: ts, f: float64(i)})
		v := float64(i) / 3
		if i%7 == 3 {
			v = hostile[(i/7)%len(hostile)]
		}
		g = append(g, smp{t: ts, f: v})
		h = append(h, smp{t: ts, h: tsdbutil.GenerateTestHistogram(int64(i))})
		fh = append(fh, smp{t: ts, fh: tsdbutil.GenerateTestFloatHistogram(int64(i))})
	}
	return []storage.Series{
		storage.NewListSeries(labels.FromStrings("__name__", "imp_requests_total", "job", "a"), c),
		storage.NewListSeries(labels.FromStrings("__name__", "imp_gauge", "job", "b"), g),
		storage.NewListSeries(labels.FromStrings("__name__", "imp_hist", "job", "a"), h),
		storage.NewListSeries(labels.FromStrings("__name__", "imp_fhist", "job", "b"), fh),
	}
}

// makeTSDB writes blocks of 2 h from t0 and, when head, a WAL of 10 min
// after them, with Prometheus's own tsdb package.
func makeTSDB(t *testing.T, blocks int, head bool) string {
	t.Helper()
	dir := t.TempDir()
	for i := range blocks {
		_, err := tsdb.CreateBlock(blockSeries(t0+int64(i)*2*hour, 2*hour), dir, 2*hour, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
	}
	if head {
		opts := tsdb.DefaultOptions()
		opts.RetentionDuration = 0
		db, err := tsdb.Open(dir, nil, nil, opts, nil)
		require.NoError(t, err)
		db.DisableCompactions()
		app := db.Appender(context.Background())
		for _, s := range blockSeries(t0+int64(blocks)*2*hour, 10*60_000) {
			it := s.Iterator(nil)
			for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
				switch vt {
				case chunkenc.ValFloat:
					ts, v := it.At()
					_, err = app.Append(0, s.Labels(), ts, v)
				case chunkenc.ValHistogram:
					ts, h := it.AtHistogram(nil)
					_, err = app.AppendHistogram(0, s.Labels(), ts, h, nil)
				case chunkenc.ValFloatHistogram:
					ts, fh := it.AtFloatHistogram(nil)
					_, err = app.AppendHistogram(0, s.Labels(), ts, nil, fh)
				}
				require.NoError(t, err)
			}
		}
		require.NoError(t, app.Commit())
		require.NoError(t, db.Close())
	}
	return dir
}

// dump is every sample of q as text, values bit for bit, by series.
func dump(t *testing.T, q storage.Querier) map[string][]string {
	t.Helper()
	defer q.Close()
	out := map[string][]string{}
	ss := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
	var it chunkenc.Iterator
	for ss.Next() {
		s := ss.At()
		it = s.Iterator(it)
		var lines []string
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			switch vt {
			case chunkenc.ValFloat:
				ts, v := it.At()
				lines = append(lines, fmt.Sprintf("%d %x", ts, math.Float64bits(v)))
			case chunkenc.ValHistogram:
				ts, h := it.AtHistogram(nil)
				lines = append(lines, fmt.Sprintf("%d %s", ts, h.String()))
			case chunkenc.ValFloatHistogram:
				ts, fh := it.AtFloatHistogram(nil)
				lines = append(lines, fmt.Sprintf("%d %s", ts, fh.String()))
			}
		}
		require.NoError(t, it.Err())
		out[s.Labels().String()] = append(out[s.Labels().String()], lines...)
	}
	require.NoError(t, ss.Err())
	for _, l := range out {
		sort.Strings(l)
	}
	return out
}

func sourceDump(t *testing.T, dir string) map[string][]string {
	t.Helper()
	db, err := tsdb.OpenDBReadOnly(dir, t.TempDir(), nil)
	require.NoError(t, err)
	defer db.Close()
	if _, err := os.Stat(filepath.Join(dir, "wal")); err == nil {
		q, err := db.Querier(math.MinInt64, math.MaxInt64)
		require.NoError(t, err)
		return dump(t, q)
	}
	blocks, err := db.Blocks()
	require.NoError(t, err)
	var qs []storage.Querier
	for _, b := range blocks {
		q, err := tsdb.NewBlockQuerier(b, math.MinInt64, math.MaxInt64)
		require.NoError(t, err)
		qs = append(qs, q)
	}
	return dump(t, storage.NewMergeQuerier(qs, nil, storage.ChainedSeriesMerge))
}

func storeDump(t *testing.T, st *kairosstore.Store) map[string][]string {
	t.Helper()
	q, err := st.Querier(timeparam.FloorMilli(timeparam.Min), timeparam.FloorMilli(timeparam.Max))
	require.NoError(t, err)
	return dump(t, q)
}

func all() Options {
	return Options{Start: timeparam.FloorMilli(timeparam.Min), End: timeparam.FloorMilli(timeparam.Max)}
}

func markCount(t *testing.T, st *kairosstore.Store) int {
	t.Helper()
	n := 0
	o := all()
	for _, key := range []string{o.sourceKey("tsdb", "")} {
		require.NoError(t, st.ServiceKeys(context.Background(), MarkService, key, "", func(string) error { n++; return nil }))
	}
	return n
}

// TestImportTSDB: every sample of the blocks and of the WAL arrives bit
// for bit (NaN, stale markers, ±Inf, both kinds of native histograms), and
// a second run skips every block and changes nothing.
func TestImportTSDB(t *testing.T) {
	dir := makeTSDB(t, 2, true)
	want := sourceDump(t, dir)
	require.Len(t, want, 4)
	st := newStore(t)
	sum, err := ImportTSDB(context.Background(), st, TSDB{Dir: dir, SandboxDir: t.TempDir()}, all(), nil)
	require.NoError(t, err)
	require.Equal(t, 3, sum.Units) // 2 blocks and the head
	require.Zero(t, sum.Refused)
	require.Equal(t, t0, sum.MinT)
	require.Equal(t, t0+4*hour+10*60_000-15_000, sum.MaxT)
	require.Equal(t, want, storeDump(t, st))
	require.Equal(t, 2, markCount(t, st))

	again, err := ImportTSDB(context.Background(), st, TSDB{Dir: dir, SandboxDir: t.TempDir()}, all(), nil)
	require.NoError(t, err)
	require.Equal(t, 2, again.Skipped)
	require.Equal(t, 1, again.Units, "the head is imported again")
	require.Equal(t, want, storeDump(t, st))
}

// TestImportTSDBRangeAndMatch: --start/--end and --match select what is
// imported, and a block read in part is not recorded as the whole.
func TestImportTSDBRangeAndMatch(t *testing.T) {
	dir := makeTSDB(t, 2, false)
	st := newStore(t)
	o := all()
	o.Start, o.End = t0+hour, t0+3*hour-1
	o.Selectors = [][]*labels.Matcher{{labels.MustNewMatcher(labels.MatchEqual, "job", "a")}}
	_, err := ImportTSDB(context.Background(), st, TSDB{Dir: dir}, o, nil)
	require.NoError(t, err)
	got := storeDump(t, st)
	require.Len(t, got, 2)
	for s, lines := range got {
		require.Contains(t, s, `job="a"`)
		require.Len(t, lines, int(2*hour/15_000), s)
		for _, l := range lines {
			var ts int64
			_, err := fmt.Sscan(l, &ts)
			require.NoError(t, err)
			require.True(t, ts >= o.Start && ts <= o.End, l)
		}
	}
	// The whole of it, now: nothing is skipped.
	sum, err := ImportTSDB(context.Background(), st, TSDB{Dir: dir}, all(), nil)
	require.NoError(t, err)
	require.Zero(t, sum.Skipped)
	require.Equal(t, sourceDump(t, dir), storeDump(t, st))
}

// TestImportTSDBResumes: an import stopped after its first block (as by a
// crash) records that block only; the rerun skips it and ends where one
// uninterrupted run ends.
func TestImportTSDBResumes(t *testing.T) {
	dir := makeTSDB(t, 4, false)
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	o := all()
	o.Rate = 5_000 // slow enough to stop it midway
	go func() {
		for ctx.Err() == nil && markCount(t, st) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, err := ImportTSDB(ctx, st, TSDB{Dir: dir}, o, nil)
	require.ErrorIs(t, err, context.Canceled)
	done := markCount(t, st)
	require.True(t, done >= 1 && done < 4, "%d blocks recorded", done)

	sum, err := ImportTSDB(context.Background(), st, TSDB{Dir: dir}, all(), nil)
	require.NoError(t, err)
	require.Equal(t, done, sum.Skipped)
	require.Equal(t, 4-done, sum.Units)
	require.Equal(t, sourceDump(t, dir), storeDump(t, st))
}

// TestImportTSDBBadInput: a wrong path and a corrupt block fail with a
// message naming them, and nothing is recorded as done.
func TestImportTSDBBadInput(t *testing.T) {
	st := newStore(t)
	file := filepath.Join(t.TempDir(), "prometheus.yml")
	require.NoError(t, os.WriteFile(file, []byte("global: {}\n"), 0o644))
	for _, c := range []struct{ dir, want string }{
		{"/nonexistent/prometheus/data", "no Prometheus TSDB at /nonexistent/prometheus/data: the directory does not exist"},
		{file, "not a directory"},
		{t.TempDir(), "neither blocks"},
	} {
		_, err := ImportTSDB(context.Background(), st, TSDB{Dir: c.dir}, all(), nil)
		require.ErrorContains(t, err, c.want)
		require.ErrorContains(t, err, c.dir)
	}

	dir := makeTSDB(t, 2, false)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var blocks []string
	for _, e := range entries {
		blocks = append(blocks, e.Name())
	}
	sort.Strings(blocks)
	// The second block's index is garbage.
	require.NoError(t, os.WriteFile(filepath.Join(dir, blocks[1], "index"), []byte("not an index"), 0o644))
	_, err = ImportTSDB(context.Background(), st, TSDB{Dir: dir}, all(), nil)
	require.ErrorContains(t, err, "corrupted block "+blocks[1])
	require.Zero(t, markCount(t, st))

	// A chunk file cut short: the block opens, and reading fails.
	dir = makeTSDB(t, 1, false)
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	chunk := filepath.Join(dir, entries[0].Name(), "chunks", "000001")
	fi, err := os.Stat(chunk)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(chunk, fi.Size()/2))
	_, err = ImportTSDB(context.Background(), st, TSDB{Dir: dir}, all(), nil)
	require.ErrorContains(t, err, "block "+entries[0].Name())
	require.Zero(t, markCount(t, st))
}

// remoteReadServer serves the adapter's own remote read over st.
func remoteReadServer(t testing.TB, st *kairosstore.Store) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(adapter.New(servedStore{st}, adapter.Options{}, nil, nil))
	t.Cleanup(srv.Close)
	return srv
}

type servedStore struct{ *kairosstore.Store }

func (s servedStore) NewAppender() adapter.Appender { return s.Store.NewAppender() }

// TestImportRemoteRead: an import over remote read (the adapter's own,
// streamed chunks that reach past the slices asked) gives the same
// samples as the source, slice by slice, and a rerun skips every slice.
func TestImportRemoteRead(t *testing.T) {
	dir := makeTSDB(t, 2, true)
	src := newStore(t)
	_, err := ImportTSDB(context.Background(), src, TSDB{Dir: dir, SandboxDir: t.TempDir()}, all(), nil)
	require.NoError(t, err)
	srv := remoteReadServer(t, src)

	dst := newStore(t)
	o := all()
	o.Start, o.End = t0-hour, t0+5*hour
	rr := RemoteRead{URL: srv.URL + "/api/v1/read", Slice: 25 * time.Minute, Timeout: time.Minute}
	sum, err := ImportRemoteRead(context.Background(), dst, rr, o, nil)
	require.NoError(t, err)
	n, _, err := Slices(o.Start, o.End, rr.Slice)
	require.NoError(t, err)
	require.Equal(t, n, sum.Units)
	require.Equal(t, storeDump(t, src), storeDump(t, dst))

	again, err := ImportRemoteRead(context.Background(), dst, rr, o, nil)
	require.NoError(t, err)
	require.Equal(t, n, again.Skipped)
	require.Zero(t, again.Units)

	// The same from a server answering SAMPLES, as one without streaming
	// does (the adapter answers so a client that accepts nothing else).
	sampled := newStore(t)
	rr.samplesOnly = true
	sum, err = ImportRemoteRead(context.Background(), sampled, rr, o, nil)
	require.NoError(t, err)
	require.Equal(t, n, sum.Units)
	// Protobuf leaves a double equal to 0 out, so a SAMPLES answer (the
	// adapter's as Prometheus's) turns -0 into +0; streamed chunks keep it.
	negZero := func(d map[string][]string) map[string][]string {
		for _, lines := range d {
			for i, l := range lines {
				lines[i] = strings.Replace(l, " 8000000000000000", " 0", 1)
			}
		}
		return d
	}
	require.Equal(t, negZero(storeDump(t, src)), negZero(storeDump(t, sampled)))
}

// TestImportRemoteReadBadInput: an unreachable host, an error status and
// an answer that is not remote read fail naming what is wrong, and no
// slice is recorded.
func TestImportRemoteReadBadInput(t *testing.T) {
	st := newStore(t)
	status := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/html") {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html>Grafana</html>")
			return
		}
		http.Error(w, "too many queries", http.StatusServiceUnavailable)
	}))
	t.Cleanup(status.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	o := all()
	o.Start, o.End = t0, t0+hour
	for _, c := range []struct{ url, want string }{
		{closed.URL + "/api/v1/read", "cannot reach the remote-read endpoint"},
		{status.URL + "/api/v1/read", "the server answered 503 Service Unavailable: too many queries"},
		{status.URL + "/html", `Content-Type "text/html"`},
		{"ftp://example.com/read", "is not an http(s) URL"},
		{"prometheus:9090", "is not an http(s) URL"},
	} {
		_, err := ImportRemoteRead(context.Background(), st, RemoteRead{URL: c.url, Slice: time.Hour, Timeout: 5 * time.Second}, o, nil)
		require.ErrorContains(t, err, c.want, c.url)
		n := 0
		require.NoError(t, st.ServiceKeys(context.Background(), MarkService, o.sourceKey("remote-read", c.url), "", func(string) error { n++; return nil }))
		require.Zero(t, n)
	}
}

// TestImportRemoteReadCutStream: a streamed answer cut in the middle (a
// network failure, a server that died) fails its slice, which is not
// recorded, while the slices before it are; a rerun that meets the same
// failure once tries the slice again and completes the import.
func TestImportRemoteReadCutStream(t *testing.T) {
	dir := makeTSDB(t, 2, false)
	src := newStore(t)
	_, err := ImportTSDB(context.Background(), src, TSDB{Dir: dir}, all(), nil)
	require.NoError(t, err)
	inner := adapter.New(servedStore{src}, adapter.Options{}, nil, nil)
	var requests, cutAt atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		body := rec.Body.Bytes()
		if requests.Add(1) == cutAt.Load() {
			body = body[:len(body)/2]
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)

	st := newStore(t)
	o := all()
	o.Start, o.End = t0, t0+4*hour-1
	rr := RemoteRead{URL: srv.URL + "/api/v1/read", Slice: time.Hour, Timeout: time.Minute}
	n, at, err := Slices(o.Start, o.End, rr.Slice)
	require.NoError(t, err)
	cutAt.Store(3) // the third slice's answer stops halfway
	_, err = ImportRemoteRead(context.Background(), st, rr, o, nil)
	require.ErrorContains(t, err, "read the streamed answer: unexpected EOF")
	require.ErrorContains(t, err, fmtMillis(at(2).Start))
	recorded := 0
	require.NoError(t, st.ServiceKeys(context.Background(), MarkService, o.sourceKey("remote-read", rr.URL), "", func(string) error { recorded++; return nil }))
	require.Equal(t, 2, recorded)

	requests.Store(0)
	cutAt.Store(1) // the rerun's first request
	o.Retries = 1
	sum, err := ImportRemoteRead(context.Background(), st, rr, o, nil)
	require.NoError(t, err)
	require.Equal(t, 2, sum.Skipped)
	require.Equal(t, n-2, sum.Units)
	require.Equal(t, int64(n-2+1), requests.Load(), "one slice tried twice")
	require.Equal(t, storeDump(t, src), storeDump(t, st))
}

// TestSlices: cuts at multiples of the slice length, clipped to the range,
// at the extremes of time too, and a plan of too many slices is refused
// before anything is allocated.
func TestSlices(t *testing.T) {
	n, at, err := Slices(90*60_000+1, 4*hour+5, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, Span{90*60_000 + 1, 2*hour - 1}, at(0))
	require.Equal(t, Span{2 * hour, 3*hour - 1}, at(1))
	require.Equal(t, Span{4 * hour, 4*hour + 5}, at(3))

	// Negative times are cut at the same multiples.
	n, at, err = Slices(-hour-1, -1, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, Span{-hour - 1, -hour - 1}, at(0))
	require.Equal(t, Span{-hour, -1}, at(1))

	lo, hi := timeparam.FloorMilli(timeparam.Min), timeparam.FloorMilli(timeparam.Max)
	// Both ends of time: the slices' ends are the range's, exactly, and
	// the cuts in between do not overflow.
	for _, r := range []Span{{lo, lo + 3*hour + 7}, {hi - 3*hour - 7, hi}} {
		n, at, err = Slices(r.Start, r.End, time.Hour)
		require.NoError(t, err)
		require.Equal(t, r.Start, at(0).Start)
		require.Equal(t, r.End, at(n-1).End)
		for i := 1; i < n; i++ {
			require.Equal(t, at(i-1).End+1, at(i).Start)
			require.Less(t, at(i).Start, at(i).End)
		}
	}
	// 584 million years in slices of 290 years are too many.
	_, _, err = Slices(lo, hi, 290*365*24*time.Hour)
	require.ErrorContains(t, err, "2017030 slices, more than 1000000")
	n, _, err = Slices(5, 5, time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	_, _, err = Slices(lo, hi, time.Millisecond)
	require.ErrorContains(t, err, "more than 1000000")
	_, _, err = Slices(0, hour, 0)
	require.ErrorContains(t, err, "positive")
	_, _, err = Slices(0, hour, time.Microsecond)
	require.ErrorContains(t, err, "whole number of milliseconds")
	_, _, err = Slices(hour, 0, time.Hour)
	require.ErrorContains(t, err, "before the start")
}

// TestImportTSDBExtremeTimes: samples at Prometheus's first and last
// millisecond, in the WAL, arrive as they are.
func TestImportTSDBExtremeTimes(t *testing.T) {
	dir := t.TempDir()
	opts := tsdb.DefaultOptions()
	opts.RetentionDuration = 0
	db, err := tsdb.Open(dir, nil, nil, opts, nil)
	require.NoError(t, err)
	db.DisableCompactions()
	lo, hi := timeparam.FloorMilli(timeparam.Min), timeparam.FloorMilli(timeparam.Max)
	app := db.Appender(context.Background())
	ls := labels.FromStrings("__name__", "imp_extreme")
	for _, s := range []struct {
		t int64
		v float64
	}{{lo, 1e300}, {0, math.Inf(-1)}, {hi, math.NaN()}} {
		_, err := app.Append(0, ls, s.t, s.v)
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit())
	require.NoError(t, db.Close())

	want := sourceDump(t, dir)
	require.Len(t, want[ls.String()], 3)
	st := newStore(t)
	sum, err := ImportTSDB(context.Background(), st, TSDB{Dir: dir, SandboxDir: t.TempDir()}, all(), nil)
	require.NoError(t, err)
	require.Zero(t, sum.Refused)
	require.Equal(t, want, storeDump(t, st))
}
