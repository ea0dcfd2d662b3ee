package kairosstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// hour is the row width of most tests: small, so a few hours of samples span
// several row windows.
const hour = int64(time.Hour / time.Millisecond)

// forEachEngine runs fn once per engine: the embedded one always, Cassandra
// when the test node is there (and always under CI=true, see cassandratest).
func forEachEngine(t *testing.T, fn func(t *testing.T, eng engine.Engine)) {
	t.Run("pebble", func(t *testing.T) {
		t.Parallel()
		fn(t, openPebble(t))
	})
	t.Run("cassandra", func(t *testing.T) {
		t.Parallel()
		fn(t, openCassandra(t))
	})
}

func openPebble(t testing.TB) engine.Engine {
	return openPebbleWith(t, pebblekv.Options{})
}

func openPebbleWith(t testing.TB, opts pebblekv.Options) engine.Engine {
	eng, err := pebblekv.Open(t.TempDir(), opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	require.NoError(t, eng.Setup(context.Background()))
	return eng
}

func openCassandra(t testing.TB) engine.Engine {
	eng, _ := openCassandraKeyspace(t)
	return eng
}

// openCassandraKeyspace is openCassandra that also names the keyspace, for
// tests that reach behind the store with CQL.
func openCassandraKeyspace(t testing.TB) (engine.Engine, string) {
	addr, keyspace := cassandratest.Keyspace(t)
	eng := cassandratest.Engine(t, addr, keyspace)
	require.NoError(t, eng.Setup(context.Background()))
	return eng, keyspace
}

func openStore(t *testing.T, eng engine.Engine, opts ks.Options) *ks.Store {
	t.Helper()
	if opts.RowWidth == 0 {
		opts.RowWidth = time.Duration(hour) * time.Millisecond
	}
	s, err := ks.Open(context.Background(), eng, opts, nil, nil)
	require.NoError(t, err)
	return s
}

type sample struct {
	T int64
	V uint64 // bits, so NaN payloads compare exactly
}

type series struct {
	Labels  string
	Samples []sample
}

func write(t *testing.T, s *ks.Store, data map[string][]sample) {
	t.Helper()
	app := s.NewAppender()
	for ls, samples := range data {
		lset := parseLabels(t, ls)
		for _, smp := range samples {
			require.NoError(t, errOf(app.Append(0, lset, smp.T, math.Float64frombits(smp.V))))
		}
	}
	require.NoError(t, app.Commit(context.Background()))
}

func parseLabels(t *testing.T, s string) labels.Labels {
	t.Helper()
	// The test data uses a tiny "name\x01value\x02name\x01value" form so
	// label values may hold any character of the cases.
	var b labels.ScratchBuilder
	for _, pair := range splitOn(s, '\x02') {
		nv := splitOn(pair, '\x01')
		require.Len(t, nv, 2, pair)
		b.Add(nv[0], nv[1])
	}
	b.Sort()
	return b.Labels()
}

func splitOn(s string, sep byte) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func lbl(pairs ...string) string {
	out := ""
	for i := 0; i < len(pairs); i += 2 {
		if i > 0 {
			out += "\x02"
		}
		out += pairs[i] + "\x01" + pairs[i+1]
	}
	return out
}

// canonical is ls with its pairs in label order, the form read returns.
func canonical(ls string) string {
	var b labels.ScratchBuilder
	for _, pair := range splitOn(ls, '\x02') {
		nv := splitOn(pair, '\x01')
		b.Add(nv[0], nv[1])
	}
	b.Sort()
	var enc []string
	b.Labels().Range(func(l labels.Label) { enc = append(enc, l.Name, l.Value) })
	return lbl(enc...)
}

func read(t *testing.T, s *ks.Store, start, end int64, ms ...*labels.Matcher) []series {
	t.Helper()
	return readHinted(t, s, start, end, nil, ms...)
}

// readHinted is read with the engine's hints.
func readHinted(t *testing.T, s *ks.Store, start, end int64, hints *storage.SelectHints, ms ...*labels.Matcher) []series {
	t.Helper()
	q, err := s.Querier(start, end)
	require.NoError(t, err)
	set := q.Select(context.Background(), true, hints, ms...)
	var out []series
	var it chunkenc.Iterator
	var prev labels.Labels
	for set.Next() {
		sr := set.At()
		require.True(t, prev.IsEmpty() || labels.Compare(prev, sr.Labels()) < 0, "series sorted by labels")
		prev = sr.Labels()
		it = sr.Iterator(it)
		var smps []sample
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			smps = append(smps, sample{ts, math.Float64bits(v)})
		}
		require.NoError(t, it.Err())
		if len(smps) == 0 {
			continue // rows in the range, no sample: as the engine, skipped
		}
		var enc []string
		sr.Labels().Range(func(l labels.Label) { enc = append(enc, l.Name, l.Value) })
		out = append(out, series{Labels: lbl(enc...), Samples: smps})
	}
	require.NoError(t, set.Err())
	return out
}

