package translate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// ErrInvalidMatcher is returned by Plan for a matcher it cannot apply
// without panicking: nil, of unknown type, or a regex matcher that was not
// built by labels.NewMatcher.
var ErrInvalidMatcher = errors.New("invalid label matcher")

// Plan is what a remote-read query needs to know about a set of matchers:
// which metrics to read, which tag values narrow the row-key scan, and the
// exact filters to apply to what comes back.
type Plan struct {
	// Metrics is the exact set of KairosDB metric names to read (Prefix
	// applied), sorted. It is nil when the matchers do not pin __name__ to a
	// finite set (EQ, or a regex that is a finite set of literals): then the
	// caller lists all metric names and keeps those MatchName accepts. It is
	// empty but not nil when the pinned set is empty; Empty is then true.
	Metrics []string
	// TagValues maps a tag name to its allowed values, sorted, when the
	// matchers on that name allow only a finite set of non-empty values, so
	// every selected series has the tag with one of them. It narrows
	// row-key scans (tag_indexed_row_keys) and is a cheap first filter; it
	// never replaces MatchTags. A name whose matchers also accept the empty
	// string (that is, series without the tag) is left out. Nil when no
	// name is pinned.
	TagValues map[string][]string

	prefix string
	names  []*labels.Matcher // matchers on __name__
	tags   []*labels.Matcher // all other matchers
	empty  bool
}

// Plan turns remote-read matchers into a Plan. The matchers must have been
// built with labels.NewMatcher (as remote.FromLabelMatchers does); Plan keeps
// them, so the caller must not change them afterwards. Any matcher set is
// accepted, including one without a __name__ matcher or one that only
// matches empty values, which PromQL would refuse but remote read may send.
func (m Mapper) Plan(ms []*labels.Matcher) (Plan, error) {
	// No matchers select nothing, as in Prometheus's TSDB (an intersection
	// of no postings lists is empty): never every series of the keyspace.
	p := Plan{prefix: m.Prefix, empty: len(ms) == 0}
	for _, lm := range ms {
		if err := checkMatcher(lm); err != nil {
			return Plan{}, err
		}
		if lm.Name == model.MetricNameLabel {
			p.names = append(p.names, lm)
		} else {
			p.tags = append(p.tags, lm)
		}
	}

	// Stored series always have a non-empty name of valid UTF-8 that fits
	// a partition key (Split refuses others, and Cassandra's text columns
	// and keys cannot hold them), so no other name counts as a candidate:
	// asking Cassandra for one is an error, not an empty answer.
	if names, pinned := pinnedValues(p.names); pinned {
		p.Metrics = []string{}
		for _, n := range names {
			if n != "" && storable(n) && len(m.Prefix)+len(n) <= codec.MaxKeyBytes {
				p.Metrics = append(p.Metrics, m.Prefix+n)
			}
		}
		p.empty = len(p.Metrics) == 0
	}

	for i, lm := range p.tags {
		if slices.ContainsFunc(p.tags[:i], func(o *labels.Matcher) bool { return o.Name == lm.Name }) {
			continue // this name was handled with its first matcher
		}
		same := sameName(p.tags, lm.Name)
		values, pinned := pinnedValues(same)
		if !pinned || slices.Contains(values, "") {
			// A series lacking the tag matches, so the tag cannot narrow
			// the scan.
			continue
		}
		// Nor has any stored series such a tag value.
		values = slices.DeleteFunc(values, func(v string) bool { return !storable(v) })
		if len(values) == 0 {
			p.empty = true
		}
		if p.TagValues == nil {
			p.TagValues = make(map[string][]string)
		}
		p.TagValues[lm.Name] = values
	}
	return p, nil
}

