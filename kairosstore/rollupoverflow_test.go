package kairosstore_test

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/rolluptest"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/readhint"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// TestRollupOverflowIsRead: a series of finite samples only, two of them
// 1e308 in one bucket, whose sum rollup is +Inf. The job stores that bucket
// in the rollup's null-typed row (§5.7); a rollup read must return it as
// the raw read's sum does, although the raw series has no null row to say
// so. Before the read asked the rollup metric's side index, the bucket had
// no point (sum and avg), where raw has +Inf.
func TestRollupOverflowIsRead(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		st, err := ks.Open(ctx, eng, ks.Options{RowWidth: 6 * time.Hour}, nil, nil)
		require.NoError(t, err)
		t0 := writeOverflowDay(t, st, eng)

		read := func(a rollup.Aggregate) map[int64]float64 {
			return readOverflowDay(t, st, t0, a, labels.MustNewMatcher(labels.MatchEqual, "__name__", "o"))
		}
		end := t0 + 6*hour
		sums := read(rollup.Sum)
		require.Len(t, sums, 23, "a point for every bucket from t0+1h to t0+23h")
		require.Contains(t, sums, end, "the overflowed bucket")
		require.True(t, math.IsInf(sums[end], 1), "sum %v", sums[end])
		require.Equal(t, 1e308, read(rollup.Max)[end], "the max of the bucket is finite and read as before")
		avgs := read(rollup.Avg)
		require.Contains(t, avgs, end)
		require.True(t, math.IsInf(avgs[end], 1), "avg %v", avgs[end])
	})
}

// sideIndexFirst holds a Select's row_keys reads until the rollup
// metric's side index (NonFiniteSuffix) is being read, for at most a
// second, and records whether it was.
type sideIndexFirst struct {
	engine.Engine
	once       sync.Once
	started    chan struct{}
	mu         sync.Mutex
	overlapped []bool
}

func (e *sideIndexFirst) RowTimes(ctx context.Context, metric string, lo, hi int64, fn func(int64) error) error {
	if strings.HasSuffix(metric, rollup.NameSuffix+ks.NonFiniteSuffix) {
		e.once.Do(func() { close(e.started) })
	}
	return e.Engine.RowTimes(ctx, metric, lo, hi, fn)
}

func (e *sideIndexFirst) RowKeys(ctx context.Context, metric string, rt int64, fn func(string, []codec.Tag) error) error {
	ok := false
	select {
	case <-e.started:
		ok = true
	case <-time.After(time.Second):
	}
	e.mu.Lock()
	e.overlapped = append(e.overlapped, ok)
	e.mu.Unlock()
	return e.Engine.RowKeys(ctx, metric, rt, fn)
}

// TestRollupSideIndexReadWithTheIndex: a Select of one metric name reads
// the rollup metric's side index while the index finds the series, not
// after (its first rollup read waited one more round trip for it), and
// the bucket whose sum overflowed is read as before: through that read,
// and through the series' own where no matcher names the metric.
func TestRollupSideIndexReadWithTheIndex(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		ctx := context.Background()
		wrapped := &sideIndexFirst{Engine: eng, started: make(chan struct{})}
		st, err := ks.Open(ctx, wrapped, ks.Options{RowWidth: 6 * time.Hour}, nil, nil)
		require.NoError(t, err)
		t0 := writeOverflowDay(t, st, eng)

		read := func(m *labels.Matcher) map[int64]float64 {
			return readOverflowDay(t, st, t0, rollup.Sum, m)
		}
		end := t0 + 6*hour
		sums := read(labels.MustNewMatcher(labels.MatchEqual, "__name__", "o"))
		require.Len(t, sums, 23)
		require.True(t, math.IsInf(sums[end], 1), "sum %v", sums[end])
		wrapped.mu.Lock()
		require.NotEmpty(t, wrapped.overlapped)
		require.True(t, wrapped.overlapped[0], "the side index read began before the first row_keys read ended")
		wrapped.mu.Unlock()
		require.Equal(t, sums, read(labels.MustNewMatcher(labels.MatchRegexp, "__name__", "o")), "without a name to read it early")
	})
}

// writeOverflowDay writes a day of o{job="a"} at 60 s, two samples of
// 1e308 in the bucket ending at t0+6h (whose sum overflows to +Inf), and
// its 1h rollups from t0+1h to t0+23h.
func writeOverflowDay(t *testing.T, st *ks.Store, eng engine.Engine) int64 {
	ctx := context.Background()
	day := int64(24 * time.Hour / time.Millisecond)
	t0 := 1_700_000_000_000 / day * day
	s := rolluptest.Series{Labels: labels.FromStrings("__name__", "o", "job", "a")}
	for i := int64(0); i < 24*60; i++ {
		v := float64(i)
		if i == 5*60+10 || i == 5*60+20 { // both in the bucket ending at t0+6h
			v = 1e308
		}
		s.T, s.V = append(s.T, t0+7_000+i*60_000), append(s.V, v)
	}
	appendSeries(t, st, []rolluptest.Series{s})
	require.NoError(t, rolluptest.Write(ctx, st, eng, []rollup.Resolution{overflowRes}, t0+hour, t0+23*hour, []rolluptest.Series{s}))
	return t0
}

// overflowRes is the resolution writeOverflowDay rolls up at.
const overflowRes = rollup.Resolution(time.Hour)

// readOverflowDay reads aggregate a of the series m selects, at
// overflowRes, from writeOverflowDay's rollups: the value at each bucket
// end.
func readOverflowDay(t *testing.T, st *ks.Store, t0 int64, a rollup.Aggregate, m *labels.Matcher) map[int64]float64 {
	ctx := context.Background()
	mint, maxt := t0+1, t0+23*hour
	q, err := st.Querier(mint, maxt)
	require.NoError(t, err)
	defer q.Close()
	ss := q.Select(readhint.With(ctx, readhint.Hint{Aggregate: a, Resolution: overflowRes, WindowMillis: hour}), false,
		&storage.SelectHints{Start: mint, End: maxt, Step: hour, Range: hour}, m)
	ts, vs := onlySeries(t, ss)
	out := map[int64]float64{}
	for i, pt := range ts {
		out[pt] = vs[i]
	}
	return out
}
