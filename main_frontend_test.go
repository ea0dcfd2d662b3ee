package main

import (
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/config"
)

// TestFrontendOptionsZeroMeansNone: a flag whose 0 means "none" must not
// reach the frontend as 0, which the frontend reads as its default (a
// freshness of 0 became 10 minutes).
func TestFrontendOptionsZeroMeansNone(t *testing.T) {
	for _, tc := range []struct {
		args             []string
		split, freshness time.Duration
	}{
		{nil, 24 * time.Hour, 10 * time.Minute},
		{[]string{"--query.split-interval=0", "--query.results-cache-freshness=0"}, -1, -1},
		{[]string{"--query.split-interval=6h", "--query.results-cache-freshness=1m"}, 6 * time.Hour, time.Minute},
	} {
		cfg, err := config.Parse(kingpin.New("t", ""), tc.args)
		require.NoError(t, err)
		o := frontendOptions(cfg)
		require.Equal(t, tc.split, o.SplitInterval, tc.args)
		require.Equal(t, tc.freshness, o.CacheFreshness, tc.args)
		require.Zero(t, o.RowAlign, "embedded: parts of equal length, not aligned to rows")
	}
	cfg, err := config.Parse(kingpin.New("t", ""), []string{"--storage=cassandra", "--kairosdb.row-width=1w"})
	require.NoError(t, err)
	require.Equal(t, 7*24*time.Hour, frontendOptions(cfg).RowAlign, "Cassandra: parts aligned to its rows")
}
