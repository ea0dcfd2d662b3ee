package frontend

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/queryapi"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// cacheHarness is a frontend with its cache over a real store whose change
// notices reach it, and a clock the test sets.
type cacheHarness struct {
	store *kairosstore.Store
	whole http.Handler
	front *Frontend
	reg   *prometheus.Registry
	now   atomic.Int64 // ms
	// ranges records the [start, end] of every sub-query.
	mu     sync.Mutex
	ranges [][2]string
}

func newCacheHarness(t *testing.T, opts Options) *cacheHarness {
	h := &cacheHarness{reg: prometheus.NewRegistry()}
	var onChange func([]kairosstore.Change)
	h.store = testStore(t, &onChange)
	writeTestData(t, h.store)
	whole := queryAPI(h.store)
	h.whole = whole
	recording := recordingInner{RangeHandler: whole, h: h}
	h.now.Store(midnight.Add(24 * time.Hour).UnixMilli())
	opts.Now = func() time.Time { return time.UnixMilli(h.now.Load()) }
	opts.CacheBytes = cmpOr(opts.CacheBytes, 64<<20)
	h.front = New(recording, opts, h.reg, nil)
	onChange = h.front.OnChange
	return h
}

// afterEval calls after once each sub-query has been evaluated.
type afterEval struct {
	Inner
	after func()
}

func (a afterEval) EvalRange(ctx context.Context, req queryapi.RangeRequest, convert func(promql.Matrix) any) (queryapi.RangeAnswer, *queryapi.Error) {
	defer a.after()
	return a.Inner.EvalRange(ctx, req, convert)
}

// recordingInner records the [start, end] of every sub-query.
type recordingInner struct {
	queryapi.RangeHandler
	h *cacheHarness
}

func (r recordingInner) EvalRange(ctx context.Context, req queryapi.RangeRequest, convert func(promql.Matrix) any) (queryapi.RangeAnswer, *queryapi.Error) {
	r.h.mu.Lock()
	r.h.ranges = append(r.h.ranges, [2]string{formatTime(req.Start.UnixMilli()), formatTime(req.End.UnixMilli())})
	r.h.mu.Unlock()
	return r.RangeHandler.EvalRange(ctx, req, convert)
}

func cmpOr(a, b int64) int64 {
	if a != 0 {
		return a
	}
	return b
}

func (h *cacheHarness) takeRanges() [][2]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.ranges
	h.ranges = nil
	return r
}

func (h *cacheHarness) append(t *testing.T, ls labels.Labels, ts time.Time, v float64) {
	t.Helper()
	app := h.store.NewAppender()
	_, err := app.Append(0, ls, ts.UnixMilli(), v)
	require.NoError(t, err)
	require.NoError(t, app.Commit(context.Background()))
}

// fresh requires the frontend's answer to be the whole query's now.
func (h *cacheHarness) fresh(t *testing.T, form url.Values) answer {
	t.Helper()
	got := ask(t, h.front, form, nil)
	sameAnswer(t, form.Encode(), ask(t, h.whole, form, nil), got)
	return got
}

func (h *cacheHarness) count(t *testing.T, name, label string) float64 {
	return counter(t, h.reg, "kairos_adapter_frontend_"+name, label)
}

func TestCacheWriteIntoCachedDayIsVisible(t *testing.T) {
	h := newCacheHarness(t, Options{Shards: 2})
	form := rangeForm(`sum by (job) (rate(http_requests_total[5m]))`, midnight.Add(-90*time.Minute), midnight.Add(90*time.Minute), time.Minute)
	first := h.fresh(t, form)
	require.Equal(t, first, h.fresh(t, form))
	require.Equal(t, 2.0, h.count(t, "cache_requests_total", "hit"), "the second query's two days come from the cache")

	// Another metric's write, even inside the cached times, keeps them.
	h.append(t, labels.FromStrings("__name__", "temperature", "job", "sensors", "room", "r9"), midnight.Add(-time.Hour), 20)
	require.Equal(t, first, h.fresh(t, form))
	require.Equal(t, 0.0, h.count(t, "cache_invalidations_total", "write"))
	require.Equal(t, 4.0, h.count(t, "cache_requests_total", "hit"))

	// A write of the metric into yesterday's part: that part goes, and
	// the next answer has it; today's part stays.
	h.append(t, labels.FromStrings("__name__", "http_requests_total", "job", "api", "instance", "z", "code", "200"), midnight.Add(-time.Hour), 1e6)
	h.append(t, labels.FromStrings("__name__", "http_requests_total", "job", "api", "instance", "z", "code", "200"), midnight.Add(-time.Hour+time.Minute), 2e6)
	require.Equal(t, 1.0, h.count(t, "cache_invalidations_total", "write"))
	h.takeRanges()
	second := h.fresh(t, form)
	require.NotEqual(t, first, second)
	require.Equal(t, 5.0, h.count(t, "cache_requests_total", "hit"), "today's part from the cache")
	for _, r := range h.takeRanges() {
		end, err := parseTime(r[1])
		require.NoError(t, err)
		require.Less(t, end, midnight.UnixMilli(), "only yesterday's part is evaluated again")
	}
}