func eq(name, value string) *labels.Matcher {
	return labels.MustNewMatcher(labels.MatchEqual, name, value)
}

func expect(data map[string][]sample, start, end int64, keep func(string) bool) []series {
	var out []series
	for ls, smps := range data {
		if keep != nil && !keep(ls) {
			continue
		}
		var in []sample
		for _, s := range smps {
			if s.T >= start && s.T <= end {
				in = append(in, s)
			}
		}
		sort.Slice(in, func(i, j int) bool { return in[i].T < in[j].T })
		if len(in) > 0 {
			out = append(out, series{Labels: canonical(ls), Samples: in})
		}
	}
	return out
}

func sortByLabels(t *testing.T, ss []series) []series {
	sort.Slice(ss, func(i, j int) bool {
		return labels.Compare(parseLabels(t, ss[i].Labels), parseLabels(t, ss[j].Labels)) < 0
	})
	return ss
}

func bits(v float64) uint64 { return math.Float64bits(v) }

// TestWriteReadManySeries writes series with unusual label characters over
// four row windows and reads them back with every value bit intact.
func TestWriteReadManySeries(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		s := openStore(t, eng, ks.Options{})
		base := int64(1_700_000_000_000) - 1_700_000_000_000%hour
		data := map[string][]sample{}
		values := []string{"plain", "a:b", "c=d", "with space", "été 😀", "x==:y::", "line\nbreak", "long-" + strings.Repeat("v", 3000)}
		for i, v := range values {
			ls := lbl("__name__", "metric_one", "job", "j"+string(rune('a'+i)), "odd:tag=name", v)
			for k := int64(0); k < 40; k++ {
				data[ls] = append(data[ls], sample{base + k*6*60*1000 + int64(i), bits(float64(k) * 1.5)})
			}
		}
		tagless := lbl("__name__", "tagless_metric")
		data[tagless] = []sample{{base + 5, bits(1)}, {base + 2*hour + 5, bits(2)}, {base + 3*hour + 5, bits(3)}}
		special := lbl("__name__", "metric_two", "kind", "special")
		data[special] = []sample{
			{base + 1, bits(math.NaN())},
			{base + 2, value.StaleNaN},
			{base + 3, bits(math.Inf(1))},
			{base + 4, bits(math.Inf(-1))},
			{base + 5, bits(math.Copysign(0, -1))},
			{base + 6, value.NormalNaN},
			{base + 7, bits(math.MaxFloat64)},
			{base + 8, bits(math.SmallestNonzeroFloat64)},
		}
		write(t, s, data)

		got := read(t, s, base, base+4*hour, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+"))
		require.Equal(t, sortByLabels(t, expect(data, base, base+4*hour, nil)), got)

		// A window in the middle cuts series at exact bounds.
		start, end := base+hour+30*60*1000, base+2*hour+12*60*1000
		got = read(t, s, start, end, eq(model.MetricNameLabel, "metric_one"))
		require.Equal(t, sortByLabels(t, expect(data, start, end, func(ls string) bool { return ls != tagless && ls != special })), got)

		got = read(t, s, base, base+4*hour, eq(model.MetricNameLabel, "tagless_metric"))
		require.Equal(t, []series{{tagless, data[tagless]}}, got)

		require.Empty(t, read(t, s, base, base+4*hour, eq(model.MetricNameLabel, "no_such_metric")))
		require.Empty(t, read(t, s, base+5*hour, base+6*hour, eq(model.MetricNameLabel, "metric_one")))
	})
}

