package copier_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/copier"
	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

func openPebble(t *testing.T) *pebblekv.Engine {
	t.Helper()
	e, err := pebblekv.Open(t.TempDir(), pebblekv.DefaultOptions(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	require.NoError(t, e.Setup(t.Context()))
	return e
}

func openCassandra(t *testing.T) *cql.Engine {
	t.Helper()
	addr, ks := cassandratest.Keyspace(t)
	e := cassandratest.Engine(t, addr, ks)
	require.NoError(t, e.Setup(t.Context()))
	return e
}

func f64(v float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }

// Prometheus's minimum and maximum times (ms) as row times: the layout's
// row times of the extremes, whatever the width.
const (
	minRowTime = -9223372036854775808 + 1814400000
	maxRowTime = 9223372036854775807 - 1814400000
)

// seed writes rows to every table: series of several row keys, values at
// the hostile extremes, TTLs up to Cassandra's largest, index rows at the
// extreme row times, a spec, service rows, and deletes done before the copy.
func seed(t *testing.T, e engine.Engine, series, cellsPer int) {
	t.Helper()
	ctx := t.Context()
	wt := time.Now().UnixMilli() - 1000000
	require.NoError(t, e.SetSpec(ctx, "row_time_unit", "MILLISECONDS", wt))
	require.NoError(t, e.SetSpec(ctx, "row_width", "1814400000", wt))
	values := [][]byte{f64(math.NaN()), f64(math.Inf(1)), f64(math.Inf(-1)), f64(1e300), f64(-0.0), {}, []byte("histogram bytes \x00\xff")}
	for s := range series {
		key := []byte(fmt.Sprintf("metric%d\x00\x00\x00\x01\x5e\x6d\x1c\x00\x00kairos_double\x00h=%d:", s%3, s))
		b := &engine.Batch{WriteTime: wt + int64(s)}
		for i := range cellsPer {
			ttl := int32(0)
			if s%4 == 3 {
				ttl = 31536000 // a year: Cassandra 5 refuses expiries past 2038 (CASSANDRA-14092)
			}
			col := uint32(i) * 2000
			if i == cellsPer-1 {
				col = math.MaxUint32
			}
			b.Cells = append(b.Cells, engine.Cell{Key: key, Column: col, Value: values[i%len(values)], TTL: ttl})
		}
		ix := engine.IndexedRowKey{Metric: fmt.Sprintf("metric%d", s%3), RowTime: 1358985600000, DataType: "kairos_double", Tags: []codec.Tag{{Name: "h", Value: fmt.Sprint(s)}}}
		b.RowKeys = []engine.IndexedRowKey{ix}
		b.TagIndexed = []engine.TagIndexedRowKey{{IndexedRowKey: ix, Pair: "h=" + fmt.Sprint(s), Hash: int32(s)}}
		b.RowTimes = []engine.RowTimeIndex{{Metric: ix.Metric, RowTime: ix.RowTime}}
		b.MetricNames = []string{ix.Metric}
		require.NoError(t, e.Write(ctx, b))
	}
	require.NoError(t, e.Write(ctx, &engine.Batch{
		WriteTime: wt,
		RowKeys: []engine.IndexedRowKey{
			{Metric: "edge", RowTime: minRowTime, DataType: "kairos_long", Tags: []codec.Tag{}},
			{Metric: "edge", RowTime: maxRowTime, DataType: "kairos_long", Tags: []codec.Tag{{Name: "ü", Value: "\u00a0"}}, TTL: 31536000},
		},
		RowTimes:      []engine.RowTimeIndex{{Metric: "edge", RowTime: minRowTime}, {Metric: "edge", RowTime: maxRowTime, TTL: 31536000}},
		MetricNames:   []string{"edge"},
		LegacyRowKeys: []engine.LegacyRowKey{{Metric: "legacy", RowKey: []byte("legacy\x00\x00")}},
	}))
	require.NoError(t, e.SetServiceValue(ctx, "kairos_rollup", "k", "progress", "42", wt))
	// A mark of some other copy into this store is not copied.
	require.NoError(t, e.SetServiceValue(ctx, copier.MarkService, "elsewhere", "data_points", "done", wt))
	// Deletes before the copy: a whole row, a range, an index row.
	require.NoError(t, e.Delete(ctx, &engine.Deletes{
		WriteTime:  wt + int64(series) + 10,
		Rows:       [][]byte{[]byte(fmt.Sprintf("metric%d\x00\x00\x00\x01\x5e\x6d\x1c\x00\x00kairos_double\x00h=%d:", 0, 0))},
		CellRanges: []engine.CellRange{{Key: []byte(fmt.Sprintf("metric%d\x00\x00\x00\x01\x5e\x6d\x1c\x00\x00kairos_double\x00h=%d:", 1, 1)), Lo: 0, Hi: 2000 * 10}},
		RowKeys:    []engine.IndexedRowKey{{Metric: "metric0", RowTime: 1358985600000, DataType: "kairos_double", Tags: []codec.Tag{{Name: "h", Value: "0"}}}},
	}))
}

func digests(t *testing.T, e engine.Raw) map[engine.Table]copier.Digest {
	t.Helper()
	out := map[engine.Table]copier.Digest{}
	for _, table := range engine.Tables {
		d, err := copier.TableDigest(t.Context(), e, table)
		require.NoError(t, err)
		out[table] = d
	}
	return out
}

// failing fails every LoadRaw after the first ok ones, as a destination
// whose network went away.
type failing struct {
	copier.Store
	ok    int64
	calls atomic.Int64
}

var errCut = errors.New("connection cut")

func (f *failing) LoadRaw(ctx context.Context, rows []engine.Row) error {
	if f.calls.Add(1) > f.ok {
		return errCut
	}
	return f.Store.LoadRaw(ctx, rows)
}

func opts(source string) copier.Options {
	return copier.Options{Source: source, Batch: 100, MarkEvery: time.Nanosecond}
}

// TestCopyResumes: a copy that fails halfway leaves its position in the
// destination; the rerun continues there (it loads fewer rows than there
// are) and ends with every table equal to the source's; a third run
// changes nothing.
func TestCopyResumes(t *testing.T) {
	src, dst := openPebble(t), openPebble(t)
	seed(t, src, 40, 100)
	want := digests(t, src)
	total := int64(0)
	for _, d := range want {
		total += d.Rows
	}
	log := slog.New(slog.DiscardHandler)

	_, err := copier.Copy(t.Context(), src, &failing{Store: dst, ok: 20}, opts("src"), log)
	require.ErrorIs(t, err, errCut)
	mark, ok, err := dst.ServiceValue(t.Context(), copier.MarkService, "src", "data_points")
	require.NoError(t, err)
	require.True(t, ok, "a position is recorded")
	require.NotEqual(t, "done", mark)

	sum, err := copier.Copy(t.Context(), src, dst, opts("src"), log)
	require.NoError(t, err)
	require.Less(t, sum.Rows, total, "the rerun starts at the position recorded")
	require.Greater(t, sum.Rows, total-20*100-100)
	require.Equal(t, want, digests(t, dst))

	sum, err = copier.Copy(t.Context(), src, dst, opts("src"), log)
	require.NoError(t, err)
	require.Equal(t, copier.Summary{Skipped: len(engine.Tables)}, sum)
	require.Equal(t, want, digests(t, dst))
}

// TestCopyRetries: a failure that passes is retried within the run.
func TestCopyRetries(t *testing.T) {
	src, dst := openPebble(t), openPebble(t)
	seed(t, src, 10, 50)
	f := &flaky{Store: dst}
	o := opts("src")
	o.Retries = 3
	_, err := copier.Copy(t.Context(), src, f, o, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, int64(1), f.failed.Load())
	require.Equal(t, digests(t, src), digests(t, dst))
}

// flaky fails its third load once.
type flaky struct {
	copier.Store
	calls, failed atomic.Int64
}

func (f *flaky) LoadRaw(ctx context.Context, rows []engine.Row) error {
	if f.calls.Add(1) == 3 {
		f.failed.Add(1)
		return errCut
	}
	return f.Store.LoadRaw(ctx, rows)
}

// TestCopySpecMismatch: stores of another row width are refused before
// anything is written.
func TestCopySpecMismatch(t *testing.T) {
	src, dst := openPebble(t), openPebble(t)
	seed(t, src, 2, 5)
	require.NoError(t, dst.SetSpec(t.Context(), "row_width", "3600000", 1))
	_, err := copier.Copy(t.Context(), src, dst, opts("src"), slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, `row_width is "1814400000" and the destination's "3600000"`)
	d, err := copier.TableDigest(t.Context(), dst, engine.DataPoints)
	require.NoError(t, err)
	require.Zero(t, d.Rows)
}

// TestCopyRate: the rate flag bounds rows per second.
func TestCopyRate(t *testing.T) {
	src, dst := openPebble(t), openPebble(t)
	seed(t, src, 4, 100) // about 420 rows
	o := opts("src")
	o.Rate = 200
	start := time.Now()
	sum, err := copier.Copy(t.Context(), src, dst, o, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	// The limiter's burst is one batch (a second's worth) up front.
	want := time.Duration(float64(sum.Rows-200) / 200 * float64(time.Second))
	require.GreaterOrEqual(t, time.Since(start), want-100*time.Millisecond, "%d rows", sum.Rows)
}

// TestCopyHugeRate: a rate beyond any int still copies in full batches.
func TestCopyHugeRate(t *testing.T) {
	src, dst := openPebble(t), openPebble(t)
	seed(t, src, 4, 100)
	f := &counting{Store: dst}
	o := opts("src")
	o.Rate = 1e300
	sum, err := copier.Copy(t.Context(), src, f, o, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, digests(t, src), digests(t, dst))
	require.LessOrEqual(t, f.calls.Load(), sum.Rows/int64(o.Batch)+int64(len(engine.Tables)), "%d loads for %d rows", f.calls.Load(), sum.Rows)
}

// counting counts loads.
type counting struct {
	copier.Store
	calls atomic.Int64
}

func (c *counting) LoadRaw(ctx context.Context, rows []engine.Row) error {
	c.calls.Add(1)
	return c.Store.LoadRaw(ctx, rows)
}

// TestCopyBetweenEngines copies an embedded store to Cassandra and back:
// every table comes back with the same rows, data_points with their write
// times, and a second copy changes nothing.
func TestCopyBetweenEngines(t *testing.T) {
	src, cas, back := openPebble(t), openCassandra(t), openPebble(t)
	seed(t, src, 30, 200)
	want := digests(t, src)
	log := slog.New(slog.DiscardHandler)
	_, err := copier.Copy(t.Context(), src, cas, opts("embedded"), log)
	require.NoError(t, err)
	require.Equal(t, want, digests(t, cas))
	_, err = copier.Copy(t.Context(), cas, back, opts("cassandra"), log)
	require.NoError(t, err)
	require.Equal(t, want, digests(t, back))
	// Cassandra's TTLs arrive as the seconds left.
	require.NoError(t, back.ScanRaw(t.Context(), engine.DataPoints, nil, func(r *engine.Row, _ []byte) error {
		if r.TTL != 0 {
			require.InDelta(t, 31536000-30, r.TTL, 30)
		}
		return nil
	}))
}

// fractions records what a copy reports of its share done.
type fractions struct {
	copier.Progress
	got []float64
}

func (f *fractions) Plan(int, int64)       {}
func (f *fractions) AddSeries(int64)       {}
func (f *fractions) AddSamples(int64)      {}
func (f *fractions) UnitDone(bool)         {}
func (f *fractions) SetFraction(v float64) { f.got = append(f.got, v) }

// TestCopyFraction: the share done the copy reports for the time left
// grows from near 0 to near 1 over data_points, from the embedded store's
// file sizes, and Cassandra's positions map the token ring onto 0..1.
func TestCopyFraction(t *testing.T) {
	src, dst := openPebble(t), openPebble(t)
	seed(t, src, 200, 500)
	require.NoError(t, src.Settle(t.Context()))
	p := &fractions{}
	o := opts("src")
	o.Progress = p
	_, err := copier.Copy(t.Context(), src, dst, o, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotEmpty(t, p.got)
	for i := 1; i < len(p.got); i++ {
		require.GreaterOrEqual(t, p.got[i], p.got[i-1], "%v", p.got)
	}
	require.Less(t, p.got[0], 0.1, "%v", p.got)
	require.Greater(t, p.got[len(p.got)-1], 0.9, "%v", p.got)

	var e cql.Engine
	pos := func(tok uint64) []byte { return binary.BigEndian.AppendUint64(nil, tok) }
	require.Equal(t, 0.0, e.ScanFraction(engine.DataPoints, pos(1<<63)))
	require.InDelta(t, 0.5, e.ScanFraction(engine.DataPoints, pos(0)), 1e-9)
	require.InDelta(t, 1.0, e.ScanFraction(engine.DataPoints, pos(1<<63-1)), 1e-9)
	require.Zero(t, e.ScanFraction(engine.DataPoints, nil))
}

// panicking panics in every load.
type panicking struct{ copier.Store }

func (panicking) LoadRaw(context.Context, []engine.Row) error { panic("destination bug") }

// TestCopyLoadPanics: a panic on the loading goroutine fails the copy
// instead of ending the process.
func TestCopyLoadPanics(t *testing.T) {
	src, dst := openPebble(t), openPebble(t)
	seed(t, src, 2, 10)
	_, err := copier.Copy(t.Context(), src, panicking{dst}, opts("src"), slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "destination bug")
}
