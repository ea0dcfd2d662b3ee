package rollupjob_test

import (
	"context"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// TestSparseHistoryCostsWhatItHolds: history at Prometheus's minimum and
// maximum times and a sample a year before the rest (with NaN, ±Inf and
// 1e300 among the values), written without marks (as KairosDB or an
// adapter without the job writes), is backfilled in a few steps: the job
// goes from the rows that hold data to the next such row below, not
// through the 2.5·10^12 empty hours between them a span at a time. Every
// bucket is rollup.Compute's.
func TestSparseHistoryCostsWhatItHolds(t *testing.T) {
	engines(t, func(t *testing.T, open func(t *testing.T) engine.Engine) {
		clk := &clock{}
		clk.set(t0)
		data := testData()
		promMin := int64(math.MinInt64/1000+62135596801) * 1000 // -292273086-05-16T16:47:06Z
		promMax := int64(math.MaxInt64/1000-62135596801) * 1000 // 292277025-08-18T07:12:54Z
		far := series{ls: labels.FromStrings("__name__", "y", "job", "far")}
		for i, ts := range []int64{promMin, promMin + minute, 990*hour - 365*24*hour, 990*hour - 365*24*hour + 7*minute, promMax} {
			far.ts = append(far.ts, ts)
			far.vs = append(far.vs, []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, 2}[i])
		}
		data = append(data, far)
		eng := open(t)
		seed(t, eng, clk, data)
		n := newNode(t, eng, clk, "a")

		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		steps := 0
		for ; ; steps++ {
			require.Less(t, steps, 60, "the backfill walks the empty time between the rows")
			worked, err := n.job.Step(ctx)
			require.NoError(t, err)
			if !worked {
				break
			}
		}
		t.Logf("%d steps", steps)
		require.Equal(t, expected(data, 1000*hour), storedSince(t, n.store, promMin, "x", "y"))
		from, _, ok := done(t, n.store, m5)
		require.True(t, ok)
		require.LessOrEqual(t, from, promMin+5*minute, "backfilled down to the minimum time")
	})
}

// storedSince is stored from mint on, not from 0.
func storedSince(t *testing.T, st *kairosstore.Store, mint int64, metrics ...string) []string {
	t.Helper()
	q, err := st.Querier(mint, math.MaxInt64)
	require.NoError(t, err)
	defer q.Close()
	var out []string
	for _, m := range metrics {
		set := q.Select(t.Context(), true, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, m+rollup.NameSuffix))
		var it chunkenc.Iterator
		for set.Next() {
			it = set.At().Iterator(it)
			for it.Next() == chunkenc.ValFloat {
				ts, v := it.At()
				out = append(out, cell(set.At().Labels(), ts, v))
			}
			require.NoError(t, it.Err())
		}
		require.NoError(t, set.Err())
	}
	sort.Strings(out)
	return out
}