// TestMatchers compares the adapter's selection with Prometheus's matchers.
func TestMatchers(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		s := openStore(t, eng, ks.Options{})
		const ts = 1_000_000
		sets := []string{
			lbl("__name__", "up", "job", "api", "instance", "a:1"),
			lbl("__name__", "up", "job", "api", "instance", "b:1", "env", "prod"),
			lbl("__name__", "up", "job", "db", "instance", "c:1", "env", "dev"),
			lbl("__name__", "up", "job", "foobar"),
			lbl("__name__", "down", "job", "api"),
			lbl("__name__", "down"),
		}
		data := map[string][]sample{}
		for i, ls := range sets {
			data[ls] = []sample{{ts, bits(float64(i))}}
		}
		write(t, s, data)
		for _, tc := range []struct {
			name string
			ms   []*labels.Matcher
		}{
			{"eq", []*labels.Matcher{eq("__name__", "up"), eq("job", "api")}},
			{"anchored regex", []*labels.Matcher{eq("__name__", "up"), labels.MustNewMatcher(labels.MatchRegexp, "job", "foo")}},
			{"regex alternation", []*labels.Matcher{eq("__name__", "up"), labels.MustNewMatcher(labels.MatchRegexp, "job", "api|db")}},
			{"neq selects absent", []*labels.Matcher{eq("__name__", "up"), labels.MustNewMatcher(labels.MatchNotEqual, "env", "prod")}},
			{"empty eq selects absent", []*labels.Matcher{eq("__name__", "up"), eq("env", "")}},
			{"nre", []*labels.Matcher{eq("__name__", "up"), labels.MustNewMatcher(labels.MatchNotRegexp, "job", "a.*")}},
			{"nre empty", []*labels.Matcher{eq("__name__", "down"), labels.MustNewMatcher(labels.MatchNotRegexp, "job", ".+")}},
			{"no name", []*labels.Matcher{eq("job", "api")}},
			{"name regex", []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "__name__", "u.|do.*"), eq("job", "api")}},
			{"name neq", []*labels.Matcher{labels.MustNewMatcher(labels.MatchNotEqual, "__name__", "up")}},
			{"nothing", []*labels.Matcher{eq("__name__", "up"), eq("job", "nope")}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got := read(t, s, ts, ts, tc.ms...)
				want := expect(data, ts, ts, func(ls string) bool {
					lset := parseLabels(t, ls)
					for _, m := range tc.ms {
						if !m.Matches(lset.Get(m.Name)) {
							return false
						}
					}
					return true
				})
				require.Equal(t, sortByLabels(t, want), got)
			})
		}
	})
}

// TestNegativeTimestamps covers row times of negative timestamps (§3.1),
// including samples that KairosDB itself would miss at the start of a range.
func TestNegativeTimestamps(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		s := openStore(t, eng, ks.Options{})
		ls := lbl("__name__", "neg", "h", "a")
		data := map[string][]sample{ls: {
			{-hour - 1, bits(1)}, {-hour, bits(2)}, {-hour + 1, bits(3)}, {-hour / 2, bits(4)}, {-1, bits(5)}, {0, bits(6)}, {1, bits(7)}, {hour + 1, bits(8)},
		}}
		write(t, s, data)
		for _, r := range [][2]int64{{-2 * hour, 2 * hour}, {-hour, 0}, {-hour + 1, -1}, {-hour / 2, hour}} {
			require.Equal(t, expect(data, r[0], r[1], nil), read(t, s, r[0], r[1], eq("__name__", "neg")), "range %v", r)
		}
	})
}

// TestTTLExpires checks that samples and their index rows carry the TTL.
func TestTTLExpires(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		// 3 s, not 1: under -race on a loaded machine the first read
		// can take over a second, and found the cell expired already.
		s := openStore(t, eng, ks.Options{TTL: 3})
		data := map[string][]sample{lbl("__name__", "ttl", "a", "b"): {{1000, bits(1)}}}
		write(t, s, data)
		require.Len(t, read(t, s, 0, 2000, eq("__name__", "ttl")), 1)
		time.Sleep(4500 * time.Millisecond)
		require.Empty(t, read(t, s, 0, 2000, eq("__name__", "ttl")))
	})
}

// countingEngine counts index rows written and can fail writes.
type countingEngine struct {
	engine.Engine
	rowKeys  atomic.Int64
	rowTimes atomic.Int64
	fail     atomic.Bool
}

func (c *countingEngine) Write(ctx context.Context, b *engine.Batch) error {
	if c.fail.Load() {
		return errors.New("injected failure")
	}
	c.rowKeys.Add(int64(len(b.RowKeys)))
	c.rowTimes.Add(int64(len(b.RowTimes)))
	return c.Engine.Write(ctx, b)
}

