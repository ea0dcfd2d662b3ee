package kairosstore_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/stretchr/testify/require"

	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

type chunkOf struct {
	Labels     string
	MinT, MaxT int64
	Encoding   string
	Bytes      []byte
}

func collectChunks(t *testing.T, set storage.ChunkSeriesSet) []chunkOf {
	t.Helper()
	var out []chunkOf
	var it chunks.Iterator
	for set.Next() {
		s := set.At()
		it = s.Iterator(it)
		for it.Next() {
			m := it.At()
			out = append(out, chunkOf{s.Labels().String(), m.MinTime, m.MaxTime, m.Chunk.Encoding().String(), append([]byte(nil), m.Chunk.Bytes()...)})
		}
		require.NoError(t, it.Err())
	}
	require.NoError(t, set.Err())
	return out
}

// TestChunkQuerierMatchesEncodedSamples: the chunks a streamed remote read
// gets from ChunkQuerier, encoded straight from the cells where a series
// allows it, are byte for byte those of Prometheus's encoder over the
// samples Querier reads, for every shape of series: one row or many, more
// than a chunk, stale markers and NaN (a second row type), negative times
// (overlapping rows), native histograms, and ranges cutting rows.
func TestChunkQuerierMatchesEncodedSamples(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng engine.Engine) {
		s := openStore(t, eng, ks.Options{})
		data := map[string][]sample{}
		add := func(ls string, ts []int64, v func(i int) float64) {
			for i, tt := range ts {
				data[ls] = append(data[ls], sample{tt, bits(v(i))})
			}
		}
		every := func(from, step int64, n int) []int64 {
			ts := make([]int64, n)
			for i := range ts {
				ts[i] = from + int64(i)*step
			}
			return ts
		}
		// 1,000 samples at 15 s: 9 chunks over 5 row windows, irregular values.
		add(lbl("__name__", "c", "s", "long"), every(0, 15_000, 1000), func(i int) float64 { return math.Sin(float64(i)) * 1e3 })
		// A counter with gaps and jittered timestamps.
		add(lbl("__name__", "c", "s", "jitter"), every(7, 60_001, 200), func(i int) float64 { return float64(i * i) })
		// NaN and a stale marker: those cells sit in a second row type.
		add(lbl("__name__", "c", "s", "stale"), every(0, 30_000, 300), func(i int) float64 {
			switch i {
			case 17:
				return math.NaN()
			case 250:
				return math.Float64frombits(value.StaleNaN)
			}
			return float64(i)
		})
		// Negative times: rows whose windows overlap (§3.1).
		add(lbl("__name__", "c", "s", "negative"), every(-2*hour, 20_000, 500), func(i int) float64 { return float64(-i) })
		write(t, s, data)
		hs := testHistograms(t)
		app := s.NewAppender()
		hls := labels.FromStrings("__name__", "c", "s", "histogram")
		k := int64(0)
		for range 3 {
			for _, h := range hs {
				k++
				_, err := app.AppendHistogram(0, hls, k*60_000, h, nil)
				require.NoError(t, err)
			}
		}
		require.NoError(t, app.Commit(context.Background()))

		for _, r := range [][2]int64{{-3 * hour, 5 * hour}, {1, 4*hour - 1}, {hour + 123_456, 2 * hour}, {-hour - 1, 3}} {
			t.Run(fmt.Sprintf("%d..%d", r[0], r[1]), func(t *testing.T) {
				requireChunksMatch(t, s, r[0], r[1], eq("__name__", "c"))
			})
		}
	})
}

// requireChunksMatch requires the chunks of ChunkQuerier to be those of
// Prometheus's encoder over the samples of Querier, and not none.
func requireChunksMatch(t *testing.T, s *ks.Store, start, end int64, ms ...*labels.Matcher) {
	t.Helper()
	q, err := s.Querier(start, end)
	require.NoError(t, err)
	defer q.Close()
	want := collectChunks(t, storage.NewSeriesSetToChunkSet(q.Select(context.Background(), true, nil, ms...)))
	cq, err := s.ChunkQuerier(start, end)
	require.NoError(t, err)
	defer cq.Close()
	got := collectChunks(t, cq.Select(context.Background(), true, nil, ms...))
	require.NotEmpty(t, want)
	require.Equal(t, want, got)
}

// TestChunkQuerierSampleLimit: the chunked read counts samples against the
// query's limit as the sample read does.
func TestChunkQuerierSampleLimit(t *testing.T) {
	s := openStore(t, openPebble(t), ks.Options{})
	data := map[string][]sample{}
	for i := range 10 {
		ls := lbl("__name__", "lim", "i", fmt.Sprint(i))
		for k := range int64(300) {
			data[ls] = append(data[ls], sample{k * 1000, bits(float64(k))})
		}
	}
	write(t, s, data)
	for _, c := range []struct {
		limit int
		fails bool
	}{{3000, false}, {2999, true}} {
		cq, err := s.ChunkQuerier(0, hour)
		require.NoError(t, err)
		set := cq.Select(ks.WithSampleLimit(context.Background(), c.limit), true, nil, eq("__name__", "lim"))
		var err2 error
		var it chunks.Iterator
		n := 0
		for set.Next() {
			it = set.At().Iterator(it)
			for it.Next() {
				n += it.At().Chunk.NumSamples()
			}
			if err2 = it.Err(); err2 != nil {
				break
			}
		}
		require.NoError(t, cq.Close())
		if c.fails {
			require.ErrorIs(t, err2, ks.ErrTooManySamples, "limit %d", c.limit)
		} else {
			require.NoError(t, err2)
			require.Equal(t, 3000, n)
		}
	}
}
