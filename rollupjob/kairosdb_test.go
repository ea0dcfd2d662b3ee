package rollupjob_test

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/rollup"
	"github.com/kairos-remote/kairos-adapter/rollupjob"
)

// TestKairosDBReadsRollups: a rollup series is stored as KairosDB stores a
// series, so a stock KairosDB query for
// x_rollup{saved_from=x,rollup_resolution=5m,rollup_aggregate=max} finds
// it. There is no KairosDB binary on the test machine, so the test walks
// KairosDB's read (docs/kairosdb-layout.md §7) through CQL itself:
// string_index lists the name, row_key_time_index the row, row_keys the
// tags, and the data_points row, whose key the test builds byte by byte
// from §2.1, holds kairos_double values (§4.2) equal to what the adapter
// serves. The cells expire their resolution's retention after their
// bucket's end (TTL(value)); 1h cells, kept forever, have none.
func TestKairosDBReadsRollups(t *testing.T) {
	addr, keyspace := cassandratest.Keyspace(t)
	eng := openCassandra(t, addr, keyspace)

	// The data of the other tests, ending at the last whole hour of the
	// real clock: Cassandra counts TTLs from its own.
	now := time.Now().UnixMilli()
	shift := now - now%hour - 1000*hour
	clk := &clock{}
	clk.set(t0 + shift)
	data := testDataAt(shift)
	seed(t, eng, clk, data)
	const retention = 8760 * time.Hour
	n := newNode(t, eng, clk, "a", func(c *rollupjob.Config) {
		c.RawTTL = 720 * time.Hour
		c.Retention = map[rollup.Resolution]time.Duration{m5: retention, h1: 0}
	})
	n.run(t)
	end := 1000*hour + shift
	require.Equal(t, expected(data, end), stored(t, n.store, "x", "y"))

	s := cassandratest.Session(t, keyspace)
	var names []string
	it := s.Query(`SELECT column1 FROM string_index WHERE key = ?`, []byte("metric_names")).Iter()
	for name := ""; it.Scan(&name); {
		names = append(names, name)
	}
	require.NoError(t, it.Close())
	require.Subset(t, names, []string{"x", "x_rollup", "y", "y_rollup"})

	var rowTimes []int64
	it = s.Query(`SELECT row_time FROM row_key_time_index WHERE metric = ? AND table_name = 'data_points'`, "x_rollup").Iter()
	for rt := (time.Time{}); it.Scan(&rt); {
		rowTimes = append(rowTimes, rt.UnixMilli())
	}
	require.NoError(t, it.Close())
	require.NotEmpty(t, rowTimes)

	for _, tc := range []struct {
		res, agg string
		ttl      time.Duration
	}{{"5m", "max", retention}, {"1h", "counter", 0}, {"5m", "count", retention}} {
		raw := data[0] // x{job="a",kind="counter"}
		want := map[int64]float64{}
		r, err := rollup.ParseResolution(tc.res)
		require.NoError(t, err)
		for _, p := range rollup.Compute(r, math.MinInt64+1, end, raw.ts, raw.vs) {
			want[p.End] = p.Value(rollup.Aggregate(tc.agg))
		}
		served := map[int64]float64{}
		ls := rollup.SeriesLabels(raw.ls, r, rollup.Aggregate(tc.agg))
		for _, line := range stored(t, n.store, "x") {
			if rest, ok := strings.CutPrefix(line, ls.String()+" @"); ok {
				ts, v, _ := strings.Cut(rest, " ")
				served[parseInt(t, ts)] = parseFloat(t, v)
			}
		}
		require.Equal(t, want, served)

		got := map[int64]float64{}
		tags := map[string]string{"job": "a", "kind": "counter", "rollup_aggregate": tc.agg, "rollup_resolution": tc.res, "saved_from": "x"}
		for _, rt := range rowTimes {
			var entries []map[string]string
			it := s.Query(`SELECT tags FROM row_keys WHERE metric = 'x_rollup' AND table_name = 'data_points' AND row_time = ? AND data_type = 'kairos_double'`, time.UnixMilli(rt)).Iter()
			for e := map[string]string(nil); it.Scan(&e); e = nil {
				entries = append(entries, e)
			}
			require.NoError(t, it.Close())
			require.True(t, slices.ContainsFunc(entries, func(e map[string]string) bool { return mapsEqual(e, tags) }), "row_keys lists the series in row %d", rt)

			// §2.1: metric, 0x00, row time, 0x00, type length, type,
			// then the tags sorted by name, each name=value:.
			key := append([]byte("x_rollup"), 0)
			key = binary.BigEndian.AppendUint64(key, uint64(rt))
			key = append(key, 0, byte(len("kairos_double")))
			key = append(key, "kairos_double"...)
			key = append(key, "job=a:kind=counter:rollup_aggregate="+tc.agg+":rollup_resolution="+tc.res+":saved_from=x:"...)
			it = s.Query(`SELECT column1, value, TTL(value) FROM data_points WHERE key = ?`, key).Iter()
			var col, val []byte
			var ttl *int
			for it.Scan(&col, &val, &ttl) {
				ts := rt + int64(int32(binary.BigEndian.Uint32(col))) // §3.2, MILLISECONDS
				require.Len(t, val, 8)
				got[ts] = math.Float64frombits(binary.BigEndian.Uint64(val))
				if tc.ttl == 0 {
					require.Nil(t, ttl, "kept forever")
					continue
				}
				require.NotNil(t, ttl)
				// Counted by the job's clock, which Cassandra's runs ahead of by the
				// seconds since the write.
				left := time.Duration(ts+tc.ttl.Milliseconds()-clk.ms.Load()) * time.Millisecond
				require.InDelta(t, left.Seconds(), float64(*ttl), 120, "the cell expires %s after its bucket's end", tc.ttl)
			}
			require.NoError(t, it.Close())
		}
		require.Equal(t, served, got, "%s %s: KairosDB reads what the adapter serves", tc.res, tc.agg)
	}
}

func parseInt(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return v
}

func parseFloat(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err)
	return v
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