// TestIndexCache checks that index rows are written once per series row,
// and that a failed write never leaves them out.
func TestIndexCache(t *testing.T) {
	ce := &countingEngine{Engine: openPebble(t)}
	s := openStore(t, ce, ks.Options{})
	ls := lbl("__name__", "cached", "a", "1")
	ce.fail.Store(true)
	app := s.NewAppender()
	require.NoError(t, errOf(app.Append(0, parseLabels(t, ls), 10, 1)))
	require.Error(t, app.Commit(context.Background()))
	ce.fail.Store(false)

	write(t, s, map[string][]sample{ls: {{10, bits(1)}}})
	require.EqualValues(t, 1, ce.rowKeys.Load(), "the failed write must not suppress the index row")
	require.EqualValues(t, 1, ce.rowTimes.Load())
	write(t, s, map[string][]sample{ls: {{20, bits(2)}}})
	require.EqualValues(t, 1, ce.rowKeys.Load(), "same row window: index row already stored")
	write(t, s, map[string][]sample{ls: {{hour + 20, bits(3)}}})
	require.EqualValues(t, 2, ce.rowKeys.Load(), "a new row window needs its index row")
	require.EqualValues(t, 2, ce.rowTimes.Load())
	require.Equal(t, []series{{ls, []sample{{10, bits(1)}, {20, bits(2)}, {hour + 20, bits(3)}}}}, read(t, s, 0, 2*hour, eq("__name__", "cached")))
}

// TestIndexCacheKnownSeries: 100,000 series sent round-robin in requests
// of 2,000, as kairosload and Prometheus's shards send them. With the
// default cache size, a second round finds every series' index rows
// already written. At KairosDB's 50,000 a generational cache kept almost
// none of them, and every request wrote its index rows again.
func TestIndexCacheKnownSeries(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 200,000 samples")
	}
	const n, perRequest = 100_000, 2_000
	ce := &countingEngine{Engine: openPebble(t)}
	s := openStore(t, ce, ks.Options{})
	lsets := make([]labels.Labels, n)
	for i := range lsets {
		lsets[i] = labels.FromStrings("__name__", fmt.Sprintf("known_%d", i%100), "instance", fmt.Sprintf("host-%d", i), "job", "load")
	}
	round := func(ts int64) {
		t.Helper()
		for lo := 0; lo < n; lo += perRequest {
			app := s.NewAppender()
			for _, ls := range lsets[lo : lo+perRequest] {
				require.NoError(t, errOf(app.Append(0, ls, ts, 1)))
			}
			require.NoError(t, app.Commit(context.Background()))
		}
	}
	round(10)
	require.EqualValues(t, n, ce.rowKeys.Load(), "first round: every series is new")
	round(20)
	require.EqualValues(t, n, ce.rowKeys.Load(), "second round: every series' index rows are known")
}

// TestSeriesRefs appends through a handle kept across appenders, as the
// write handler does: index rows are written once per row window, never
// skipped after a failed write, and written again after a delete removed
// them.
func TestSeriesRefs(t *testing.T) {
	ctx := context.Background()
	ce := &countingEngine{Engine: openPebble(t)}
	s := openStore(t, ce, ks.Options{})
	ls := lbl("__name__", "ref", "a", "1")
	app := s.NewAppender()
	ref, err := app.Append(0, parseLabels(t, ls), 10, 1)
	require.NoError(t, err)
	require.NotZero(t, ref)
	ce.fail.Store(true)
	require.Error(t, app.Commit(ctx))
	ce.fail.Store(false)

	appendRef := func(ts int64, v float64) {
		t.Helper()
		app := s.NewAppender()
		got, err := app.Append(ref, labels.EmptyLabels(), ts, v)
		require.NoError(t, err)
		require.Equal(t, ref, got)
		require.NoError(t, app.Commit(ctx))
	}
	appendRef(10, 1)
	require.EqualValues(t, 1, ce.rowKeys.Load(), "the failed write must not suppress the index row")
	appendRef(20, 2)
	require.EqualValues(t, 1, ce.rowKeys.Load(), "same row window: index row already stored")
	appendRef(hour+20, 3)
	require.EqualValues(t, 2, ce.rowKeys.Load(), "a new row window needs its index row")
	appendRef(30, 4) // back to the first window, whose index row is stored
	require.EqualValues(t, 2, ce.rowKeys.Load())

	_, err = s.Delete(ctx, math.MinInt64, math.MaxInt64, eq("__name__", "ref"))
	require.NoError(t, err)
	appendRef(hour+30, 5)
	require.EqualValues(t, 3, ce.rowKeys.Load(), "the delete removed the index row: written again")
	require.Equal(t, []series{{ls, []sample{{hour + 30, bits(5)}}}}, read(t, s, 0, 2*hour, eq("__name__", "ref")))

	// A ref the store never gave out is an error asking for the labels,
	// never a sample filed under some series; with the labels, it is the
	// series of the labels.
	_, err = s.NewAppender().Append(ref+1000, labels.EmptyLabels(), 1, 1)
	var unknown interface{ UnknownSeriesRef() }
	require.ErrorAs(t, err, &unknown)
	got, err := s.NewAppender().Append(ref+1000, parseLabels(t, ls), hour+40, 6)
	require.NoError(t, err)
	require.Equal(t, ref, got)
}

