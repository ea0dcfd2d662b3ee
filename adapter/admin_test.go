package adapter

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"
)

// deletingStore is the fake store with a Delete that records its calls.
type deletingStore struct {
	*fakeStore
	calls []deleteCall
	err   error
}

type deleteCall struct {
	start, end int64
	matchers   string
}

func (d *deletingStore) Delete(_ context.Context, start, end int64, ms ...*labels.Matcher) (int, error) {
	var parts []string
	for _, m := range ms {
		parts = append(parts, m.String())
	}
	d.calls = append(d.calls, deleteCall{start, end, strings.Join(parts, ",")})
	return 1, d.err
}

func TestDeleteSeries(t *testing.T) {
	post := func(h http.Handler, form url.Values) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/admin/tsdb/delete_series", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	t.Run("off by default", func(t *testing.T) {
		d := &deletingStore{fakeStore: newFakeStore()}
		h, _ := newTestHandler(t, d, Options{})
		rec := post(h, url.Values{"match[]": {`{job="x"}`}})
		require.Equal(t, http.StatusNotFound, rec.Code)
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
		{name: "bad selector deletes nothing", form: url.Values{"match[]": {`{job="x"}`, `{job=`}}, code: 400, msg: "invalid match[]"},
		// Prometheus refuses selectors that select everything; {} parses.
		{name: "empty selector deletes nothing", form: url.Values{"match[]": {`{}`}}, code: 400, msg: "match[] must contain at least one non-empty matcher"},
		{name: "match-all regex deletes nothing", form: url.Values{"match[]": {`{job=~".*"}`}}, code: 400, msg: "at least one non-empty matcher"},
		{name: "only empty-matching matchers delete nothing", form: url.Values{"match[]": {`{job=""}`, `{a!="x",b=~"|y"}`}}, code: 400, msg: "at least one non-empty matcher"},
		{name: "one empty selector among good ones deletes nothing", form: url.Values{"match[]": {`{job="x"}`, `{job=~".*"}`}}, code: 400, msg: `invalid match[] "{job=~\".*\"}"`},
		{name: "a non-empty matcher beside match-all ones is enough", form: url.Values{"match[]": {`{job=~".*",env=~".+"}`}}, code: 204, calls: []deleteCall{{math.MinInt64, math.MaxInt64, `job=~".*",env=~".+"`}}},
		{name: "bad time", form: url.Values{"match[]": {`{job="x"}`}, "start": {"yesterday"}}, code: 400, msg: "invalid start"},
		{name: "start after end", form: url.Values{"match[]": {`{job="x"}`}, "start": {"10"}, "end": {"5"}}, code: 400, msg: "start is after end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &deletingStore{fakeStore: newFakeStore()}
			h, _ := newTestHandler(t, d, Options{EnableAdminAPI: true})
			rec := post(h, tc.form)
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tc.msg)
			require.Equal(t, tc.calls, d.calls)
		})
	}
	t.Run("store failure is 5xx", func(t *testing.T) {
		d := &deletingStore{fakeStore: newFakeStore(), err: errors.New("cassandra down")}
		h, _ := newTestHandler(t, d, Options{EnableAdminAPI: true})
		rec := post(h, url.Values{"match[]": {`{job="x"}`}})
		require.Equal(t, http.StatusInternalServerError, rec.Code)
		require.Contains(t, rec.Body.String(), "cassandra down")
	})
}
