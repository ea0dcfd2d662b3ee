package cql_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// TestCheckTTL: the probe agrees with a real write of a cell with the same
// TTL, and leaves no cell anyone can read. The test node (Cassandra 5.0 in
// its default storage_compatibility_mode) refuses expiries past 2038-01-19,
// so 15 years must be refused there; an hour never is.
func TestCheckTTL(t *testing.T) {
	e, session := newEngine(t)
	ctx := t.Context()
	const fifteenYears = int32(15 * 365 * 24 * 3600)
	for _, ttl := range []int32{0, 3600, fifteenYears} {
		probeErr := e.CheckTTL(ctx, ttl)
		writeErr := e.Write(ctx, &engine.Batch{WriteTime: time.Now().UnixMilli(), Cells: []engine.Cell{
			{Key: []byte("m\x00\x00\x00\x00\x00\x00\x00\x00\x00"), Column: 2, Value: []byte{1}, TTL: ttl},
		}})
		require.Equal(t, writeErr != nil, probeErr != nil, "ttl %d: probe %v, write %v", ttl, probeErr, writeErr)
		if ttl == fifteenYears {
			require.ErrorContains(t, probeErr, "2038-01-19")
		} else {
			require.NoError(t, probeErr)
		}
	}
	var n int
	require.NoError(t, session.Query(`SELECT count(*) FROM data_points WHERE key = ?`, []byte("\x00kairos-adapter: TTL probe")).Scan(&n))
	require.Zero(t, n, "the probe cell must be shadowed from the start")
}