// TestSeriesRefsEvicted: once newer series took a ref's slot in the store's
// ref table, the ref is unknown (the caller then passes the labels), and
// never resolves to the newer series.
func TestSeriesRefsEvicted(t *testing.T) {
	s := openStore(t, openPebble(t), ks.Options{IndexCacheSize: 1})
	app := s.NewAppender()
	a, err := app.Append(0, parseLabels(t, lbl("__name__", "a")), 10, 1)
	require.NoError(t, err)
	for _, name := range []string{"b", "c", "d"} {
		_, err := app.Append(0, parseLabels(t, lbl("__name__", name)), 10, 1)
		require.NoError(t, err)
	}
	_, err = s.NewAppender().Append(a, labels.EmptyLabels(), 20, 2)
	var unknown interface{ UnknownSeriesRef() }
	require.ErrorAs(t, err, &unknown)
	app = s.NewAppender()
	again, err := app.Append(a, parseLabels(t, lbl("__name__", "a")), 20, 2)
	require.NoError(t, err)
	require.NotZero(t, again)
	require.NoError(t, app.Commit(context.Background()))
	require.Equal(t, []series{{lbl("__name__", "a"), []sample{{20, bits(2)}}}}, read(t, s, 0, hour, eq("__name__", "a")))
}

// TestSpec follows KairosDB's start-up rules for the spec table (§3.3).
func TestSpec(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		s := openStore(t, eng, ks.Options{RowWidth: 504 * time.Hour})
		require.Equal(t, codec.DefaultRowSpec(), s.Spec())
		unit, ok, err := eng.Spec(ctx, "row_time_unit")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "MILLISECONDS", unit)
		width, ok, err := eng.Spec(ctx, "row_width")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "1814400000", width)

		_, err = ks.Open(ctx, eng, ks.Options{RowWidth: time.Hour}, nil, nil)
		require.ErrorContains(t, err, "set --kairosdb.row-time-unit=MILLISECONDS and --kairosdb.row-width=504h0m0s")
		_, err = ks.Open(ctx, eng, ks.Options{RowTimeUnit: codec.Seconds, RowWidth: 504 * time.Hour}, nil, nil)
		require.ErrorContains(t, err, "row time unit")
	})
}

// TestLegacyDetection: a keyspace with metric names but no spec is LEGACY.
func TestLegacyDetection(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		require.NoError(t, eng.Write(ctx, &engine.Batch{WriteTime: 1, MetricNames: []string{"old.metric"}}))
		s := openStore(t, eng, ks.Options{RowWidth: 504 * time.Hour})
		require.Equal(t, codec.Legacy, s.Spec().Unit)
		unit, _, err := eng.Spec(ctx, "row_time_unit")
		require.NoError(t, err)
		require.Equal(t, "LEGACY", unit)
	})
}

