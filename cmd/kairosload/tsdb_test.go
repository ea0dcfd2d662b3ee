package main

import (
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"
)

// TestTSDBHoldsTheRequests: the blocks hold exactly the samples of the
// requests write would send (the last round partial), across a block
// boundary that cuts a request's samples in two.
func TestTSDBHoldsTheRequests(t *testing.T) {
	sh := testShape()
	sh.requests = 7 // round 2 sends series 0-9 only
	want := map[string]map[int64]float64{}
	ls := sh.allLabels()
	for n := range sh.requests {
		body, _ := sh.buildV1(ls, n)
		raw, err := snappy.Decode(nil, body)
		require.NoError(t, err)
		var req prompb.WriteRequest
		require.NoError(t, req.Unmarshal(raw))
		b := labels.NewScratchBuilder(0)
		for _, ts := range req.Timeseries {
			key := ts.ToLabels(&b, nil).String()
			if want[key] == nil {
				want[key] = map[int64]float64{}
			}
			for _, s := range ts.Samples {
				want[key][s.Timestamp] = s.Value
			}
		}
	}
	dir := t.TempDir()
	block := int64(60_000) // four scrapes: blocks split every request's samples
	require.NoError(t, runTSDB(t.Context(), sh, dir, block, slog.New(slog.DiscardHandler)))

	require.NoError(t, os.Mkdir(filepath.Join(dir, "wal"), 0o755)) // the read-only DB replays a WAL
	db, err := tsdb.OpenDBReadOnly(dir, "", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	blocks, err := db.Blocks()
	require.NoError(t, err)
	require.Greater(t, len(blocks), 1)
	q, err := db.Querier(math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	defer q.Close()
	got := map[string]map[int64]float64{}
	ss := q.Select(t.Context(), false, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
	for ss.Next() {
		s := ss.At()
		m := map[int64]float64{}
		it := s.Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			m[ts] = v
		}
		require.NoError(t, it.Err())
		got[s.Labels().String()] = m
	}
	require.NoError(t, ss.Err())
	require.Equal(t, want, got)
}

// TestTSDBExtremes: a run that starts at Prometheus's minimum time keeps
// every sample (its block is floored, not rounded towards zero), and a
// block size that would cut a run into too many blocks is refused before
// anything is written.
func TestTSDBExtremes(t *testing.T) {
	sh := testShape()
	sh.startMs = -9223372036854 // Prometheus's minimum time, -292273086-05-16T16:47:06Z
	dir := t.TempDir()
	require.NoError(t, runTSDB(t.Context(), sh, dir, 7_000, slog.New(slog.DiscardHandler)))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "wal"), 0o755))
	db, err := tsdb.OpenDBReadOnly(dir, "", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	q, err := db.Querier(math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	defer q.Close()
	n := 0
	ss := q.Select(t.Context(), false, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
	for ss.Next() {
		it := ss.At().Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			n++
		}
	}
	require.NoError(t, ss.Err())
	require.Equal(t, 2*sh.series*sh.samplesPerSeries, n, "two whole rounds of the series")

	sh = testShape()
	sh.intervalMs = 300 * 365 * 24 * 3600 * 1000 // 300 years between scrapes
	err = runTSDB(t.Context(), sh, t.TempDir(), 1, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "blocks, more than")
}