func TestCacheDeleteIsVisible(t *testing.T) {
	h := newCacheHarness(t, Options{})
	form := rangeForm(`max(temperature)`, midnight.Add(-90*time.Minute), midnight.Add(90*time.Minute), time.Minute)
	first := h.fresh(t, form)
	_, err := h.store.Delete(context.Background(), midnight.Add(30*time.Minute).UnixMilli(), midnight.Add(40*time.Minute).UnixMilli(),
		labels.MustNewMatcher(labels.MatchEqual, "__name__", "temperature"))
	require.NoError(t, err)
	require.Equal(t, 1.0, h.count(t, "cache_invalidations_total", "delete"), "today's part only")
	require.NotEqual(t, first, h.fresh(t, form))
}

// TestCacheRefreshEvaluatesOnlyWhatIsMissing is a dashboard's refresh a
// minute later: only the minutes after the freshness window are evaluated.
func TestCacheRefreshEvaluatesOnlyWhatIsMissing(t *testing.T) {
	h := newCacheHarness(t, Options{})
	now := midnight.Add(100 * time.Minute)
	h.now.Store(now.UnixMilli())
	q := `sum(rate(http_requests_total[5m]))`
	h.fresh(t, rangeForm(q, now.Add(-3*time.Hour), now, time.Minute))
	h.takeRanges()
	now = now.Add(time.Minute)
	h.now.Store(now.UnixMilli())
	h.fresh(t, rangeForm(q, now.Add(-3*time.Hour), now, time.Minute))
	// Cached up to the last minute at least 10 minutes old: 11 minutes
	// are evaluated again (shards included).
	from := formatTime(now.Add(-10 * time.Minute).UnixMilli())
	for _, r := range h.takeRanges() {
		require.Equal(t, [2]string{from, formatTime(now.UnixMilli())}, r)
	}
	require.Equal(t, 1.0, h.count(t, "cache_requests_total", "hit"), "yesterday's part")
	require.Equal(t, 1.0, h.count(t, "cache_requests_total", "partial"), "today's")
}

// TestCacheFreshnessNone: a negative freshness (--query.results-cache-freshness=0)
// caches up to now, so a refresh a minute later evaluates that minute only.
func TestCacheFreshnessNone(t *testing.T) {
	h := newCacheHarness(t, Options{CacheFreshness: -1})
	now := midnight.Add(100 * time.Minute)
	h.now.Store(now.UnixMilli())
	q := `sum(rate(http_requests_total[5m]))`
	h.fresh(t, rangeForm(q, now.Add(-3*time.Hour), now, time.Minute))
	h.takeRanges()
	now = now.Add(time.Minute)
	h.now.Store(now.UnixMilli())
	h.fresh(t, rangeForm(q, now.Add(-3*time.Hour), now, time.Minute))
	ranges := h.takeRanges()
	require.NotEmpty(t, ranges)
	for _, r := range ranges {
		require.Equal(t, [2]string{formatTime(now.UnixMilli()), formatTime(now.UnixMilli())}, r)
	}
}