// TestReadsKairosDBRows seeds rows exactly as KairosDB writes them (the
// worked example EX1 of §2.4 and §5.3, a long and a string series) and reads
// them back.
func TestReadsKairosDBRows(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		s := openStore(t, eng, ks.Options{RowWidth: 504 * time.Hour})
		const ts = int64(1359788400000)
		spec := codec.DefaultRowSpec()
		rt := spec.RowTime(ts)
		tags := []codec.Tag{{Name: "host", Value: "server1"}}
		long := codec.AppendRowKey(nil, codec.RowKey{Metric: "sys.cpu", RowTime: rt, DataType: codec.TypeLong, Tags: tags})
		str := codec.AppendRowKey(nil, codec.RowKey{Metric: "sys.cpu", RowTime: rt, DataType: codec.TypeString, Tags: []codec.Tag{{Name: "host", Value: "server2"}}})
		sv := []byte("\x00\x04text") // Java's writeUTF (§4.3)
		require.NoError(t, eng.Write(ctx, &engine.Batch{
			WriteTime: 1,
			Cells: []engine.Cell{
				{Key: long, Column: spec.Column(rt, ts), Value: codec.AppendLong(nil, 123)},
				{Key: long, Column: spec.Column(rt, ts+1000), Value: codec.AppendLong(nil, -5)},
				{Key: str, Column: spec.Column(rt, ts), Value: sv},
			},
			RowKeys: []engine.IndexedRowKey{
				{Metric: "sys.cpu", RowTime: rt, DataType: codec.TypeLong, Tags: tags},
				{Metric: "sys.cpu", RowTime: rt, DataType: codec.TypeString, Tags: []codec.Tag{{Name: "host", Value: "server2"}}},
			},
			RowTimes:    []engine.RowTimeIndex{{Metric: "sys.cpu", RowTime: rt}},
			MetricNames: []string{"sys.cpu"},
		}))
		got := read(t, s, ts-1000, ts+1000, eq("__name__", "sys.cpu"))
		require.Equal(t, []series{{lbl("__name__", "sys.cpu", "host", "server1"), []sample{{ts, bits(123)}, {ts + 1000, bits(-5)}}}}, got,
			"kairos_long reads as float64; kairos_string is skipped, not an error")
		requireChunksMatch(t, s, ts-1000, ts+1000, eq("__name__", "sys.cpu"))
	})
}

// TestDelete covers whole-row and partial-row deletes (§8).
func TestDelete(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		s := openStore(t, eng, ks.Options{})
		a := lbl("__name__", "del", "k", "a")
		b := lbl("__name__", "del", "k", "b")
		data := map[string][]sample{
			a: {{10, bits(1)}, {hour + 10, bits(2)}, {hour + 20, bits(3)}},
			b: {{10, bits(4)}, {hour + 10, bits(5)}},
		}
		write(t, s, data)
		// Row 0 wholly, row 1 up to hour+15.
		n, err := s.Delete(ctx, 0, hour+15, eq("__name__", "del"), eq("k", "a"))
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, []series{
			{a, []sample{{hour + 20, bits(3)}}},
			{b, []sample{{10, bits(4)}, {hour + 10, bits(5)}}},
		}, read(t, s, 0, 2*hour, eq("__name__", "del")))
		// Writing again after a delete re-creates index rows.
		write(t, s, map[string][]sample{a: {{30, bits(9)}}})
		require.Equal(t, []series{{a, []sample{{30, bits(9)}, {hour + 20, bits(3)}}}}, read(t, s, 0, 2*hour, eq("__name__", "del"), eq("k", "a")))
		// Delete everything of the metric.
		_, err = s.Delete(ctx, math.MinInt64, math.MaxInt64, eq("__name__", "del"))
		require.NoError(t, err)
		require.Empty(t, read(t, s, math.MinInt64, math.MaxInt64, eq("__name__", "del")))
		var names []string
		require.NoError(t, eng.MetricNames(ctx, func(n string) error { names = append(names, n); return nil }))
		require.NotContains(t, names, "del")
	})
}

// TestMetadata stores and reads back metric metadata in service_index.
func TestMetadata(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		s := openStore(t, eng, ks.Options{})
		app := s.NewAppender()
		require.NoError(t, app.SetMetadata("http_requests_total", metadata.Metadata{Type: "counter", Help: "Requests.", Unit: ""}))
		require.NoError(t, app.SetMetadata("temp", metadata.Metadata{Type: "gauge", Help: "Temp: \"quoted\".", Unit: "celsius"}))
		require.NoError(t, app.Commit(ctx))
		all, err := s.Metadata(ctx, "", 0)
		require.NoError(t, err)
		require.Equal(t, map[string][]metadata.Metadata{
			"http_requests_total": {{Type: "counter", Help: "Requests."}},
			"temp":                {{Type: "gauge", Help: "Temp: \"quoted\".", Unit: "celsius"}},
		}, all)
		one, err := s.Metadata(ctx, "temp", 0)
		require.NoError(t, err)
		require.Len(t, one, 1)
		first, err := s.Metadata(ctx, "", 1)
		require.NoError(t, err, "a limit below the families stops the listing early")
		require.Len(t, first, 1)
		// No family has a name of invalid UTF-8; Cassandra refuses one as
		// a key, with an error rather than an empty answer.
		none, err := s.Metadata(ctx, "\xff\xfe", 0)
		require.NoError(t, err)
		require.Empty(t, none)
		none, err = s.Metadata(ctx, strings.Repeat("x", 1<<20), 0)
		require.NoError(t, err)
		require.Empty(t, none)
	})
}

