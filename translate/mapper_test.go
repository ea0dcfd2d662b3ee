package translate

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"
)

// inOrder builds a label set keeping the given order, so tests can feed
// Split unsorted or duplicated labels like a careless sender would.
func inOrder(pairs ...string) labels.Labels {
	b := labels.NewScratchBuilder(len(pairs) / 2)
	for i := 0; i < len(pairs); i += 2 {
		b.Add(pairs[i], pairs[i+1])
	}
	return b.Labels()
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		prefix     string
		in         labels.Labels
		wantMetric string
		wantTags   []codec.Tag
	}{
		{
			name:       "plain",
			in:         labels.FromStrings("__name__", "up", "job", "api", "instance", "a:9090"),
			wantMetric: "up",
			wantTags:   []codec.Tag{{Name: "instance", Value: "a:9090"}, {Name: "job", Value: "api"}},
		},
		{
			name:       "prefix",
			prefix:     "prom.",
			in:         labels.FromStrings("__name__", "up", "job", "api"),
			wantMetric: "prom.up",
			wantTags:   []codec.Tag{{Name: "job", Value: "api"}},
		},
		{
			name:       "tagless",
			in:         labels.FromStrings("__name__", "up"),
			wantMetric: "up",
		},
		{
			name:       "unusual characters are not escaped here",
			in:         labels.FromStrings("__name__", "a b:c=d\né", "k:=", "v=:\n\t 😀", "\uffff", "\U0001F600"),
			wantMetric: "a b:c=d\né",
			wantTags:   []codec.Tag{{Name: "k:=", Value: "v=:\n\t 😀"}, {Name: "\uffff", Value: "\U0001F600"}},
		},
		{
			name:       "NUL in a tag is harmless",
			in:         labels.FromStrings("__name__", "up", "a\x00", "b\x00c"),
			wantMetric: "up",
			wantTags:   []codec.Tag{{Name: "a\x00", Value: "b\x00c"}},
		},
		{
			name:       "unsorted input gives sorted tags",
			in:         inOrder("job", "api", "__name__", "up", "a", "1"),
			wantMetric: "up",
			wantTags:   []codec.Tag{{Name: "a", Value: "1"}, {Name: "job", Value: "api"}},
		},
		{
			name:       "longest value that fits",
			in:         labels.FromStrings("__name__", "m", "n", strings.Repeat("x", MaxKeyBytes-142)),
			wantMetric: "m",
			wantTags:   []codec.Tag{{Name: "n", Value: strings.Repeat("x", MaxKeyBytes-142)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			metric, tags, err := Mapper{Prefix: tc.prefix}.Split(tc.in, nil)
			require.NoError(t, err)
			require.Equal(t, tc.wantMetric, metric)
			require.Equal(t, len(tc.wantTags), len(tags))
			if len(tc.wantTags) > 0 {
				require.Equal(t, tc.wantTags, tags)
			}
		})
	}
}

func TestSplitReusesDst(t *testing.T) {
	dst := make([]codec.Tag, 3, 8)
	_, tags, err := Mapper{}.Split(labels.FromStrings("__name__", "up", "a", "1"), dst)
	require.NoError(t, err)
	require.Equal(t, []codec.Tag{{Name: "a", Value: "1"}}, tags)
	require.Same(t, &dst[0], &tags[0])
}

func TestSplitErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prefix  string
		in      labels.Labels
		want    error
		mention string // must appear in the message
	}{
		{"no name", "", labels.FromStrings("job", "api"), ErrMissingName, `job="api"`},
		{"no labels", "", labels.EmptyLabels(), ErrMissingName, "{}"},
		{"empty name value", "", inOrder("__name__", "", "job", "api"), ErrMissingName, `job="api"`},
		{"empty label name", "", inOrder("", "x", "__name__", "up"), ErrEmptyLabelName, "up"},
		{"empty label value", "", inOrder("__name__", "up", "job", ""), ErrEmptyLabelValue, `"job"`},
		{"invalid UTF-8 value", "", labels.FromStrings("__name__", "up", "job", "a\xffb"), ErrInvalidUTF8, `"job"`},
		{"invalid UTF-8 name", "", labels.FromStrings("__name__", "up", "j\xc3", "a"), ErrInvalidUTF8, "up"},
		{"invalid UTF-8 metric", "", labels.FromStrings("__name__", "u\xffp"), ErrInvalidUTF8, "__name__"},
		{"duplicate sorted", "", inOrder("__name__", "up", "a", "1", "a", "2"), ErrDuplicateLabel, `"a"`},
		{"duplicate unsorted", "", inOrder("b", "1", "a", "1", "__name__", "up", "b", "2"), ErrDuplicateLabel, `"b"`},
		{"duplicate name unsorted", "", inOrder("__name__", "x", "a", "1", "__name__", "y"), ErrDuplicateLabel, "__name__"},
		{"NUL in metric", "", labels.FromStrings("__name__", "u\x00p"), ErrNULInMetric, "__name__"},
		{"NUL in prefix", "p\x00", labels.FromStrings("__name__", "up"), ErrNULInMetric, "up"},
		{"value too long", "", labels.FromStrings("__name__", "m", "n", strings.Repeat("x", MaxKeyBytes-141)), ErrSeriesTooLong, "65536 bytes"},
		{"escapes count", "", labels.FromStrings("__name__", "m", "n", strings.Repeat(":", 32697)), ErrSeriesTooLong, "…"},
		{"prefix counts", "p", labels.FromStrings("__name__", "m", "n", strings.Repeat("x", MaxKeyBytes-142)), ErrSeriesTooLong, "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]codec.Tag, 0, 4)
			metric, tags, err := Mapper{Prefix: tc.prefix}.Split(tc.in, dst)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.mention)
			require.Empty(t, metric)
			require.Empty(t, tags)
			// The message stays short however big the series is.
			require.Less(t, len(err.Error()), 512)
		})
	}
}

func TestStoredLen(t *testing.T) {
	manyTags := func(n int) []codec.Tag {
		tags := make([]codec.Tag, n)
		for i := range tags {
			tags[i] = codec.Tag{Name: "n", Value: "v"}
		}
		return tags
	}
	for _, tc := range []struct {
		name   string
		metric string
		tags   []codec.Tag
		want   int
	}{
		// key: metric + NUL + 8 + marker + length + 127-byte type name.
		{"no tags", "m", nil, 1 + 1 + 8 + 2 + 127},
		{"escapes", "m", []codec.Tag{{Name: "a:b", Value: "c=d"}}, 139 + len("a::b=c==d:")},
		// Many short tags: the frozen map's 4-byte lengths dominate.
		{"clustering dominates", "m", manyTags(100), 127 + 4 + 100*(4+1+4+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, storedLen(tc.metric, tc.tags))
		})
	}
}

func TestJoin(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix string
		metric string
		tags   []codec.Tag
		want   labels.Labels
		ok     bool
	}{
		{"plain", "", "up", []codec.Tag{{Name: "job", Value: "api"}}, labels.FromStrings("__name__", "up", "job", "api"), true},
		{"prefix stripped", "prom.", "prom.up", nil, labels.FromStrings("__name__", "up"), true},
		{"tags sorted", "", "up", []codec.Tag{{Name: "z", Value: "1"}, {Name: "a", Value: "2"}, {Name: "m", Value: "3"}}, labels.FromStrings("__name__", "up", "a", "2", "m", "3", "z", "1"), true},
		{"not our prefix", "prom.", "other.up", nil, labels.EmptyLabels(), false},
		{"only the prefix", "prom.", "prom.", nil, labels.EmptyLabels(), false},
		{"empty metric", "", "", nil, labels.EmptyLabels(), false},
		{"empty tag name", "", "up", []codec.Tag{{Name: "", Value: "x"}}, labels.EmptyLabels(), false},
		{"empty tag value", "", "up", []codec.Tag{{Name: "a", Value: ""}}, labels.EmptyLabels(), false},
		{"tag named __name__", "", "up", []codec.Tag{{Name: "__name__", Value: "x"}}, labels.EmptyLabels(), false},
		{"duplicate tag", "", "up", []codec.Tag{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}, {Name: "a", Value: "3"}}, labels.EmptyLabels(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := labels.NewScratchBuilder(0)
			got, ok := Mapper{Prefix: tc.prefix}.Join(tc.metric, tc.tags, &b)
			require.Equal(t, tc.ok, ok)
			require.True(t, labels.Equal(tc.want, got), "got %s, want %s", got, tc.want)
		})
	}
}

