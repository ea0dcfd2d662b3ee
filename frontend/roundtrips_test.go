package frontend

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// counted is an engine that counts the index reads of phase 2: row_keys
// listings and checks, by partition and entry.
type counted struct {
	engine.Engine
	mu       sync.Mutex
	listings int
	checks   int            // round trips that check entries
	entries  map[string]int // entry -> times checked
	parts    map[string]int // partition -> check round trips
}

func newCounted(e engine.Engine) *counted {
	c := &counted{Engine: e}
	c.reset()
	return c
}

func (c *counted) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listings, c.checks = 0, 0
	c.entries, c.parts = map[string]int{}, map[string]int{}
}

func (c *counted) RowKeys(ctx context.Context, metric string, rowTime int64, fn func(string, []codec.Tag) error) error {
	c.mu.Lock()
	c.listings++
	c.mu.Unlock()
	return c.Engine.RowKeys(ctx, metric, rowTime, fn)
}

func (c *counted) note(metric string, rowTime int64, dataType string, tags ...[]codec.Tag) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks++
	part := fmt.Sprintf("%s/%d", metric, rowTime)
	c.parts[part]++
	for _, t := range tags {
		c.entries[fmt.Sprintf("%s/%s/%v", part, dataType, t)]++
	}
}

func (c *counted) RowKeyExists(ctx context.Context, metric string, rowTime int64, dataType string, tags []codec.Tag) (bool, error) {
	c.note(metric, rowTime, dataType, tags)
	return c.Engine.RowKeyExists(ctx, metric, rowTime, dataType, tags)
}

// countedBatch is counted over an engine that checks a partition's entries
// in one read (cql.Engine.RowKeysExist).
type countedBatch struct {
	*counted
	b interface {
		RowKeysExist(context.Context, string, int64, string, [][]codec.Tag) ([]bool, error)
	}
}

func (c countedBatch) RowKeysExist(ctx context.Context, metric string, rowTime int64, dataType string, tags [][]codec.Tag) ([]bool, error) {
	c.note(metric, rowTime, dataType, tags...)
	return c.b.RowKeysExist(ctx, metric, rowTime, dataType, tags)
}

// roundTripEngines runs fn on the embedded engine and, when the test node is
// there (always under CI=true), on Cassandra; open opens a second handle on
// the same data where the engine allows one (Cassandra), else returns the
// same engine.
func roundTripEngines(t *testing.T, fn func(t *testing.T, eng engine.Engine, other func() engine.Engine)) {
	t.Run("pebble", func(t *testing.T) {
		eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, eng.Close()) })
		fn(t, eng, func() engine.Engine { return eng })
	})
	t.Run("cassandra", func(t *testing.T) {
		addr, keyspace := cassandratest.Keyspace(t)
		open := func() engine.Engine { return cassandratest.Engine(t, addr, keyspace) }
		fn(t, open(), open)
	})
}