// TestInvalidSeries: a series the layout cannot hold is rejected at Append.
func TestInvalidSeries(t *testing.T) {
	s := openStore(t, openPebble(t), ks.Options{})
	app := s.NewAppender()
	require.Error(t, errOf(app.Append(0, labels.FromStrings("job", "x"), 1, 1)), "no __name__")
	require.Error(t, errOf(app.Append(0, labels.FromStrings("__name__", "a\x00b"), 1, 1)), "NUL in the metric name")
	require.NoError(t, app.Commit(context.Background()))
	require.Empty(t, read(t, s, 0, 10, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".*")))
}

// TestReadsLegacyLayouts seeds a LEGACY-mode keyspace (§3.2) with a type-less
// row key found only through row_key_index, whose cells are typed by the
// column's low bit (§4.8), and a kairos_legacy row from row_keys (§4.5).
func TestReadsLegacyLayouts(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		require.NoError(t, eng.SetSpec(ctx, "row_time_unit", "LEGACY", 1))
		require.NoError(t, eng.SetSpec(ctx, "row_width", "1814400000", 1))
		s := openStore(t, eng, ks.Options{RowWidth: 504 * time.Hour})
		spec := s.Spec()
		require.Equal(t, codec.Legacy, spec.Unit)

		const ts = int64(1359788400000) // EX1
		rt := spec.RowTime(ts)
		typeless := codec.AppendRowKey(nil, codec.RowKey{Metric: "sys.cpu", RowTime: rt, DataType: codec.TypeLegacy, Tags: []codec.Tag{{Name: "host", Value: "server1"}}})
		require.Equal(t, "7379732e637075000000013c69da9c00686f73743d736572766572313a", hexOf(typeless), "the spec's legacy key vector")
		col := spec.Column(rt, ts)
		require.Equal(t, uint32(0x5fb38300), col, "the spec's LEGACY-mode column of EX1")

		saved := codec.AppendRowKey(nil, codec.RowKey{Metric: "sys.cpu", RowTime: rt, DataType: codec.TypeLegacy, Tags: []codec.Tag{{Name: "host", Value: "server2"}}})
		require.NoError(t, eng.Write(ctx, &engine.Batch{
			WriteTime: 1,
			Cells: []engine.Cell{
				{Key: typeless, Column: col, Value: []byte{0x01, 0x2c}},                                      // long 300, stripped big-endian
				{Key: typeless, Column: spec.Column(rt, ts+1000) | 1, Value: []byte{0x01, 0x3f, 0xc0, 0, 0}}, // float 1.5
				{Key: saved, Column: col, Value: []byte{0x01, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}},                 // kairos_legacy double 1.5
				{Key: saved, Column: spec.Column(rt, ts+1000), Value: append([]byte{0x00}, codec.AppendLong(nil, -7)...)},
			},
			RowKeys:       []engine.IndexedRowKey{{Metric: "sys.cpu", RowTime: rt, DataType: codec.TypeLegacy, Tags: []codec.Tag{{Name: "host", Value: "server2"}}}},
			RowTimes:      []engine.RowTimeIndex{{Metric: "sys.cpu", RowTime: rt}},
			LegacyRowKeys: []engine.LegacyRowKey{{Metric: "sys.cpu", RowKey: typeless}},
			MetricNames:   []string{"sys.cpu"},
		}))
		got := read(t, s, ts-1000, ts+2000, eq("__name__", "sys.cpu"))
		require.Equal(t, []series{
			{lbl("__name__", "sys.cpu", "host", "server1"), []sample{{ts, bits(300)}, {ts + 1000, bits(1.5)}}},
			{lbl("__name__", "sys.cpu", "host", "server2"), []sample{{ts, bits(1.5)}, {ts + 1000, bits(-7)}}},
		}, got)
		requireChunksMatch(t, s, ts-1000, ts+2000, eq("__name__", "sys.cpu"))
		// Nothing outside the range.
		require.Empty(t, read(t, s, ts+2000, ts+3000, eq("__name__", "sys.cpu")))
	})
}

