package frontend

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
	"github.com/kairos-remote/kairos-adapter/queryapi"
)

// TestHostileRangesAnswerAtOnce sends range queries between Prometheus's
// own minimum and maximum times, as text and as Unix seconds, at a step of
// 10 days: 2·10^10 evaluation times. The frontend counted them as
// (end-start)/step in int64 ms, which wrapped, and split such a range into
// a part per day; the query API's own check saturated at 292 years. Each
// is refused with Prometheus's 11,000-points answer at once. Times that are
// no finite number in the layout's range are refused naming the parameter.
func TestHostileRangesAnswerAtOnce(t *testing.T) {
	store := testStore(t, nil)
	writeTestData(t, store)
	f := New(queryAPI(store), Options{Shards: 2, CacheBytes: 64 << 20}, prometheus.NewRegistry(), nil)
	secs := func(t time.Time) string { return formatTime(t.UnixMilli()) }
	for _, c := range []struct {
		name, start, end, step, query, msg string
	}{
		{"bounds as text", timeparam.MinText, timeparam.MaxText, "864000", "http_requests_total", "exceeded maximum resolution of 11,000 points"},
		{"bounds in seconds", secs(timeparam.Min), secs(timeparam.Max), "864000", "http_requests_total", "exceeded maximum resolution of 11,000 points"},
		{"count_over_time 1y, bounds in seconds", secs(timeparam.Min), secs(timeparam.Max), "864000", "count_over_time(http_requests_total[1y])", "exceeded maximum resolution of 11,000 points"},
		{"sum of rate, 1 ms steps from the start", secs(timeparam.Min), secs(timeparam.Max), "0.001", "sum(rate(http_requests_total[5m]))", "exceeded maximum resolution of 11,000 points"},
		{"NaN start", "NaN", "1", "1", "http_requests_total", `invalid parameter \"start\": cannot parse \"NaN\"`},
		{"infinite end", "1", "Inf", "1", "http_requests_total", `invalid parameter \"end\": cannot parse \"Inf\"`},
		{"1e300 end", "1", "1e300", "1", "http_requests_total", `invalid parameter \"end\": cannot parse \"1e300\"`},
		{"-1e300 start", "-1e300", "1", "1", "http_requests_total", `invalid parameter \"start\": cannot parse \"-1e300\"`},
	} {
		form := url.Values{"query": {c.query}, "start": {c.start}, "end": {c.end}, "step": {c.step}, "timeout": {"3s"}}
		began := time.Now()
		got := ask(t, f, form, nil)
		took := time.Since(began)
		require.Equal(t, http.StatusBadRequest, got.code, "%s: %s", c.name, got.body)
		require.Contains(t, got.body, `"errorType":"bad_data"`, c.name)
		require.Contains(t, got.body, c.msg, c.name)
		require.Less(t, took, time.Second, c.name)
	}
}

// TestSplitPartsBounded: parts are counted before they are made, and the
// interval arithmetic holds at int64's ends.
func TestSplitPartsBounded(t *testing.T) {
	day := int64(24 * time.Hour / time.Millisecond)
	minMs, maxMs := timeparam.Min.UnixMilli(), timeparam.Max.UnixMilli()
	require.Len(t, splitParts(minMs, maxMs, 10*day, day), 1, "2·10^10 times: one part, which the query API refuses")
	require.Len(t, splitParts(minMs, maxMs, (maxMs/11_000)*2, day), 11_001)
	// The interval [2^62, 2^63) ends past int64's.
	require.Equal(t, []part{{index: 1, start: maxMs - 2*day, end: maxMs}}, splitParts(maxMs-2*day, maxMs, day, 1<<62))
	require.Equal(t, []part{{index: 0, start: 1<<62 - 1, end: 1<<62 - 1}, {index: 1, start: 1<<62 - 1 + day, end: 1<<62 - 1 + day}},
		splitParts(1<<62-1, 1<<62-1+day, day, 1<<62))
}

