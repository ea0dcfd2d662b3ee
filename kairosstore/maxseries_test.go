package kairosstore_test

import (
	"context"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
)

// TestMaxSeries: --query.max-series is enforced here, for every reader
// (remote read, with samples or chunks, and PromQL), before any series is
// returned, as a request the edges answer 400.
func TestMaxSeries(t *testing.T) {
	s := openStore(t, openPebble(t), ks.Options{MaxSeries: 1})
	write(t, s, map[string][]sample{
		"__name__\x01up\x02job\x01a": {{T: 1000, V: 1}},
		"__name__\x01up\x02job\x01b": {{T: 1000, V: 1}},
	})
	const want = "the query selects 2 series, more than the limit of 1 (--query.max-series)"
	up := labels.MustNewMatcher(labels.MatchEqual, "__name__", "up")
	ctx := context.Background()

	q, err := s.Querier(0, 2000)
	require.NoError(t, err)
	defer q.Close()
	ss := q.Select(ctx, true, nil, up)
	require.False(t, ss.Next())
	require.ErrorIs(t, ss.Err(), storeerr.ErrInvalid)
	require.EqualError(t, ss.Err(), want)

	cq, err := s.ChunkQuerier(0, 2000)
	require.NoError(t, err)
	defer cq.Close()
	var css storage.ChunkSeriesSet = cq.Select(ctx, true, nil, up)
	require.False(t, css.Next())
	require.ErrorIs(t, css.Err(), storeerr.ErrInvalid)
	require.EqualError(t, css.Err(), want)

	one := labels.MustNewMatcher(labels.MatchEqual, "job", "a")
	ss = q.Select(ctx, true, nil, up, one)
	require.True(t, ss.Next())
	require.False(t, ss.Next())
	require.NoError(t, ss.Err())
}