func hexOf(b []byte) string { return fmt.Sprintf("%x", b) }

// TestDeleteSideRows: deleting a series also deletes its non-finite values
// (indexed under the side metric) and its exemplars.
func TestDeleteSideRows(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		s := openStore(t, eng, ks.Options{})
		ls := parseLabels(t, lbl("__name__", "side", "k", "a"))
		app := s.NewAppender()
		require.NoError(t, errOf(app.Append(0, ls, 10, 1)))
		require.NoError(t, errOf(app.Append(0, ls, 20, math.Float64frombits(value.StaleNaN))))
		require.NoError(t, errOf(app.AppendExemplar(0, ls, exemplarAt(10, "trace_id", "x"))))
		require.NoError(t, app.Commit(ctx))
		require.Equal(t, []series{{lbl("__name__", "side", "k", "a"), []sample{{10, bits(1)}, {20, value.StaleNaN}}}}, read(t, s, 0, hour, eq("__name__", "side")))

		_, err := s.Delete(ctx, math.MinInt64, math.MaxInt64, eq("__name__", "side"))
		require.NoError(t, err)
		require.Empty(t, read(t, s, 0, hour, eq("__name__", "side")))
		ex, err := s.Exemplars(ctx, 0, hour, eq("__name__", "side"))
		require.NoError(t, err)
		require.Empty(t, ex)
		for _, m := range []string{"side", "side" + ks.NonFiniteSuffix, "side" + codec.ExemplarSuffix} {
			require.NoError(t, eng.RowTimes(ctx, m, math.MinInt64, math.MaxInt64, func(rt int64) error {
				t.Errorf("row_key_time_index of %s still has %d", m, rt)
				return nil
			}))
		}
		require.NoError(t, eng.MetricNames(ctx, func(n string) error {
			t.Errorf("string_index still lists %q", n)
			return nil
		}))
	})
}

// TestSampleLimit: under WithSampleLimit, the reads of every Select given
// the context together fail with ErrTooManySamples past the limit, and not
// at it.
func TestSampleLimit(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		s := openStore(t, eng, ks.Options{})
		const nSeries, perSeries = 3, 2500 // more than one budget step a series
		data := map[string][]sample{}
		for i := range nSeries {
			ls := lbl("__name__", "limited", "i", fmt.Sprint(i))
			for k := range int64(perSeries) {
				data[ls] = append(data[ls], sample{k * 1000, bits(float64(k))})
			}
		}
		write(t, s, data)
		// readAll reads the series selects times in one querier and
		// returns the first iterator error.
		readAll := func(ctx context.Context, selects int) error {
			q, err := s.Querier(0, perSeries*1000)
			require.NoError(t, err)
			defer q.Close()
			n := 0
			for range selects {
				set := q.Select(ctx, true, nil, eq("__name__", "limited"))
				var it chunkenc.Iterator
				for set.Next() {
					it = set.At().Iterator(it)
					for it.Next() != chunkenc.ValNone {
						n++
					}
					if err := it.Err(); err != nil {
						return err
					}
				}
				require.NoError(t, set.Err())
			}
			require.Equal(t, selects*nSeries*perSeries, n)
			return nil
		}
		const total = nSeries * perSeries
		ctx := context.Background()
		require.NoError(t, readAll(ks.WithSampleLimit(ctx, total), 1))
		require.ErrorIs(t, readAll(ks.WithSampleLimit(ctx, total-1), 1), ks.ErrTooManySamples)
		// One budget for every Select of a query.
		require.NoError(t, readAll(ks.WithSampleLimit(ctx, 2*total), 2))
		require.ErrorIs(t, readAll(ks.WithSampleLimit(ctx, 2*total-1), 2), ks.ErrTooManySamples)
		require.NoError(t, readAll(ks.WithSampleLimit(ctx, 0), 2))
	})
}

// errOf is the error of an Append call, for tests that need no ref.
func errOf(_ storage.SeriesRef, err error) error { return err }