func TestCacheBypassTTLAndBound(t *testing.T) {
	h := newCacheHarness(t, Options{CacheTTL: time.Hour})
	form := rangeForm(`sum(temperature)`, midnight.Add(-90*time.Minute), midnight.Add(90*time.Minute), time.Minute)
	h.fresh(t, form)
	misses := h.count(t, "cache_requests_total", "miss")
	for _, f := range []func() answer{
		func() answer { return ask(t, h.front, form, http.Header{"Cache-Control": {"max-age=0, no-store"}}) },
		func() answer {
			f := url.Values{"nocache": {"1"}}
			for k, v := range form {
				f[k] = v
			}
			return ask(t, h.front, f, nil)
		},
	} {
		h.takeRanges()
		require.Equal(t, http.StatusOK, f().code)
		require.NotEmpty(t, h.takeRanges(), "evaluated")
	}
	require.Equal(t, 0.0, h.count(t, "cache_requests_total", "hit"))
	require.Equal(t, misses, h.count(t, "cache_requests_total", "miss"))

	h.now.Add((time.Hour + time.Second).Milliseconds())
	h.fresh(t, form)
	require.Equal(t, 2.0, h.count(t, "cache_invalidations_total", "ttl"))

	// A bound smaller than two queries' extents keeps the latest.
	held := h.count(t, "cache_bytes", "")
	require.Positive(t, held)
	small := newCacheHarness(t, Options{CacheBytes: int64(held * 1.5)})
	small.fresh(t, form)
	small.fresh(t, rangeForm(`sum(temperature) * 2`, midnight.Add(-90*time.Minute), midnight.Add(90*time.Minute), time.Minute))
	require.LessOrEqual(t, small.count(t, "cache_bytes", ""), held*1.5)
	require.Positive(t, small.count(t, "cache_invalidations_total", "evicted"))
}

// TestCacheChangeDuringEvaluation: a write that commits while a part is
// being evaluated keeps that part's answer out of the cache, since the
// answer may predate it.
func TestCacheChangeDuringEvaluation(t *testing.T) {
	h := newCacheHarness(t, Options{Shards: 1})
	var once sync.Once
	h.front.inner = afterEval{Inner: h.front.inner, after: func() {
		once.Do(func() {
			h.append(t, labels.FromStrings("__name__", "temperature", "job", "sensors", "room", "r1"), midnight.Add(-30*time.Minute+time.Second), 99)
		})
	}}
	form := rangeForm(`max(temperature)`, midnight.Add(-60*time.Minute), midnight.Add(-10*time.Minute), time.Minute)
	ask(t, h.front, form, nil)
	h.fresh(t, form)
	require.Equal(t, 0.0, h.count(t, "cache_requests_total", "hit"))
}

// TestConcurrentQueriesAndWrites runs queries of several dashboards while
// samples are written into the cached times; once the writes stop, every
// answer is the whole query's.
func TestConcurrentQueriesAndWrites(t *testing.T) {
	h := newCacheHarness(t, Options{SplitInterval: 30 * time.Minute, Shards: 3, Parallelism: 4})
	exprs := []string{`sum by (instance) (rate(http_requests_total[5m]))`, `avg(temperature)`, `max_over_time(temperature[10m])`, `count(info_meta)`}
	form := func(e string) url.Values {
		return rangeForm(e, midnight.Add(-2*time.Hour), midnight.Add(2*time.Hour), 30*time.Second)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				require.Equal(t, http.StatusOK, ask(t, h.front, form(exprs[i]), nil).code)
			}
		})
	}
	for i := range 40 {
		ts := midnight.Add(time.Duration(i-20) * 5 * time.Minute).Add(7 * time.Second)
		h.append(t, labels.FromStrings("__name__", "temperature", "job", "sensors", "room", "r1"), ts, float64(100+i))
		h.append(t, labels.FromStrings("__name__", "http_requests_total", "job", "api", "instance", "a", "code", "200"), ts, float64(i))
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for _, e := range exprs {
		h.fresh(t, form(e))
	}
	t.Logf("hits %v, partial %v, misses %v, invalidations %v", h.count(t, "cache_requests_total", "hit"), h.count(t, "cache_requests_total", "partial"),
		h.count(t, "cache_requests_total", "miss"), h.count(t, "cache_invalidations_total", "write"))
}

