package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStatusFromEachPart runs the program on the embedded engine and reads
// /api/v1/status/adapter: every part answers with its own status, set from
// the flags it was given (the block cache's size, the kept listings' and
// the results cache's budgets in units), the store's layout once it is
// open, and the process's own figures.
func TestStatusFromEachPart(t *testing.T) {
	p := startRun(t, "--storage.path="+filepath.Join(t.TempDir(), "data"), "--storage.embedded-cache-bytes=24MiB",
		"--storage.embedded-commitlog-sync=periodic", "--storage.embedded-commitlog-sync-period=3s",
		"--kairosdb.row-keys-cache-bytes=3MiB", "--query.results-cache-bytes=5242880", "--kairosdb.row-width=2h", "--rollup.resolutions=")
	before := time.Now()
	resp, err := http.Get("http://" + p.addr + "/api/v1/status/adapter")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var body struct {
		Data struct {
			Config  string `json:"config"`
			Ready   bool   `json:"ready"`
			Runtime struct {
				StartTime     time.Time `json:"start_time"`
				ResidentBytes int64     `json:"resident_bytes"`
				HeapInuse     uint64    `json:"heap_inuse_bytes"`
				InFlight      float64   `json:"in_flight_requests"`
			} `json:"runtime"`
			Engine struct {
				Engine     string `json:"engine"`
				BlockCache struct {
					MaxBytes int64 `json:"max_bytes"`
				} `json:"block_cache"`
				CommitLogSync        string  `json:"commitlog_sync"`
				CommitLogSyncPeriodS float64 `json:"commitlog_sync_period_s"`
			} `json:"engine"`
			Store struct {
				RowWidth string `json:"row_width"`
				Listings struct {
					MaxBytes int64 `json:"max_bytes"`
				} `json:"row_keys_listings"`
			} `json:"store"`
			Adapter struct {
				Rejections map[string]float64 `json:"rejections"`
			} `json:"adapter"`
			Frontend struct {
				CacheMaxBytes int64 `json:"cache_max_bytes"`
			} `json:"frontend"`
			Rollups []any `json:"rollups"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	d := body.Data
	require.True(t, d.Ready)
	require.Contains(t, d.Config, "embedded_cache_bytes: 24MiB")
	require.Equal(t, "embedded", d.Engine.Engine)
	require.Equal(t, int64(24<<20), d.Engine.BlockCache.MaxBytes)
	require.Equal(t, "periodic", d.Engine.CommitLogSync, "the mode the store runs, not only the flag")
	require.Equal(t, 3.0, d.Engine.CommitLogSyncPeriodS)
	require.Contains(t, d.Config, "embedded_commitlog_sync: periodic")
	require.Equal(t, "2h", d.Store.RowWidth)
	require.Equal(t, int64(3<<20), d.Store.Listings.MaxBytes)
	require.Equal(t, int64(5<<20), d.Frontend.CacheMaxBytes)
	require.NotNil(t, d.Adapter.Rejections)
	require.Nil(t, d.Rollups, "the job is off")
	require.False(t, d.Runtime.StartTime.After(before))
	require.Positive(t, d.Runtime.ResidentBytes)
	require.Positive(t, d.Runtime.HeapInuse)
	require.Equal(t, 1.0, d.Runtime.InFlight, "this request")
	p.stop(t)
}
