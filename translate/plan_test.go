package translate

import (
	"slices"
	"strings"
	"testing"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"
)

func eq(n, v string) *labels.Matcher  { return labels.MustNewMatcher(labels.MatchEqual, n, v) }
func neq(n, v string) *labels.Matcher { return labels.MustNewMatcher(labels.MatchNotEqual, n, v) }
func re(n, v string) *labels.Matcher  { return labels.MustNewMatcher(labels.MatchRegexp, n, v) }
func nre(n, v string) *labels.Matcher { return labels.MustNewMatcher(labels.MatchNotRegexp, n, v) }

const name = model.MetricNameLabel

// corpus is the stored data the matcher test selects from.
func corpus() []labels.Labels {
	return []labels.Labels{
		labels.FromStrings(name, "up", "job", "api", "instance", "a:9090"),
		labels.FromStrings(name, "up", "job", "db", "instance", "b:9090"),
		labels.FromStrings(name, "up", "job", "api", "instance", "c:9090", "env", "prod"),
		labels.FromStrings(name, "up", "job", "api2"),
		labels.FromStrings(name, "up", "job", "API"),
		labels.FromStrings(name, "up"),
		labels.FromStrings(name, "foo"),
		labels.FromStrings(name, "foobar", "job", "api"),
		labels.FromStrings(name, "foo", "job", "apiserver"),
		labels.FromStrings(name, "foo", "job", "bar"),
		labels.FromStrings(name, "foo_bar", "env", "dev"),
		labels.FromStrings(name, "http_requests_total", "method", "GET", "code", "200", "job", "api"),
		labels.FromStrings(name, "http_requests_total", "method", "POST", "code", "500", "job", "api"),
		labels.FromStrings(name, "http_requests_total", "method", "get", "code", "404"),
		labels.FromStrings(name, "weird name with spaces", "label.with.dots", "x y"),
		labels.FromStrings(name, "multi\nline", "v", "a\nb"),
		labels.FromStrings(name, "multiXline", "v", "aXb"),
		labels.FromStrings(name, "é", "tag", "😀"),
		labels.FromStrings(name, "node_cpu", "cpu", "0", "mode", "idle"),
		labels.FromStrings(name, "node_cpu", "cpu", "1", "mode", "user"),
		labels.FromStrings(name, "node_cpu", "cpu", "10", "mode", "idle"),
		labels.FromStrings(name, "a", "b", "c"),
		labels.FromStrings(name, "b", "a", "c"),
		labels.FromStrings(name, "c", "c", "c"),
		labels.FromStrings(name, "colon:metric", "k", "v:w=x"),
		labels.FromStrings(name, "eq=name", "k=1", "v:1"),
		labels.FromStrings(name, "go_gc", "quantile", "0.5"),
		labels.FromStrings(name, "go_gc", "quantile", "0.99"),
		labels.FromStrings(name, "go_gc", "quantile", "0x5"),
		labels.FromStrings(name, "x", "job", "api", "env", "prod", "instance", "z"),
		labels.FromStrings(name, "longvalue", "v", strings.Repeat("x", 1000)),
	}
}