// checkMatcher rejects matchers whose Matches would panic or disagree with
// their Value.
func checkMatcher(lm *labels.Matcher) error {
	if lm == nil {
		return fmt.Errorf("%w: nil", ErrInvalidMatcher)
	}
	switch lm.Type {
	case labels.MatchEqual, labels.MatchNotEqual:
		return nil
	case labels.MatchRegexp, labels.MatchNotRegexp:
		// A literal &labels.Matcher{} has no compiled regex; its regex
		// string reads back empty. (A literal with an empty Value cannot be
		// told apart and will panic: build matchers with labels.NewMatcher.)
		if lm.GetRegexString() != lm.Value {
			return fmt.Errorf("%w: %s was not built by labels.NewMatcher", ErrInvalidMatcher, lm)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown match type %d for %q", ErrInvalidMatcher, int(lm.Type), lm.Name)
}

// sameName returns the matchers on name, in a new slice.
func sameName(ms []*labels.Matcher, name string) []*labels.Matcher {
	var out []*labels.Matcher
	for _, lm := range ms {
		if lm.Name == name {
			out = append(out, lm)
		}
	}
	return out
}

// pinnedValues returns, sorted and without duplicates, the values that all
// of ms (matchers on one name) accept, when one of them is EQ or a regex
// that is a finite set of literals. pinned is false when no matcher pins
// the name; then any value may match.
func pinnedValues(ms []*labels.Matcher) (values []string, pinned bool) {
	var set []string
	for _, lm := range ms {
		switch lm.Type {
		case labels.MatchEqual:
			set, pinned = []string{lm.Value}, true
		case labels.MatchRegexp:
			// SetMatches is exact when non-empty (FastRegexMatcher then
			// matches by slices.Contains on the same list); only the positive
			// regex has this meaning, never MatchNotRegexp.
			if s := lm.SetMatches(); len(s) > 0 {
				set, pinned = s, true
			}
		}
		if pinned {
			break
		}
	}
	if !pinned {
		return nil, false
	}
	values = []string{}
	for _, v := range set {
		if matchesAll(ms, v) {
			values = append(values, v)
		}
	}
	slices.Sort(values)
	return slices.Compact(values), true
}

func matchesAll(ms []*labels.Matcher, v string) bool {
	for _, lm := range ms {
		if !lm.Matches(v) {
			return false
		}
	}
	return true
}

// MatchName reports whether a KairosDB metric name passes every __name__
// matcher. The matchers see the name without Prefix; a metric without
// Prefix (or that is only Prefix) is not ours and never matches.
func (p Plan) MatchName(metric string) bool {
	name, ok := strings.CutPrefix(metric, p.prefix)
	if !ok || name == "" {
		return false
	}
	return matchesAll(p.names, name)
}

// MatchTags reports whether a series' tags, in any order, pass every
// matcher other than __name__, with Prometheus semantics: an absent tag has
// the value "", so `foo=""` or `foo!~".+"` select series without foo.
// It does not allocate.
func (p Plan) MatchTags(tags []codec.Tag) bool {
	for _, lm := range p.tags {
		if !lm.Matches(tagValue(tags, lm.Name)) {
			return false
		}
	}
	return true
}

// TagMatchers are the matchers on names other than __name__. The caller
// must not change them.
func (p Plan) TagMatchers() []*labels.Matcher { return p.tags }

// tagValue is the value of tag name, or "" when absent. A linear scan beats
// building an index for the few tags a series has.
func tagValue(tags []codec.Tag, name string) string {
	for _, t := range tags {
		if t.Name == name {
			return t.Value
		}
	}
	return ""
}

// Empty reports whether the plan certainly selects nothing, e.g. for
// `__name__=""` or `job="a", job="b"`. It is conservative: false does not
// promise a match.
func (p Plan) Empty() bool {
	return p.empty
}

// storable reports whether s can be a stored metric name or tag value:
// valid UTF-8 no longer than Cassandra's key limit, which bounds the row
// key and the row_keys clustering values that hold them.
func storable(s string) bool {
	return len(s) <= codec.MaxKeyBytes && utf8.ValidString(s)
}
