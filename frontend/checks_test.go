package frontend

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// checkCounter counts the row_keys point reads that check kept listings.
type checkCounter struct {
	engine.Engine
	checks atomic.Int64
}

func (c *checkCounter) RowKeyExists(ctx context.Context, metric string, rowTime int64, dataType string, tags []codec.Tag) (bool, error) {
	c.checks.Add(1)
	return c.Engine.RowKeyExists(ctx, metric, rowTime, dataType, tags)
}

// TestPartsShareRowKeyChecks: the parts of one split query check each
// kept row_keys entry once between them, not once per part (issue #30's
// profile: a year's 15 parts checked every series and row again); and the
// next query checks again, so an entry deleted behind the adapter's back
// after one query is not used by the next.
func TestPartsShareRowKeyChecks(t *testing.T) {
	ctx := context.Background()
	pe, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pe.Close()) })
	eng := &checkCounter{Engine: pe}
	require.NoError(t, eng.Setup(ctx))
	// Rows of a day, parts of 6 hours: four parts read each row.
	store, err := kairosstore.Open(ctx, eng, kairosstore.Options{RowWidth: 24 * time.Hour, RowKeysCacheBytes: 64 << 20}, nil, nil)
	require.NoError(t, err)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	const series, days = 4, 4
	app := store.NewAppender()
	for i := range series {
		ls := labels.FromStrings("__name__", "x", "instance", fmt.Sprint("i", i))
		for ts := t0; ts.Before(t0.Add(days * 24 * time.Hour)); ts = ts.Add(10 * time.Minute) {
			_, err := app.Append(0, ls, ts.UnixMilli(), 1)
			require.NoError(t, err)
		}
	}
	require.NoError(t, app.Commit(ctx))
	f := New(queryAPI(store), Options{SplitInterval: 6 * time.Hour, Shards: 1}, prometheus.NewRegistry(), nil)
	form := rangeForm(`count(x)`, t0, t0.Add(days*24*time.Hour-time.Minute), time.Hour)
	noStore := http.Header{"Cache-Control": {"no-store"}}
	checks := func() int64 {
		before := eng.checks.Load()
		got := ask(t, f, form, noStore)
		require.Equal(t, http.StatusOK, got.code, got.body)
		return eng.checks.Load() - before
	}
	// The listings are kept from their second read on, built in the
	// background; then every entry (a series in a row) is checked once a
	// query: 16, where each of the 16 parts checking its row would be 64.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && checks() != series*days; {
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, int64(series*days), checks())

	// Another writer deletes the row_keys entry of i0 on day 2; the
	// adapter's kept listings still hold it.
	day2 := t0.Add(24 * time.Hour).UnixMilli()
	require.NoError(t, pe.Delete(ctx, &engine.Deletes{WriteTime: time.Now().UnixMilli(), RowKeys: []engine.IndexedRowKey{{
		Metric: "x", RowTime: store.Spec().RowTime(day2), DataType: codec.TypeDouble,
		Tags: []codec.Tag{{Name: "instance", Value: "i0"}},
	}}}))
	got := ask(t, f, form, noStore)
	require.Equal(t, http.StatusOK, got.code, got.body)
	m, err := parseAnswer([]byte(got.body))
	require.NoError(t, err)
	require.Len(t, m.series, 1)
	for _, p := range m.series[0].floats {
		want := fmt.Sprint(series)
		if p.t >= day2 && p.t < day2+24*3600*1000 {
			want = fmt.Sprint(series - 1)
		}
		require.Equal(t, want, strings.Trim(string(p.v), `"`), "count at %d", p.t)
	}
}