// matcherSets are the selectors of the matcher test; the comment says what
// each one is there to catch.
var matcherSets = [][]*labels.Matcher{
	{eq(name, "up")},
	{eq(name, "foo")},                       // not foobar
	{re(name, "foo")},                       // anchored: not foobar
	{re(name, "foo.*")},                     // prefix, not a finite set
	{re(name, "up|foo|a")},                  // finite set
	{neq(name, "up")},                       // negative on name
	{nre(name, "up|foo")},                   // negative regex on name
	{re(name, ".*")},                        // everything
	{re(name, ".+")},                        // everything
	{eq(name, "")},                          // nothing: names are never empty
	{re(name, "")},                          // nothing
	{re(name, "multi.line")},                // dot matches newline
	{re(name, "multi\nline")},               // literal newline
	{re(name, "é|foo")},                     // UTF-8 in a set
	{re(name, "up|foo"), neq(name, "foo")},  // two name matchers intersect
	{re(name, "up|foo"), re(name, "foo|a")}, // two finite sets intersect
	{eq(name, "up"), eq(name, "foo")},       // contradiction
	{eq(name, "up"), eq("job", "api")},      // the common case
	{eq(name, "up"), neq("job", "api")},     // includes the series without job
	{eq(name, "up"), re("job", "api|db")},   // tag set
	{eq(name, "up"), re("job", "api")},      // anchored: not api2
	{eq(name, "up"), re("job", "(?i)api")},  // case-insensitive: api and API
	{eq("job", "api")},                      // no name matcher
	{eq("job", "")},                         // series lacking job
	{neq("job", "")},                        // series having job
	{re("job", ".*")},                       // all, with or without job
	{re("job", ".+")},                       // having job
	{nre("job", ".+")},                      // lacking job
	{neq("job", "bar")},                     // includes those lacking job
	{re("job", "api|")},                     // api, or lacking job
	{re("job", "api|"), neq("job", "")},     // only api
	{eq("env", "prod"), eq("job", "api")},   // two tags
	{re("env", "prod|dev")},                 // tag set without name
	{nre("env", "prod|dev")},                // negative tag set
	{eq(name, "http_requests_total"), re("code", "5..")},
	{eq(name, "http_requests_total"), nre("code", "2..")},
	{re("method", "GET|get")},
	{re("method", "(?i)get")},
	{re("quantile", `0\.5|0\.99`)},          // escaped dots
	{re("quantile", "0.5")},                 // dot matches any char: 0.5 and 0x5
	{re("cpu", "1.*")},                      // 1 and 10
	{re("cpu", "1")},                        // not 10
	{re("v", "a.b")},                        // dot matches newline in a value
	{eq("k", "v:w=x")},                      // separators in a value
	{eq("k=1", "v:1")},                      // separators in a name
	{re("label.with.dots", "x .*")},         // spaces
	{eq("job", "api"), eq("job", "db")},     // contradiction on a tag
	{re("job", "api|db"), neq("job", "db")}, // tag sets intersect
	{re(name, "a|b|c"), eq("b", "c")},       // set on name and tag
	{eq("nonexistent", "")},                 // everything
	{eq("nonexistent", "x")},                // nothing, but not provably
	{eq("tag", "😀")},                        // UTF-8 value
	{re("v", "x{1000}")},                    // long value
	{re(name, "node_cpu"), eq("mode", "idle"), nre("cpu", "1.+")},
	{}, // no matchers at all
}

// selected runs the plan the way the store will: Empty, then Metrics and
// TagValues as narrowing, then the exact filters.
func selected(p Plan, metric string, tags []codec.Tag) bool {
	if p.Empty() {
		return false
	}
	if p.Metrics != nil && !slices.Contains(p.Metrics, metric) {
		return false
	}
	for n, vs := range p.TagValues {
		v := tagValue(tags, n)
		if !slices.Contains(vs, v) {
			return false
		}
	}
	return p.MatchName(metric) && p.MatchTags(tags)
}

func TestPlanMatchesPrometheus(t *testing.T) {
	for _, prefix := range []string{"", "prom_"} {
		m := Mapper{Prefix: prefix}
		for _, ms := range matcherSets {
			t.Run(prefix+selector(ms), func(t *testing.T) {
				p, err := m.Plan(ms)
				require.NoError(t, err)
				var want, got []string
				for _, ls := range corpus() {
					if matchesPrometheus(ms, ls) {
						want = append(want, ls.String())
					}
					metric, tags, err := m.Split(ls, nil)
					require.NoError(t, err)
					slices.Reverse(tags) // any order must do
					if selected(p, metric, tags) {
						got = append(got, ls.String())
					}
				}
				require.Equal(t, want, got)
				if p.Empty() {
					require.Empty(t, want)
				}
			})
		}
	}
}

// matchesPrometheus is Prometheus's own rule: every matcher against the
// label's value, "" when absent; and no matchers at all select nothing
// (tsdb.PostingsForMatchers intersects no postings lists).
func matchesPrometheus(ms []*labels.Matcher, ls labels.Labels) bool {
	if len(ms) == 0 {
		return false
	}
	for _, m := range ms {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

func selector(ms []*labels.Matcher) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.String()
	}
	return "{" + strings.Join(s, ",") + "}"
}

