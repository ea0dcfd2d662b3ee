package main

import (
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/stretchr/testify/require"
)

func testShape() shape {
	return shape{
		series: 25, labels: 10, metrics: 4, samplesPerSeries: 3, seriesPerRequest: 10,
		concurrency: 1, requests: 6, intervalMs: 15000, startMs: 1_700_000_000_000,
	}
}

func TestSeriesLabelsDistinct(t *testing.T) {
	sh := testShape()
	sh.series, sh.labels = 5000, 15 // more labels than fillers
	seen := map[string]bool{}
	for _, ls := range sh.allLabels() {
		require.Equal(t, 15, ls.Len())
		require.True(t, ls.IsValid(model.LegacyValidation), ls.String())
		require.False(t, seen[ls.String()], "duplicate %s", ls)
		seen[ls.String()] = true
	}
}

// TestBuildV1RoundTrip decodes request 3 (round 1, the second chunk of
// series) as the adapter would, and checks labels, timestamps and values.
func TestBuildV1RoundTrip(t *testing.T) {
	sh := testShape()
	ls := sh.allLabels()
	body, samples := sh.buildV1(ls, 4)
	raw, err := snappy.Decode(nil, body)
	require.NoError(t, err)
	var req prompb.WriteRequest
	require.NoError(t, req.Unmarshal(raw))

	round, lo, hi := sh.span(4)
	require.Equal(t, 1, round)
	require.Equal(t, 10, lo)
	require.Equal(t, 20, hi)
	require.Len(t, req.Timeseries, hi-lo)
	require.Equal(t, (hi-lo)*sh.samplesPerSeries, samples)
	b := labels.NewScratchBuilder(0)
	for j, ts := range req.Timeseries {
		i := lo + j
		require.Equal(t, ls[i], ts.ToLabels(&b, nil))
		require.Len(t, ts.Samples, 3)
		for k, s := range ts.Samples {
			// Round 1 starts three scrapes after round 0.
			require.Equal(t, sh.startMs+int64(3+k)*15000, s.Timestamp)
			require.Equal(t, value(i, 3+k), s.Value)
		}
	}
}

func TestBuildV2RoundTrip(t *testing.T) {
	sh := testShape()
	ls := sh.allLabels()
	// Request 2 is the last, short chunk of round 0: series 20..24.
	body, samples := sh.buildV2(ls, 2)
	raw, err := snappy.Decode(nil, body)
	require.NoError(t, err)
	var req writev2.Request
	require.NoError(t, req.Unmarshal(raw))
	require.Len(t, req.Timeseries, 5)
	require.Equal(t, 15, samples)
	b := labels.NewScratchBuilder(0)
	for j, ts := range req.Timeseries {
		got, err := ts.ToLabels(&b, req.Symbols)
		require.NoError(t, err)
		require.Equal(t, ls[20+j], got)
		require.Equal(t, writev2.Metadata_METRIC_TYPE_GAUGE, ts.Metadata.Type)
		require.Equal(t, sh.startMs, ts.Samples[0].Timestamp)
		require.Equal(t, value(20+j, 2), ts.Samples[2].Value)
	}
}

// TestBuildDirectMatchesRequests checks the baseline writes one data_points
// cell per sample and index rows once per series row.
func TestBuildDirectMatchesRequests(t *testing.T) {
	sh := testShape()
	reqs, err := buildDirect(sh, "singles", 100)
	require.NoError(t, err)
	count := map[string]int{}
	samples := 0
	for _, r := range reqs {
		samples += r.samples
		for _, g := range r.groups {
			require.Len(t, g, 1)
			count[g[0].cql]++
		}
	}
	// 6 requests = 2 full rounds of 25 series × 3 samples, all in one row window.
	require.Equal(t, 150, samples)
	require.Equal(t, 150, count[insertDataPoint])
	require.Equal(t, 25, count[insertRowKey])
	require.Equal(t, 4, count[insertRowTime])
	require.Equal(t, 4, count[insertStringIndex])

	part, err := buildDirect(sh, "partition", 2)
	require.NoError(t, err)
	for _, r := range part {
		for _, g := range r.groups {
			require.LessOrEqual(t, len(g), 2)
			// One table and one partition key per batch (the first bound
			// value is the key, or its first column).
			for _, st := range g {
				require.Equal(t, g[0].cql, st.cql)
				require.Equal(t, g[0].args[0], st.args[0])
			}
		}
	}
}