// TestSplitQueryChecksEachRowKeyOnce: a range query the frontend splits
// into parts whose row windows overlap checks each kept row_keys entry
// once per query, and on Cassandra each partition's entries in one round
// trip, where every part used to check every entry of every row window it
// read again, one round trip each (BENCHMARKS.md, "Issue #30 on
// Cassandra: round trips"). A series another handle then deletes is gone
// from the next query: the memo is the query's only.
func TestSplitQueryChecksEachRowKeyOnce(t *testing.T) {
	roundTripEngines(t, func(t *testing.T, eng engine.Engine, other func() engine.Engine) {
		ctx := context.Background()
		require.NoError(t, eng.Setup(ctx))
		c := newCounted(eng)
		var wrapped engine.Engine = c
		if b, ok := eng.(interface {
			RowKeysExist(context.Context, string, int64, string, [][]codec.Tag) ([]bool, error)
		}); ok {
			wrapped = countedBatch{c, b}
		}
		store, err := kairosstore.Open(ctx, wrapped, kairosstore.Options{
			RowWidth: time.Hour, RowKeysCacheBytes: 64 << 20,
		}, nil, nil)
		require.NoError(t, err)

		// 5 series over 6 hours at 60 s: 6 row windows. The values are
		// the hostile ones a query must carry through.
		t0 := midnight.UnixMilli()
		values := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, -1e300}
		app := store.NewAppender()
		for s, v := range values {
			ls := labels.FromStrings("__name__", "rt_metric", "job", "j", "instance", strconv.Itoa(s))
			for i := range 6 * 60 {
				_, err := app.Append(0, ls, t0+int64(i)*60_000, v)
				require.NoError(t, err)
			}
		}
		require.NoError(t, app.Commit(ctx))

		f := New(queryAPI(store), Options{SplitInterval: time.Hour, Parallelism: 2}, prometheus.NewRegistry(), nil)
		form := rangeForm(`max_over_time(rt_metric[1h])`, midnight.Add(time.Hour), midnight.Add(6*time.Hour-time.Minute), 10*time.Minute)
		noStore := http.Header{"Cache-Control": {"no-store"}}
		query := func() int {
			t.Helper()
			a := ask(t, f, form, noStore)
			require.Equal(t, http.StatusOK, a.code, a.body)
			var body struct {
				Data struct{ Result []any }
			}
			require.NoError(t, json.Unmarshal([]byte(a.body), &body))
			return len(body.Data.Result)
		}
		// A partition is kept from its second listing on, built in the
		// background: query until no part lists any.
		kept := false
		for range 50 {
			c.reset()
			require.Equal(t, len(values), query())
			if c.listings == 0 {
				kept = true
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		require.True(t, kept, "the row_keys listings were never kept")
		c.reset()
		require.Equal(t, len(values), query())
		t.Logf("one query: %d check round trips over %d partitions, %d entries", c.checks, len(c.parts), len(c.entries))
		require.NotEmpty(t, c.entries)
		for e, n := range c.entries {
			require.Equal(t, 1, n, "entry %s checked %d times in one query", e, n)
		}
		if _, batch := wrapped.(countedBatch); batch {
			for p, n := range c.parts {
				require.Equal(t, 1, n, "partition %s: %d check round trips in one query", p, n)
			}
		}

		// The hostile extremes of a range: Prometheus's minimum to maximum
		// time at 300 years (a step Prometheus cannot parse) and at 290
		// (more than its 11,000 points), both refused; 290-year steps up
		// to the data, and a step of 1 ms. Each entry is still checked at
		// most once per query.
		year := 365.25 * 86400
		promMin := int64(math.MinInt64/1000+62135596801) * 1000     // -292273086-05-16T16:47:06Z
		promMax := int64(math.MaxInt64/1000-62135596801)*1000 + 999 // 292277025-08-18T07:12:54.999Z
		for _, tc := range []struct {
			start, end, step string
			code             int
		}{
			{formatTime(promMin), formatTime(promMax), strconv.FormatFloat(300*year, 'f', 0, 64), http.StatusBadRequest},
			{formatTime(promMin), formatTime(promMax), strconv.FormatFloat(290*year, 'f', 0, 64), http.StatusBadRequest},
			{formatTime(t0 + 6*hourMillis - 5*int64(290*year)*1000), formatTime(t0 + 6*hourMillis), strconv.FormatFloat(290*year, 'f', 0, 64), http.StatusOK},
			{formatTime(t0 + 3*hourMillis), formatTime(t0 + 3*hourMillis + 10_000), "0.001", http.StatusOK},
		} {
			c.reset()
			a := ask(t, f, url.Values{"query": {`max_over_time(rt_metric[1h])`}, "start": {tc.start}, "end": {tc.end}, "step": {tc.step}}, noStore)
			require.Equal(t, tc.code, a.code, "%+v: %s", tc, a.body)
			for e, n := range c.entries {
				require.Equal(t, 1, n, "%+v: entry %s checked %d times in one query", tc, e, n)
			}
		}

		// Another process deletes a series (its rows and row_keys entries)
		// behind the store's back: the next query does not answer it.
		o := other()
		require.NoError(t, o.Setup(ctx))
		victim := []codec.Tag{{Name: "instance", Value: "0"}, {Name: "job", Value: "j"}}
		del := &engine.Deletes{WriteTime: time.Now().UnixMicro()}
		for rt := t0; rt < t0+6*hourMillis; rt += hourMillis {
			del.RowKeys = append(del.RowKeys, engine.IndexedRowKey{Metric: "rt_metric", RowTime: rt, DataType: codec.TypeDouble, Tags: victim})
			del.Rows = append(del.Rows, codec.AppendRowKey(nil, codec.RowKey{Metric: "rt_metric", RowTime: rt, DataType: codec.TypeDouble, Tags: victim}))
		}
		require.NoError(t, o.Delete(ctx, del))
		a := ask(t, f, form, noStore)
		require.Equal(t, http.StatusOK, a.code, a.body)
		require.NotContains(t, a.body, `"instance":"0"`, "a series deleted behind the store's back was answered")
		require.Contains(t, a.body, `"instance":"1"`)
	})
}

const hourMillis = int64(time.Hour / time.Millisecond)