func TestPlanFields(t *testing.T) {
	for _, tc := range []struct {
		ms          []*labels.Matcher
		wantMetrics []string
		wantTags    map[string][]string
		wantEmpty   bool
	}{
		{ms: nil, wantEmpty: true},
		{ms: []*labels.Matcher{eq(name, "up")}, wantMetrics: []string{"p.up"}},
		{ms: []*labels.Matcher{re(name, "up|foo|up")}, wantMetrics: []string{"p.foo", "p.up"}},
		{ms: []*labels.Matcher{re(name, "up|foo"), neq(name, "foo")}, wantMetrics: []string{"p.up"}},
		{ms: []*labels.Matcher{neq(name, "foo"), re(name, "up|foo")}, wantMetrics: []string{"p.up"}},
		{ms: []*labels.Matcher{re(name, "up|")}, wantMetrics: []string{"p.up"}},
		{ms: []*labels.Matcher{re(name, "foo.*")}},
		{ms: []*labels.Matcher{re(name, "(?i)up")}},
		{ms: []*labels.Matcher{nre(name, "up|foo")}},
		{ms: []*labels.Matcher{eq(name, "")}, wantMetrics: []string{}, wantEmpty: true},
		{ms: []*labels.Matcher{eq(name, "a"), eq(name, "b")}, wantMetrics: []string{}, wantEmpty: true},
		{
			ms:          []*labels.Matcher{eq(name, "up"), eq("job", "api"), re("env", "prod|dev"), neq("x", "y")},
			wantMetrics: []string{"p.up"},
			wantTags:    map[string][]string{"job": {"api"}, "env": {"dev", "prod"}},
		},
		{ms: []*labels.Matcher{eq("job", "")}},
		{ms: []*labels.Matcher{re("job", "api|")}},
		{ms: []*labels.Matcher{re("job", "api|"), neq("job", "")}, wantTags: map[string][]string{"job": {"api"}}},
		{ms: []*labels.Matcher{re("job", "a|b"), nre("job", "b|c")}, wantTags: map[string][]string{"job": {"a"}}},
		{ms: []*labels.Matcher{eq("job", "a"), eq("job", "b")}, wantTags: map[string][]string{"job": {}}, wantEmpty: true},
		{ms: []*labels.Matcher{nre("job", "a|b")}},
		// No stored name or tag value is invalid UTF-8: Cassandra
		// refuses such a key with an error rather than an empty answer.
		{ms: []*labels.Matcher{eq(name, "\xff\xfe")}, wantMetrics: []string{}, wantEmpty: true},
		// Nor is any longer than a partition key may be.
		{ms: []*labels.Matcher{eq(name, strings.Repeat("x", 1<<20))}, wantMetrics: []string{}, wantEmpty: true},
		{ms: []*labels.Matcher{eq(name, "up"), eq("job", strings.Repeat("x", 1<<20))}, wantMetrics: []string{"p.up"}, wantTags: map[string][]string{"job": {}}, wantEmpty: true},
		{ms: []*labels.Matcher{re(name, "up|\xff")}, wantMetrics: []string{"p.up"}},
		{ms: []*labels.Matcher{eq(name, "up"), eq("job", "\xff")}, wantMetrics: []string{"p.up"}, wantTags: map[string][]string{"job": {}}, wantEmpty: true},
	} {
		t.Run(selector(tc.ms), func(t *testing.T) {
			p, err := Mapper{Prefix: "p."}.Plan(tc.ms)
			require.NoError(t, err)
			require.Equal(t, tc.wantMetrics, p.Metrics)
			require.Equal(t, tc.wantTags, p.TagValues)
			require.Equal(t, tc.wantEmpty, p.Empty())
		})
	}
}

func TestPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *labels.Matcher
	}{
		{"nil", nil},
		{"unknown type", &labels.Matcher{Type: 7, Name: "a", Value: "b"}},
		{"regex literal", &labels.Matcher{Type: labels.MatchRegexp, Name: "a", Value: "b.*"}},
		{"changed after NewMatcher", func() *labels.Matcher { m := re("a", "b"); m.Value = "c"; return m }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Mapper{}.Plan([]*labels.Matcher{eq(name, "up"), tc.m})
			require.ErrorIs(t, err, ErrInvalidMatcher)
		})
	}
}

func TestMatchNamePrefix(t *testing.T) {
	p, err := Mapper{Prefix: "p."}.Plan([]*labels.Matcher{re(name, ".*")})
	require.NoError(t, err)
	require.True(t, p.MatchName("p.up"))
	require.False(t, p.MatchName("up"), "not ours")
	require.False(t, p.MatchName("p."), "only the prefix")
}

// benchPlan is a typical dashboard selector over a ten-tag series.
func benchPlan(tb testing.TB) (Plan, []codec.Tag) {
	m := Mapper{}
	p, err := m.Plan([]*labels.Matcher{
		eq(name, "http_requests_total"),
		eq("job", "prometheus"),
		re("instance", "10\\.0\\..*"),
		neq("env", "dev"),
		re("code", "2..|3.."),
		eq("absent", ""),
	})
	require.NoError(tb, err)
	_, tags, err := m.Split(tenLabels(), nil)
	require.NoError(tb, err)
	slices.Reverse(tags)
	require.True(tb, p.MatchTags(tags))
	return p, tags
}

func TestMatchTagsDoesNotAllocate(t *testing.T) {
	p, tags := benchPlan(t)
	require.Zero(t, testing.AllocsPerRun(100, func() { p.MatchTags(tags) }))
}

func BenchmarkMatchTags(b *testing.B) {
	p, tags := benchPlan(b)
	b.ReportAllocs()
	for b.Loop() {
		p.MatchTags(tags)
	}
}