// TestPartsBoundedByMaxParts: a year at a day's interval is cut into at
// most MaxParts parts, each starting at a multiple of the day (so at UTC
// midnights), every evaluation time in exactly one part; a week keeps its
// days.
func TestPartsBoundedByMaxParts(t *testing.T) {
	day := int64(24 * time.Hour / time.Millisecond)
	step := 6 * int64(time.Hour/time.Millisecond)
	start := 1_700_006_400_000 / day * day
	for _, c := range []struct {
		end      int64
		maxParts int
		want     int // parts at most
		interval int64
	}{
		{start + 365*day, 16, 16, 27 * day},
		{start + 7*day, 16, 8, day},
		{start + 365*day, 3, 3, 365 * day},
		{start + 14*day, 16, 15, day},
		{start + 15*day, 16, 16, 2 * day},
	} {
		iv := partInterval(start, c.end, day, c.maxParts)
		require.Equal(t, c.interval, iv, "end %d, max %d", (c.end-start)/day, c.maxParts)
		parts := splitParts(start, c.end, step, iv)
		require.LessOrEqual(t, len(parts), c.want)
		next := start
		for _, p := range parts {
			require.Equal(t, next, p.start, "every time in one part")
			require.Zero(t, (p.start-start)%step)
			next = p.end + step
		}
		require.Equal(t, c.end+step, next)
	}
	// Prometheus's bounds: no overflow, and the query API's own check
	// refuses such a range.
	minMs, maxMs := timeparam.Min.UnixMilli(), timeparam.Max.UnixMilli()
	iv := partInterval(minMs, maxMs, day, 16)
	require.Positive(t, iv)
	require.LessOrEqual(t, len(splitParts(minMs, maxMs, (maxMs-minMs)/10_000, iv)), 16)
	require.Equal(t, int64(-1), partInterval(0, day, -1, 16), "splitting off stays off")
}

// TestMaxLengthIsTheQueryAPIs: the frontend takes the longest expression
// from the query API (--query.max-length), not from a copy of its
// default: raised, a query longer than the default is split and sharded
// like any other.
func TestMaxLengthIsTheQueryAPIs(t *testing.T) {
	store := testStore(t, nil)
	writeTestData(t, store)
	whole := queryAPIWith(store, queryapi.Options{Limits: queryapi.Limits{MaxLength: 1 << 20}})
	reg := prometheus.NewRegistry()
	f := New(whole, Options{SplitInterval: 30 * time.Minute, Shards: 2}, reg, nil)
	q := `sum(temperature{room!="` + strings.Repeat("x", 200<<10) + `"})`
	form := rangeForm(q, midnight.Add(-time.Hour), midnight.Add(time.Hour), time.Minute)
	want := ask(t, whole, form, nil)
	require.Equal(t, http.StatusOK, want.code, want.body)
	sameAnswer(t, "long query", want, ask(t, f, form, nil))
	require.Greater(t, counter(t, reg, "kairos_adapter_frontend_parts_evaluated_total", ""), 1.0)
}

