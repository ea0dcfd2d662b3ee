package queryapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/stretchr/testify/require"
)

// adminStore is a store with metadata and a Delete that records its calls;
// it has no samples (its Querier is startingStore's).
type adminStore struct {
	startingStore
	meta    map[string][]metadata.Metadata
	metaErr error
	calls   []deleteCall
	err     error
}

type deleteCall struct {
	start, end int64
	matchers   string
}

func (s *adminStore) Metadata(_ context.Context, metric string, limit int) (map[string][]metadata.Metadata, error) {
	if s.metaErr != nil {
		return nil, s.metaErr
	}
	out := map[string][]metadata.Metadata{}
	for name, m := range s.meta {
		if metric == "" || metric == name {
			out[name] = m
		}
	}
	return out, nil
}

func (s *adminStore) Delete(_ context.Context, start, end int64, ms ...*labels.Matcher) (int, error) {
	var parts []string
	for _, m := range ms {
		parts = append(parts, m.String())
	}
	s.calls = append(s.calls, deleteCall{start, end, strings.Join(parts, ",")})
	return 1, s.err
}

func TestMetadataEndpoint(t *testing.T) {
	s := &adminStore{meta: map[string][]metadata.Metadata{
		"http_requests_total": {{Type: model.MetricTypeCounter, Help: "Requests."}},
		"latency_seconds":     {{Type: model.MetricTypeHistogram, Help: "Latency.", Unit: "seconds"}},
		"up":                  {{Type: model.MetricTypeGauge, Help: "Up."}},
	}}
	h := mount(New(s, Options{}, nil, prometheus.NewRegistry()), http.NotFoundHandler())

	got := get(t, h, http.MethodGet, "/api/v1/metadata", url.Values{"metric": {"up"}})
	require.Equal(t, http.StatusOK, got.code)
	require.JSONEq(t, `{"status":"success","data":{"up":[{"type":"gauge","help":"Up.","unit":""}]}}`, got.body)

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{query: "", want: []string{"http_requests_total", "latency_seconds", "up"}},
		{query: "?limit=-1", want: []string{"http_requests_total", "latency_seconds", "up"}},
		{query: "?limit=2", want: []string{"http_requests_total", "latency_seconds"}},
		{query: "?limit=0", want: nil},
		{query: "?metric=nope", want: nil},
	} {
		t.Run(tc.query, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/metadata"+tc.query, nil))
			require.Equal(t, http.StatusOK, rec.Code)
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			var resp struct {
				Status string                         `json:"status"`
				Data   map[string][]metadata.Metadata `json:"data"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
			require.Equal(t, "success", resp.Status)
			require.NotNil(t, resp.Data, "data is {} when empty, not null")
			var got []string
			for name := range resp.Data {
				got = append(got, name)
			}
			require.ElementsMatch(t, tc.want, got)
		})
	}

	got = get(t, h, http.MethodGet, "/api/v1/metadata", url.Values{"limit": {"abc"}})
	require.Equal(t, http.StatusBadRequest, got.code)
	require.JSONEq(t, `{"status":"error","errorType":"bad_data","error":"limit must be a number"}`, got.body)

	s.metaErr = errors.New("cassandra down")
	got = get(t, h, http.MethodGet, "/api/v1/metadata", nil)
	require.Equal(t, http.StatusInternalServerError, got.code)
	require.JSONEq(t, `{"status":"error","errorType":"internal","error":"cassandra down"}`, got.body)

	// On a mux without a catch-all, as the adapter's.
	mux := http.NewServeMux()
	New(s, Options{}, nil, prometheus.NewRegistry()).Register(func(pattern, _ string, h http.Handler) { mux.Handle(pattern, h) })
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/metadata", nil))
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code, "GET only, as in Prometheus")
	require.Equal(t, "GET, HEAD", rec.Header().Get("Allow"))
}

func TestDeleteSeries(t *testing.T) {
	post := func(h http.Handler, form url.Values) (int, string) {
		got := get(t, h, http.MethodPost, "/api/v1/admin/tsdb/delete_series", form)
		if got.code == http.StatusNoContent || got.code == http.StatusNotFound {
			require.NotContains(t, got.body, "{")
			return got.code, ""
		}
		var r response
		require.NoError(t, json.Unmarshal([]byte(got.body), &r), got.body)
		return got.code, r.Error
	}
	t.Run("off by default", func(t *testing.T) {
		d := &adminStore{}
		h := mount(New(d, Options{}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
		code, _ := post(h, url.Values{"match[]": {`{job="x"}`}})
		require.Equal(t, http.StatusNotFound, code)
		require.Empty(t, d.calls)
	})
	for _, tc := range []struct {
		name  string
		form  url.Values
		code  int
		msg   string
		calls []deleteCall
	}{
		{name: "all time", form: url.Values{"match[]": {`{job="x"}`}}, code: 204, calls: []deleteCall{{math.MinInt64, math.MaxInt64, `job="x"`}}},
		{name: "range and two selectors", form: url.Values{"match[]": {`up{job=~"a|b"}`, `{__name__="down"}`}, "start": {"1.5"}, "end": {"2024-01-01T00:00:00Z"}}, code: 204,
			calls: []deleteCall{{1500, 1704067200000, `job=~"a|b",__name__="up"`}, {1500, 1704067200000, `__name__="down"`}}},
		{name: "no selector", form: url.Values{}, code: 400, msg: "no match[] parameter"},
		{name: "an empty selector deletes nothing", form: url.Values{"match[]": {`{job="x"}`, ""}}, code: 400, msg: `invalid match[] ""`},
		{name: "bad selector deletes nothing", form: url.Values{"match[]": {`{job="x"}`, `{job=`}}, code: 400, msg: "invalid match[]"},
		// Prometheus refuses selectors that select everything; {} parses.
		{name: "empty selector deletes nothing", form: url.Values{"match[]": {`{}`}}, code: 400, msg: "match[] must contain at least one non-empty matcher"},
		{name: "match-all regex deletes nothing", form: url.Values{"match[]": {`{job=~".*"}`}}, code: 400, msg: "at least one non-empty matcher"},
		{name: "only empty-matching matchers delete nothing", form: url.Values{"match[]": {`{job=""}`, `{a!="x",b=~"|y"}`}}, code: 400, msg: "at least one non-empty matcher"},
		{name: "one empty selector among good ones deletes nothing", form: url.Values{"match[]": {`{job="x"}`, `{job=~".*"}`}}, code: 400, msg: `invalid match[] "{job=~\".*\"}"`},
		{name: "a non-empty matcher beside match-all ones is enough", form: url.Values{"match[]": {`{job=~".*",env=~".+"}`}}, code: 204, calls: []deleteCall{{math.MinInt64, math.MaxInt64, `job=~".*",env=~".+"`}}},
		{name: "bad time", form: url.Values{"match[]": {`{job="x"}`}, "start": {"yesterday"}}, code: 400, msg: `invalid parameter "start"`},
		{name: "start after end", form: url.Values{"match[]": {`{job="x"}`}, "start": {"10"}, "end": {"5"}}, code: 400, msg: "start is after end"},
		{name: "start=NaN deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {"NaN"}}, code: 400, msg: `invalid parameter "start": cannot parse`},
		{name: "start=nan deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {"nan"}}, code: 400, msg: `invalid parameter "start": cannot parse`},
		{name: "start=+Inf deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {"+Inf"}}, code: 400, msg: `invalid parameter "start": cannot parse`},
		{name: "start=-Inf deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {"-Inf"}}, code: 400, msg: `invalid parameter "start": cannot parse`},
		{name: "start=inf deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {"inf"}}, code: 400, msg: `invalid parameter "start": cannot parse`},
		{name: "start=1e300 deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {"1e300"}}, code: 400, msg: `invalid parameter "start": cannot parse`},
		{name: "start=-1e300 deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {"-1e300"}}, code: 400, msg: `invalid parameter "start": cannot parse`},
		{name: "start=1e999 deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {"1e999"}}, code: 400, msg: `invalid parameter "start": cannot parse`},
		{name: "start=9223372036854775807 deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {"9223372036854775807"}}, code: 400, msg: `invalid parameter "start": cannot parse`},
		{name: "start=-9223309901257975 deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {"-9223309901257975"}}, code: 400, msg: `invalid parameter "start": cannot parse`},
		{name: "empty start deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {""}}, code: 400, msg: `invalid parameter "start": empty`},
		{name: "start twice deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "start": {"10", "NaN"}}, code: 400, msg: `invalid parameter "start": given 2 times`},
		{name: "end=NaN deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {"NaN"}}, code: 400, msg: `invalid parameter "end": cannot parse`},
		{name: "end=nan deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {"nan"}}, code: 400, msg: `invalid parameter "end": cannot parse`},
		{name: "end=+Inf deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {"+Inf"}}, code: 400, msg: `invalid parameter "end": cannot parse`},
		{name: "end=-Inf deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {"-Inf"}}, code: 400, msg: `invalid parameter "end": cannot parse`},
		{name: "end=inf deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {"inf"}}, code: 400, msg: `invalid parameter "end": cannot parse`},
		{name: "end=1e300 deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {"1e300"}}, code: 400, msg: `invalid parameter "end": cannot parse`},
		{name: "end=-1e300 deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {"-1e300"}}, code: 400, msg: `invalid parameter "end": cannot parse`},
		{name: "end=1e999 deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {"1e999"}}, code: 400, msg: `invalid parameter "end": cannot parse`},
		{name: "end=9223372036854775807 deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {"9223372036854775807"}}, code: 400, msg: `invalid parameter "end": cannot parse`},
		{name: "end=-9223309901257975 deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {"-9223309901257975"}}, code: 400, msg: `invalid parameter "end": cannot parse`},
		{name: "empty end deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {""}}, code: 400, msg: `invalid parameter "end": empty`},
		{name: "end twice deletes nothing", form: url.Values{"match[]": {`{job="x"}`}, "end": {"10", "NaN"}}, code: 400, msg: `invalid parameter "end": given 2 times`},
		{name: "-0 is the epoch", form: url.Values{"match[]": {`{job="x"}`}, "start": {"-0"}, "end": {"-0"}}, code: 204, calls: []deleteCall{{0, 0, `job="x"`}}},
		{name: "Prometheus's bounds as text", form: url.Values{"match[]": {`{job="x"}`}, "start": {minTimeText}, "end": {maxTimeText}}, code: 204,
			calls: []deleteCall{{minTime.UnixMilli(), maxTime.UnixMilli(), `job="x"`}}},
		{name: "Prometheus's bounds in seconds", form: url.Values{"match[]": {`{job="x"}`}, "start": {"-9223309901257974"}, "end": {"9223309901257974"}}, code: 204,
			calls: []deleteCall{{minTime.UnixMilli(), 9223309901257974000, `job="x"`}}},
		// Nanoseconds are rounded inward: the sample at 1000 ms is before
		// a start of 1000.0004 ms and stays; seconds are rounded to the ms
		// as Prometheus rounds them.
		{name: "sub-millisecond times round inward", form: url.Values{"match[]": {`{job="x"}`}, "start": {"1970-01-01T00:00:01.0000004Z"}, "end": {"1970-01-01T00:00:02.0009999Z"}}, code: 204,
			calls: []deleteCall{{1001, 2000, `job="x"`}}},
		{name: "negative sub-millisecond times round inward", form: url.Values{"match[]": {`{job="x"}`}, "start": {"1969-12-31T23:59:58.9990001Z"}, "end": {"1969-12-31T23:59:59.0010001Z"}}, code: 204,
			calls: []deleteCall{{-1000, -999, `job="x"`}}},
		{name: "fractional seconds", form: url.Values{"match[]": {`{job="x"}`}, "start": {"1.0004"}, "end": {"2.0006"}}, code: 204, calls: []deleteCall{{1000, 2001, `job="x"`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &adminStore{}
			h := mount(New(d, Options{EnableAdminAPI: true}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
			code, msg := post(h, tc.form)
			require.Equal(t, tc.code, code, msg)
			require.Contains(t, msg, tc.msg)
			require.Equal(t, tc.calls, d.calls)
		})
	}
	t.Run("store failure is 5xx", func(t *testing.T) {
		d := &adminStore{err: errors.New("cassandra down")}
		h := mount(New(d, Options{EnableAdminAPI: true}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
		code, msg := post(h, url.Values{"match[]": {`{job="x"}`}})
		require.Equal(t, http.StatusInternalServerError, code)
		require.Contains(t, msg, "cassandra down")
	})
}

// recorder is a Recomputer that records its calls.
type recorder struct {
	calls []string
}

func (r *recorder) Recompute(_ context.Context, selectors [][]*labels.Matcher, start, end int64) ([]string, error) {
	var sets []string
	for _, ms := range selectors {
		var parts []string
		for _, m := range ms {
			parts = append(parts, m.String())
		}
		sets = append(sets, "{"+strings.Join(parts, ",")+"}")
	}
	r.calls = append(r.calls, fmt.Sprintf("%s %d %d", strings.Join(sets, " "), start, end))
	return []string{}, nil
}

// TestRecomputeTimes: the rollup recomputation reads its range as strictly
// as delete_series, and a refused call marks nothing; on 4f4fb57 start=NaN
// marked every unit.
func TestRecomputeTimes(t *testing.T) {
	for _, tc := range []struct {
		name string
		form url.Values
		code int
		msg  string
		call string
	}{
		{name: "every metric, all time", form: url.Values{}, code: 200, call: fmt.Sprintf("{} %d %d", int64(math.MinInt64), int64(math.MaxInt64))},
		{name: "a range", form: url.Values{"match[]": {"x"}, "start": {"1"}, "end": {"2024-01-01T00:00:00Z"}}, code: 200, call: `{__name__="x"} 1000 1704067200000`},
		{name: "NaN start", form: url.Values{"match[]": {"x"}, "start": {"NaN"}}, code: 400, msg: `invalid parameter "start": cannot parse "NaN" to a valid timestamp: not a finite number`},
		{name: "infinite end", form: url.Values{"end": {"+Inf"}}, code: 400, msg: `invalid parameter "end": cannot parse "+Inf"`},
		{name: "1e300 start", form: url.Values{"start": {"1e300"}}, code: 400, msg: `invalid parameter "start": cannot parse "1e300"`},
		{name: "empty end", form: url.Values{"end": {""}}, code: 400, msg: `invalid parameter "end": empty`},
		{name: "start twice", form: url.Values{"start": {"1", "2"}}, code: 400, msg: `invalid parameter "start": given 2 times`},
		{name: "empty selector", form: url.Values{"match[]": {""}}, code: 400, msg: `invalid match[] ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			h := mount(New(&adminStore{}, Options{EnableAdminAPI: true, Rollups: func() Recomputer { return rec }}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
			got := get(t, h, http.MethodPost, "/api/v1/admin/rollups/recompute", tc.form)
			require.Equal(t, tc.code, got.code, got.body)
			var r response
			require.NoError(t, json.Unmarshal([]byte(got.body), &r), got.body)
			require.Contains(t, r.Error, tc.msg)
			if tc.call == "" {
				require.Empty(t, rec.calls)
			} else {
				require.Equal(t, []string{tc.call}, rec.calls)
			}
		})
	}
	// A body that fails to parse is refused whole: without its match[],
	// the call would mark every metric.
	rec := &recorder{}
	h := mount(New(&adminStore{}, Options{EnableAdminAPI: true, Rollups: func() Recomputer { return rec }}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
	req := httptest.NewRequest(http.MethodPost, "/api/v1/admin/rollups/recompute", strings.NewReader("start=1&match[]=%zz"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	require.Empty(t, rec.calls)
}
