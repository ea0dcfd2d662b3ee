package queryapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

func TestBracketDepth(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{`x`, 0},
		{`sum(rate(x{a="b"}[5m]))`, 3},
		{`((((1))))`, 4},
		{`x{a="((((("}`, 1},
		{`x{a='((\'(('}`, 1},
		{"x{a=`(\\`}", 1},
		{"x # ((((\n + (y)", 1},
		{`x{a="\"(("}`, 1},
		{`)))(`, 1},
		{strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300), 300},
	} {
		require.Equal(t, c.want, bracketDepth(c.in), c.in)
	}
}

func TestTreeDepth(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	for _, c := range []struct {
		in   string
		want int
	}{
		{`x`, 1},
		{`sum(rate(x[5m]))`, 4},
		{`a + b + c`, 3},
		{`(a)`, 2},
		{strings.Repeat("x+", 299) + "x", 300},
	} {
		e, err := p.ParseExpr(c.in)
		require.NoError(t, err)
		require.Equal(t, c.want, treeDepth(e, 1000), c.in)
	}
}

// TestSubqueryStepsAsTheEngineCounts: the count of a subquery's steps
// before evaluation is the count the engine evaluates, which
// count_over_time of a subquery over vector(1) answers.
func TestSubqueryStepsAsTheEngineCounts(t *testing.T) {
	api := New(newTestStore(t), Options{EvaluationInterval: 30 * time.Second}, nil, prometheus.NewRegistry())
	h := mount(api, http.NotFoundHandler())
	for _, c := range []struct {
		sub  string
		time string
	}{
		{`[1h:1m]`, "3600"},
		{`[1h:1m]`, "3599.5"},
		{`[10m:7s]`, "1000"},
		{`[5m:]`, "1000"},
		{`[1d:1h] offset 30m`, "100000"},
		{`[2h:5m] @ 1000`, "50000"},
	} {
		q := "count_over_time(vector(1)" + c.sub + ")"
		got := get(t, h, http.MethodGet, "/api/v1/query", url.Values{"query": {q}, "time": {c.time}})
		require.Equal(t, http.StatusOK, got.code, got.body)
		var r struct {
			Data struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal([]byte(got.body), &r))
		require.Len(t, r.Data.Result, 1, got.body)
		ts, err := parseTime(c.time)
		require.NoError(t, err)
		expr, err := api.parser.ParseExpr(q)
		require.NoError(t, err)
		expr, err = promqlPreprocess(expr, ts, ts, 0)
		require.NoError(t, err)
		steps := subquerySteps(expr, ts.UnixMilli(), ts.UnixMilli(), 1, api.evalInterval, 1<<40)
		require.Equal(t, r.Data.Result[0].Value[1], fmt.Sprint(steps), q)
	}
}

// TestExpressionLimits: what each limit refuses, before evaluation, in
// Prometheus's shape and naming the flag; and what every dashboard needs
// still passes.
func TestExpressionLimits(t *testing.T) {
	h := mount(New(newTestStore(t), Options{}, nil, prometheus.NewRegistry()), http.NotFoundHandler())
	for _, c := range []struct {
		path string
		form url.Values
		flag string // "" if accepted
	}{
		{"/api/v1/query", url.Values{"query": {`count_over_time(vector(1)[1y:1ms])`}}, "--query.max-subquery-steps"},
		{"/api/v1/query", url.Values{"query": {`rate(vector(1)[7d:1ms])`}}, "--query.max-subquery-steps"},
		{"/api/v1/query", url.Values{"query": {`max_over_time(max_over_time(vector(1)[1y:1m])[1y:1m])`}}, "--query.max-subquery-steps"},
		{"/api/v1/query", url.Values{"query": {`max_over_time(vector(1)[30d:1m])`}}, ""},
		{"/api/v1/query_range", url.Values{"query": {`max_over_time(vector(1)[30d:1m])`}, "start": {"0"}, "end": {"7776000"}, "step": {"3600"}}, ""},
		{"/api/v1/query_range", url.Values{"query": {`max_over_time(vector(1)[30d:1m])`}, "start": {"0"}, "end": {"66000000"}, "step": {"6000"}}, "--query.max-subquery-steps"},
		{"/api/v1/query", url.Values{"query": {strings.Repeat("(", 100_000) + "1" + strings.Repeat(")", 100_000)}}, "--query.max-length"},
		{"/api/v1/query", url.Values{"query": {strings.Repeat("(", 201) + "1" + strings.Repeat(")", 201)}}, "--query.max-depth"},
		{"/api/v1/query", url.Values{"query": {strings.Repeat("(", 199) + "1" + strings.Repeat(")", 199)}}, ""},
		{"/api/v1/query", url.Values{"query": {strings.Repeat("1+", 200) + "1"}}, "--query.max-depth"},
		{"/api/v1/format_query", url.Values{"query": {strings.Repeat("x+", 2400) + "x"}}, "--query.max-depth"},
		{"/api/v1/parse_query", url.Values{"query": {strings.Repeat("(", 300) + "x" + strings.Repeat(")", 300)}}, "--query.max-depth"},
		{"/api/v1/format_query", url.Values{"query": {strings.Repeat("x+", 150) + "x"}}, ""},
		{"/api/v1/query", url.Values{"query": {`label_replace(label_replace(vector(1), "a", "` + strings.Repeat("x", 60_000) + `", "", ""), "b", "` + strings.Repeat("$1", 20_000) + `", "a", "(.*)")`}}, "label_replace"},
		{"/api/v1/query", url.Values{"query": {`label_join(label_join(vector(1), "a", "", "b", "b", "b", "b", "b", "b", "b", "b", "b"), "c", "", "a", "a", "a", "a", "a", "a", "a", "a")`}}, "label_join"},
		{"/api/v1/query", url.Values{"query": {`label_join(label_replace(vector(1), "a", "$1-$1", "", ""), "c", "", "a", "a", "a", "a")`}}, ""},
		{"/api/v1/query_exemplars", url.Values{"query": {strings.Repeat("(", 300) + "x" + strings.Repeat(")", 300)}}, "--query.max-depth"},
	} {
		got := get(t, h, http.MethodPost, c.path, c.form)
		desc := c.path + " " + c.form.Get("query")[:min(60, len(c.form.Get("query")))]
		if c.flag == "" {
			require.Equal(t, http.StatusOK, got.code, "%s: %s", desc, got.body)
			continue
		}
		require.Equal(t, http.StatusBadRequest, got.code, "%s: %.300s", desc, got.body)
		var r response
		require.NoError(t, json.Unmarshal([]byte(got.body), &r))
		require.Equal(t, errBadData, r.ErrorType, desc)
		require.Contains(t, r.Error, c.flag, desc)
	}
}

var promqlPreprocess = promql.PreprocessExpr