// TestFanOutBounded: the parts of a query run on at most Parallelism
// goroutines, not one each (a query may have 11,000 parts), every part
// runs once, and after an error the parts left answer at once.
func TestFanOutBounded(t *testing.T) {
	f := New(panicking{}, Options{Parallelism: 3}, prometheus.NewRegistry(), nil)
	var mu sync.Mutex
	running, most, ran := 0, 0, map[int]int{}
	err := f.fanOut(context.Background(), 11_000, "a part", func(ctx context.Context, i int) *queryapi.Error {
		mu.Lock()
		running++
		most = max(most, running)
		ran[i]++
		mu.Unlock()
		time.Sleep(10 * time.Microsecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	})
	require.Nil(t, err)
	require.Len(t, ran, 11_000)
	for i, n := range ran {
		require.Equal(t, 1, n, "part %d", i)
	}
	require.LessOrEqual(t, most, 3)

	began := time.Now()
	err = f.fanOut(context.Background(), 11_000, "a part", func(ctx context.Context, i int) *queryapi.Error {
		if i == 5 {
			return queryapi.ErrorOf(errors.New("part 5 failed"))
		}
		select {
		case <-ctx.Done():
			return contextError(ctx)
		case <-time.After(10 * time.Millisecond):
			return nil
		}
	})
	require.NotNil(t, err)
	require.Contains(t, err.Error(), "part 5 failed")
	require.Less(t, time.Since(began), time.Second, "the parts after the error do not wait")
}

// slowParts takes 200 ms before each sub-query, within the sub-query's
// own deadline: parts that each finish in time, and together do not.
type slowParts struct{ queryapi.RangeHandler }

func (s slowParts) EvalRange(ctx context.Context, req queryapi.RangeRequest, convert func(promql.Matrix) any) (queryapi.RangeAnswer, *queryapi.Error) {
	time.Sleep(200 * time.Millisecond)
	return s.RangeHandler.EvalRange(ctx, req, convert)
}

// TestWholeQueryDeadline: a range query through the frontend is bounded
// as a whole, as Prometheus bounds one query, by the query API's timeout
// (--query.timeout) or the request's timeout parameter if shorter, not a
// deadline per part: 24 parts of 200 ms, one at a time, answered 200
// after 5 s with a timeout of 1 s (the bound was main.go's wrapper, which
// a frontend without it, as here, did not have).
func TestWholeQueryDeadline(t *testing.T) {
	store := testStore(t, nil)
	writeTestData(t, store)
	form := rangeForm("sum(http_requests_total)", midnight.Add(-2*time.Hour), midnight.Add(2*time.Hour), time.Minute)
	for _, c := range []struct {
		name       string
		apiTimeout time.Duration
		param      string
	}{
		{"--query.timeout 1s", time.Second, ""},
		{"timeout=1s under --query.timeout 1m", time.Minute, "1s"},
		{"timeout=1m over --query.timeout 1s", time.Second, "1m"},
	} {
		t.Run(c.name, func(t *testing.T) {
			inner := slowParts{queryAPIWith(store, queryapi.Options{Timeout: c.apiTimeout})}
			f := New(inner, Options{SplitInterval: 10 * time.Minute, MaxParts: 100, UncachedParts: 100, Parallelism: 1, Shards: 1}, prometheus.NewRegistry(), nil)
			form := maps.Clone(form)
			if c.param != "" {
				form.Set("timeout", c.param)
			}
			began := time.Now()
			got := ask(t, f, form, nil)
			took := time.Since(began)
			require.Equal(t, http.StatusServiceUnavailable, got.code, got.body)
			require.Contains(t, got.body, `"errorType":"timeout"`)
			require.Less(t, took, 1500*time.Millisecond)
		})
	}
}

// TestHostileTimeouts: the frontend reads the timeout parameter with the
// query API's parser and answers as the query API answers whole: a
// timeout that is no duration an int64 of nanoseconds holds is refused
// naming the parameter (Prometheus lets NaN through as whatever the
// conversion makes of it), one that has passed (0, -1) times out at once,
// as in Prometheus.
func TestHostileTimeouts(t *testing.T) {
	store := testStore(t, nil)
	writeTestData(t, store)
	whole := queryAPI(store)
	f := New(whole, Options{SplitInterval: 30 * time.Minute, Shards: 2, CacheBytes: 16 << 20, Now: func() time.Time { return midnight.Add(48 * time.Hour) }},
		prometheus.NewRegistry(), nil)
	for _, c := range []struct {
		timeout string
		code    int
		msg     string
	}{
		{"NaN", http.StatusBadRequest, `invalid parameter \"timeout\": cannot parse \"NaN\" to a valid duration`},
		{"1e300", http.StatusBadRequest, `invalid parameter \"timeout\": cannot parse \"1e300\" to a valid duration. It overflows int64`},
		{"-1e300", http.StatusBadRequest, `invalid parameter \"timeout\"`},
		{"Inf", http.StatusBadRequest, `invalid parameter \"timeout\"`},
		{"300y", http.StatusBadRequest, `invalid parameter \"timeout\": cannot parse \"300y\" to a valid duration`},
		{"soon", http.StatusBadRequest, `invalid parameter \"timeout\"`},
		{"-1", http.StatusServiceUnavailable, `"errorType":"timeout"`},
		{"0", http.StatusServiceUnavailable, `"errorType":"timeout"`},
		{"1ms", 0, ""}, // may or may not finish in time; either answer as the query API's
		{"292y", http.StatusOK, `"resultType":"matrix"`},
	} {
		form := rangeForm("sum by (job) (rate(http_requests_total[5m]))", midnight.Add(-2*time.Hour), midnight.Add(2*time.Hour), time.Minute)
		form.Set("timeout", c.timeout)
		want, got := ask(t, whole, form, nil), ask(t, f, form, nil)
		if c.code == 0 {
			fuzzSame(t, c.timeout, want, got)
			continue
		}
		require.Equal(t, c.code, got.code, "%s: %s", c.timeout, got.body)
		require.Contains(t, got.body, c.msg, c.timeout)
		if c.code == http.StatusServiceUnavailable {
			// Where it stopped, and so the message, may differ.
			fuzzSame(t, c.timeout, want, got)
			continue
		}
		sameAnswer(t, "timeout "+c.timeout, want, got)
	}
}