// TestFrontendAnswersAsWhole: the label that once carried the store's read
// plans is an ordinary one (an empty answer here, as in Prometheus), and
// malformed requests get the query API's own answer.
func TestFrontendAnswersAsWhole(t *testing.T) {
	h := newCacheHarness(t, Options{})
	old := rangeForm(`sum(temperature{__kairos_read__="shard=0/2"})`, midnight, midnight.Add(time.Hour), time.Minute)
	a := ask(t, h.front, old, nil)
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, ask(t, h.whole, old, nil), a)
	for _, f := range []url.Values{
		{"query": {"sum("}, "start": {"0"}, "end": {"60"}, "step": {"15"}},
		{"query": {"up"}, "start": {"x"}, "end": {"60"}, "step": {"15"}},
		{"query": {"up"}, "start": {"60"}, "end": {"0"}, "step": {"15"}},
		{"query": {"up"}, "start": {"0"}, "end": {"600000"}, "step": {"1"}},
	} {
		want := ask(t, h.whole, f, nil)
		require.Equal(t, want, ask(t, h.front, f, nil), fmt.Sprint(f))
	}
}

// TestCacheBytesMeasured holds the cache's own estimate of its memory
// (kairos_adapter_frontend_cache_bytes, what --query.results-cache-bytes
// bounds) to the heap its extents keep alive: within 25 %. The heap is
// measured as what dropping the extents frees, not as what filling them
// grew, since the store's own caches grow beside the cache while it fills.
// What the store's goroutines free meanwhile (its readers end a second
// after their last read) counts as freed too, so a fill and drop that
// measures outside the bound is tried again, up to three times: an
// estimate that is wrong is wrong every time.
func TestCacheBytesMeasured(t *testing.T) {
	h := newCacheHarness(t, Options{Shards: 1})
	form := func(i int) url.Values {
		return rangeForm(fmt.Sprintf(`http_requests_total * %d`, i), midnight.Add(-2*time.Hour), midnight.Add(2*time.Hour), 15*time.Second)
	}
	var ratios []float64
	for range 3 {
		for i := 1; i <= 30; i++ {
			require.Equal(t, http.StatusOK, ask(t, h.front, form(i), nil).code)
		}
		h.takeRanges()
		held := h.count(t, "cache_bytes", "")
		require.Positive(t, held)
		var filled, dropped runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&filled)
		h.front.OnChange([]kairosstore.Change{{Metric: "http_requests_total", MinT: math.MinInt64, MaxT: math.MaxInt64, Deleted: true}})
		runtime.GC()
		runtime.ReadMemStats(&dropped)
		require.Zero(t, h.count(t, "cache_bytes", ""), "the delete drops every extent")
		freed := float64(filled.HeapAlloc) - float64(dropped.HeapAlloc)
		t.Logf("cache_bytes held %.0f, dropping them freed %.0f of heap (%.2f)", held, freed, freed/held)
		if math.Abs(freed/held-1) <= 0.25 {
			return
		}
		ratios = append(ratios, freed/held)
	}
	t.Fatalf("freed/held %.2f in three fills, not within 25 %% of 1", ratios)
}

// TestCacheRollupWriteIsVisible: the rollup job rewriting a unit (after a
// late write or a restart) drops the cached answers of the raw metric
// around it, which max_source_resolution=auto reads from those rollups.
// Before, only answers naming the _rollup series went, and the others
// stayed stale for the cache's TTL.
func TestCacheRollupWriteIsVisible(t *testing.T) {
	h := newCacheHarness(t, Options{})
	form := rangeForm(`max(temperature)`, midnight.Add(-90*time.Minute), midnight.Add(90*time.Minute), time.Minute)
	h.fresh(t, form)
	app := h.store.NewAppender()
	app.SetDerived(0)
	ls := rollup.SeriesLabels(labels.FromStrings("__name__", "temperature", "job", "sensors", "room", "r1"), rollup.Resolution(time.Hour), rollup.Max)
	_, err := app.Append(0, ls, midnight.Add(2*time.Hour).UnixMilli(), 30) // its bucket holds the query's last hour
	require.NoError(t, err)
	require.NoError(t, app.Commit(context.Background()))
	// Both days' parts: the change is widened by a day, the largest
	// resolution a bucket can have.
	require.Equal(t, 2.0, h.count(t, "cache_invalidations_total", "write"))
}