func TestSplitJoinRoundTrip(t *testing.T) {
	sets := []labels.Labels{
		labels.FromStrings("__name__", "up"),
		labels.FromStrings("__name__", "up", "job", "api", "instance", "localhost:9090"),
		labels.FromStrings("__name__", "a:b=c", "k:1", "v=1", "k=2", "v:2", "=", ":", ":", "="),
		labels.FromStrings("__name__", "with space", "lab el", "val ue", "tab", "\t"),
		labels.FromStrings("__name__", "multi\nline", "nl", "a\nb\r\n"),
		labels.FromStrings("__name__", "été", "😀", "vé", "\uffff", "1", "B", "3", "a", "4"),
		labels.FromStrings("__name__", "nul", "n\x00", "\x00"),
		labels.FromStrings("__name__", "esc", "back\\slash", `"quoted"`),
		labels.FromStrings("__name__", "long", "v", strings.Repeat("long value ", 5000)),
		labels.FromStrings("__name__", "__reserved__", "__meta", "x"),
	}
	for _, prefix := range []string{"", "prom.", "k:="} {
		m := Mapper{Prefix: prefix}
		b := labels.NewScratchBuilder(0)
		for _, ls := range sets {
			metric, tags, err := m.Split(ls, nil)
			require.NoError(t, err, "%s", ls)
			require.True(t, strings.HasPrefix(metric, prefix))
			// Cassandra returns tags in its own order.
			slices.Reverse(tags)
			got, ok := m.Join(metric, tags, &b)
			require.True(t, ok, "%s", ls)
			require.True(t, labels.Equal(ls, got), "prefix %q: got %s, want %s", prefix, got, ls)
		}
	}
}

// sentinels are every error Split may wrap.
var sentinels = []error{
	ErrMissingName, ErrEmptyLabelName, ErrEmptyLabelValue, ErrInvalidUTF8,
	ErrDuplicateLabel, ErrNULInMetric, ErrSeriesTooLong,
}

func FuzzSplitJoin(f *testing.F) {
	f.Add("", "up", "job", "api", "instance", "a:9090")
	f.Add("prom.", "a:b=c", "k=", ":v", "\uffff", "\U0001F600")
	f.Add("", "x", "a", "1", "a", "2")
	f.Add("p", "", "a", "", "", "b")
	f.Add("", "m\x00", "\xff", "x", "__name__", "y")
	f.Fuzz(func(t *testing.T, prefix, name, n1, v1, n2, v2 string) {
		m := Mapper{Prefix: prefix}
		in := inOrder(n2, v2, "__name__", name, n1, v1) // deliberately unsorted
		metric, tags, err := m.Split(in, nil)
		if err != nil {
			require.True(t, slices.ContainsFunc(sentinels, func(s error) bool { return errors.Is(err, s) }), "unexpected error %v", err)
			return
		}
		want := labels.New(labels.Label{Name: "__name__", Value: name}, labels.Label{Name: n1, Value: v1}, labels.Label{Name: n2, Value: v2})
		b := labels.NewScratchBuilder(0)
		got, ok := m.Join(metric, tags, &b)
		require.True(t, ok)
		require.True(t, labels.Equal(want, got), "got %s, want %s", got, want)

		// The series must be found again by its own label set.
		var ms []*labels.Matcher
		want.Range(func(l labels.Label) {
			ms = append(ms, labels.MustNewMatcher(labels.MatchEqual, l.Name, l.Value))
		})
		p, err := m.Plan(ms)
		require.NoError(t, err)
		require.False(t, p.Empty())
		require.Equal(t, []string{metric}, p.Metrics)
		require.True(t, p.MatchName(metric) && p.MatchTags(tags))
	})
}

func TestSplitDoesNotAllocate(t *testing.T) {
	ls := tenLabels()
	dst := make([]codec.Tag, 0, 16)
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := (Mapper{}).Split(ls, dst); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

func tenLabels() labels.Labels {
	return labels.FromStrings(
		"__name__", "http_requests_total",
		"code", "200",
		"env", "prod",
		"handler", "/api/v1/query",
		"instance", "10.0.0.1:9090",
		"job", "prometheus",
		"method", "GET",
		"namespace", "monitoring",
		"pod", "prometheus-0",
		"region", "eu-west-1",
	)
}

func BenchmarkSplit(b *testing.B) {
	ls := tenLabels()
	for _, prefix := range []string{"", "prom."} {
		b.Run("prefix="+prefix, func(b *testing.B) {
			m := Mapper{Prefix: prefix}
			dst := make([]codec.Tag, 0, 16)
			b.ReportAllocs()
			for b.Loop() {
				_, dst, _ = m.Split(ls, dst)
			}
		})
	}
}

func BenchmarkJoin(b *testing.B) {
	m := Mapper{}
	metric, tags, err := m.Split(tenLabels(), nil)
	require.NoError(b, err)
	slices.Reverse(tags)
	sb := labels.NewScratchBuilder(16)
	b.ReportAllocs()
	for b.Loop() {
		m.Join(metric, tags, &sb)
	}
}
