// Package promqltest holds PromQL expressions that several tests ask: the
// e2e comparison with a real Prometheus, and the query frontend's
// comparison of split and sharded answers with whole ones.
package promqltest

import "strings"

// ComplianceExprs are the kinds of query the PromQL compliance tester asks
// (scalar literals, selectors, every aggregation with every grouping, binary
// operators with scalars, vectors and matching, NaN and Inf, unary minus,
// the functions, label_replace's corner cases, subqueries), over this
// test's own data, each with the tester's variants expanded. shouldFail are
// those Prometheus refuses.
func ComplianceExprs() (exprs, shouldFail []string) {
	expand := func(tmpl string, vars map[string][]string) []string {
		out := []string{tmpl}
		for name, vals := range vars {
			var next []string
			for _, e := range out {
				if !strings.Contains(e, "{{"+name+"}}") {
					next = append(next, e)
					continue
				}
				for _, v := range vals {
					next = append(next, strings.ReplaceAll(e, "{{"+name+"}}", v))
				}
			}
			out = next
		}
		return out
	}
	vars := map[string][]string{
		"aggr":     {"sum", "avg", "max", "min", "count", "stddev", "stdvar", "group"},
		"topBot":   {"topk", "bottomk"},
		"binOp":    {"+", "-", "*", "/", "%", "^", "==", "!=", ">", "<", ">=", "<="},
		"compOp":   {"==", "!=", ">", "<", ">=", "<="},
		"arithOp":  {"+", "-", "*", "/", "%", "^"},
		"timeAggr": {"avg", "min", "max", "sum", "count", "last", "present", "stddev", "stdvar"},
		"range":    {"1m", "5m", "15m"},
		"math":     {"abs", "ceil", "floor", "exp", "sqrt", "ln", "log2", "log10", "round", "sgn"},
		"rateFunc": {"rate", "increase", "delta"},
		"instRate": {"irate", "idelta"},
		"dateFunc": {"day_of_month", "day_of_week", "day_of_year", "days_in_month", "hour", "minute", "month", "year"},
		"clamp":    {"clamp_min", "clamp_max"},
		"offset":   {"1m", "5m", "10m"},
		"q":        {"-0.5", "0.1", "0.5", "0.75", "0.95", "1", "1.5"},
	}
	for _, tmpl := range []string{
		`42`, `1.234`, `.123`, `1.23e-3`, `0x3d`, `Inf`, `+Inf`, `-Inf`, `NaN`,
		`temperature`, `{__name__="temperature"}`, `temperature{room="r1"}`, `temperature{room!="r1"}`,
		`temperature{room=~"r.*"}`, `temperature{room=~"r"}`, `temperature{room!~".*2"}`,
		`http_requests_total{code="200", instance!="a"}`, `{code="200", instance!="a"}`, `nonexistent_metric_name`,
		`temperature offset {{offset}}`, `temperature offset -{{offset}}`, `flaky_gauge`,
		`{{aggr}}(temperature)`, `{{aggr}}(nonexistent_metric_name)`, `{{aggr}} by () (http_requests_total)`,
		`{{aggr}} by (instance) (http_requests_total)`, `{{aggr}} by (instance, code) (http_requests_total)`,
		`{{aggr}} by (nonexistent) (http_requests_total)`, `{{aggr}} without () (http_requests_total)`,
		`{{aggr}} without (instance) (http_requests_total)`, `{{aggr}} without (instance, code) (http_requests_total)`,
		`{{aggr}} without (nonexistent) (http_requests_total)`,
		`{{topBot}} (3, http_requests_total)`, `{{topBot}} by (instance) (2, http_requests_total)`,
		`{{topBot}} without (instance) (2, http_requests_total)`, `{{topBot}} without () (2, http_requests_total)`,
		`quantile({{q}}, http_requests_total)`, `avg(max by (code) (http_requests_total))`,
		`1 * 2 + 4 / 6 - 10 % 2 ^ 2`, `info_meta + (1 {{compOp}} bool 2)`,
		`http_requests_total {{binOp}} 1.2345`, `http_requests_total {{compOp}} bool 1.2345`, `1.2345 {{compOp}} bool http_requests_total`,
		`0.12345 {{binOp}} http_requests_total`, `(1 * 2 + 4 / 6 - (10%7)^2) {{binOp}} http_requests_total`,
		`http_requests_total {{binOp}} (1 * 2 + 4 / 6 - 10)`, `timestamp(http_requests_total * 1)`, `timestamp(-http_requests_total)`,
		`http_requests_total {{binOp}} on (instance, job, code) http_requests_total`,
		`sum by (instance, code) (http_requests_total) {{binOp}} on (instance, code) group_left (job) http_requests_total`,
		`http_requests_total {{compOp}} bool on (instance, job, code) http_requests_total`,
		`http_requests_total / on (instance, job, code, __name__) http_requests_total`,
		`sum without (job) (http_requests_total) / on (instance, code) http_requests_total`,
		`sum without (job) (http_requests_total) / on (instance, code) group_left http_requests_total`,
		`sum without (job) (http_requests_total) / on (instance, code) group_left (job) http_requests_total`,
		`http_requests_total / on (instance, job) group_left info_meta`,
		`http_requests_total / on (instance, code, job, non_existent) http_requests_total`,
		`info_meta * Inf`, `info_meta * -Inf`, `info_meta * NaN`,
		`http_requests_total + -(1)`, `-http_requests_total`, `-1 ^ 2`,
		`1 {{arithOp}} time()`, `time() {{arithOp}} 1`, `time() {{compOp}} bool 1`, `1 {{compOp}} bool time()`,
		`time() {{arithOp}} time()`, `time() {{compOp}} bool time()`, `time() {{binOp}} http_requests_total`, `http_requests_total {{binOp}} time()`,
		`{{timeAggr}}_over_time(temperature[{{range}}])`, `quantile_over_time({{q}}, temperature[{{range}}])`,
		`timestamp(info_meta)`, `timestamp(timestamp(info_meta))`, `{{math}}(temperature)`, `{{math}}(-temperature)`,
		`{{rateFunc}}(nonexistent_metric[5m])`, `{{rateFunc}}(http_requests_total[{{range}}])`,
		`deriv(temperature[{{range}}])`, `predict_linear(temperature[{{range}}], 600)`, `time()`,
		`label_replace(info_meta, "job", "destination-value-$1", "instance", "(.*)")`,
		`label_replace(info_meta, "job", "destination-value-$1", "instance", "host:(.*)")`,
		`label_replace(info_meta, "job", "$1-$2", "version", "(.*)\\.(.*)")`,
		`label_replace(info_meta, "job", "value-$1", "nonexistent-src", "source-value-(.*)")`,
		`label_replace(info_meta, "job", "value-$1", "nonexistent-src", "(.*)")`,
		`label_replace(info_meta, "job", "value-$1", "instance", "non-matching-regex")`,
		`label_replace(info_meta, "job", "", "dst", ".*")`,
		`label_join(info_meta, "new_label", "-", "instance", "job")`, `label_join(info_meta, "job", "-", "instance", "job")`,
		`label_join(info_meta, "job", "-", "instance")`,
		`{{dateFunc}}()`, `{{dateFunc}}(temperature offset {{offset}})`,
		`{{instRate}}(http_requests_total[{{range}}])`, `{{clamp}}(temperature, 2)`,
		`clamp(temperature, 0, 1)`, `clamp(temperature, 0, 1000000000000)`, `clamp(temperature, 1000000000000, 0)`,
		`clamp(temperature, 1000000000000, 1000000000000)`,
		`resets(http_requests_total[{{range}}])`, `changes(flaky_gauge[{{range}}])`, `vector(1.23)`, `vector(time())`,
		`histogram_quantile({{q}}, rate(req_duration_seconds_bucket[1m]))`, `histogram_quantile(0.9, nonexistent_metric)`,
		`histogram_quantile(0.9, temperature)`, `histogram_quantile(0.9, {__name__=~"req_duration_seconds_.+"})`,
		`count_values("value", req_duration_seconds_bucket)`, `absent(temperature)`, `absent(nonexistent_metric_name)`,
		`max_over_time((time() - max(timestamp(flaky_gauge)) < 1000)[5m:10s] offset 5m)`,
		`avg_over_time(rate(http_requests_total[1m])[2m:10s])`,
	} {
		exprs = append(exprs, expand(tmpl, vars)...)
	}
	shouldFail = []string{
		`{__name__=~".*"}`,
		`label_replace(info_meta, "job", "value-$1", "src", "(.*")`,
		`label_replace(info_meta, "\xff", "", "src", "(.*)")`,
		`label_replace(temperature, "room", "", "", "")`,
		`label_join(info_meta, "\xff", "-", "instance")`,
	}
	return exprs, shouldFail
}
