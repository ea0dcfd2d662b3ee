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

// Errors returned by Split. Each is wrapped with the offending label and the
// series, so the HTTP layer can answer 400 with err.Error() and match the
// kind with errors.Is.
var (
	// ErrMissingName: KairosDB has no row without a metric name.
	ErrMissingName    = errors.New("missing or empty __name__ label")
	ErrEmptyLabelName = errors.New("empty label name")
	// ErrEmptyLabelValue: in Prometheus an empty value means "label absent",
	// so a sender never needs one, and KairosDB rejects empty tag values
	// (docs/kairosdb-layout.md §10.2). Storing it would create a tag KairosDB itself cannot
	// produce or query, so we refuse it instead of silently dropping it.
	ErrEmptyLabelValue = errors.New("empty label value")
	ErrInvalidUTF8     = errors.New("label name or value is not valid UTF-8")
	ErrDuplicateLabel  = errors.New("duplicate label name")
	// ErrNULInMetric is codec's: the row key rule (docs/kairosdb-layout.md §2.1).
	ErrNULInMetric   = codec.ErrNULInMetric
	ErrSeriesTooLong = errors.New("series too long for a Cassandra key")
)

// MaxKeyBytes is codec.MaxKeyBytes, Cassandra's limit on a key.
const MaxKeyBytes = codec.MaxKeyBytes

// Mapper maps Prometheus label sets to KairosDB metric names and tags and
// back. The zero value maps names unchanged.
type Mapper struct {
	// Prefix is prepended to every metric name written and required on every
	// metric name read; metrics without it are not ours. May be empty.
	Prefix string
}

// Split turns a Prometheus label set into a KairosDB metric name
// (Prefix + __name__) and one Tag per other label, appended to dst[:0].
// Nothing is escaped here: the row-key codec does that.
//
// The returned strings alias ls (and, with an empty Prefix, so does metric):
// if the caller built ls over a request buffer it reuses, it must copy them.
//
// Labels are expected sorted by name, as the remote-write spec promises,
// but unsorted input is accepted because order carries no meaning; the
// returned tags are always sorted by name (byte order). Duplicate names are
// rejected, as Prometheus itself does.
func (m Mapper) Split(ls labels.Labels, dst []codec.Tag) (metric string, tags []codec.Tag, err error) {
	tags = dst[:0]
	var name, prev string
	haveName, sorted := false, true
	err = ls.Validate(func(l labels.Label) error {
		if err := checkLabel(l); err != nil {
			return err
		}
		if l.Name == prev {
			return fmt.Errorf("%w %q", ErrDuplicateLabel, l.Name)
		}
		if l.Name < prev {
			sorted = false
		}
		prev = l.Name
		if l.Name == model.MetricNameLabel {
			if haveName {
				return fmt.Errorf("%w %q", ErrDuplicateLabel, l.Name)
			}
			name, haveName = l.Value, true
			return nil
		}
		tags = append(tags, codec.Tag{Name: l.Name, Value: l.Value})
		return nil
	})
	if err == nil && !haveName {
		err = ErrMissingName
	}
	if err == nil && !sorted {
		// Adjacent-only duplicate detection above misses non-adjacent
		// repeats in unsorted input; sorting brings them together.
		slices.SortFunc(tags, func(a, b codec.Tag) int { return strings.Compare(a.Name, b.Name) })
		for i := 1; i < len(tags); i++ {
			if tags[i].Name == tags[i-1].Name {
				err = fmt.Errorf("%w %q", ErrDuplicateLabel, tags[i].Name)
				break
			}
		}
	}
	if err == nil {
		metric = m.Prefix + name
		err = codec.CheckMetric(metric)
		if n := storedLen(metric, tags); err == nil && n > MaxKeyBytes {
			err = fmt.Errorf("%w: %d bytes, limit %d", ErrSeriesTooLong, n, MaxKeyBytes)
		}
	}
	if err != nil {
		return "", dst[:0], fmt.Errorf("invalid series %s: %w", describe(ls), err)
	}
	return metric, tags, nil
}

// checkLabel applies the per-label rules of Split.
func checkLabel(l labels.Label) error {
	switch {
	case l.Name == "":
		return ErrEmptyLabelName
	case l.Name == model.MetricNameLabel && l.Value == "":
		return ErrMissingName
	case l.Value == "":
		return fmt.Errorf("%w for %q", ErrEmptyLabelValue, l.Name)
	case !utf8.ValidString(l.Name) || !utf8.ValidString(l.Value):
		return fmt.Errorf("%w: %q", ErrInvalidUTF8, l.Name)
	}
	return nil
}

// storedLen is the larger of the two Cassandra-limited encodings of a
// series, with the longest possible data type:
//   - data_points.key (docs/kairosdb-layout.md §2.1/§2.2): metric, 0x00, 8-byte row time,
//     0x00, length byte, type name, then esc(name)=esc(value): per tag;
//   - row_keys clustering (data_type, tags): type name plus the frozen map,
//     a 4-byte count and 4-byte lengths before each name and value.
//
// Every other key KairosDB writes (row_keys and tag_indexed_row_keys
// partitions, string_index) is shorter than data_points.key. Split does not
// know the data type, so it reserves room for the longest.
func storedLen(metric string, tags []codec.Tag) int {
	key := len(metric) + 1 + 8 + 2 + codec.MaxTypeLen
	clustering := codec.MaxTypeLen + 4
	for _, t := range tags {
		key += codec.EscapedLen(t.Name) + 1 + codec.EscapedLen(t.Value) + 1
		clustering += 4 + len(t.Name) + 4 + len(t.Value)
	}
	return max(key, clustering)
}

// describe renders ls for an error message, cut short so that a huge
// series (the very thing ErrSeriesTooLong reports) does not make a huge
// response.
func describe(ls labels.Labels) string {
	const limit = 256
	s := ls.String()
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Join is the inverse of Split: it rebuilds the label set of a KairosDB
// metric and its tags with b. It returns false when the row is not one
// Split could have produced: the metric lacks Prefix or is only Prefix, or
// a tag has an empty name or value, is named __name__, or repeats a name.
// Tags may come in any order.
func (m Mapper) Join(metric string, tags []codec.Tag, b *labels.ScratchBuilder) (labels.Labels, bool) {
	name, ok := strings.CutPrefix(metric, m.Prefix)
	if !ok || name == "" {
		return labels.EmptyLabels(), false
	}
	if !Readable(tags) {
		return labels.EmptyLabels(), false
	}
	b.Reset()
	b.Add(model.MetricNameLabel, name)
	for _, t := range tags {
		b.Add(t.Name, t.Value)
	}
	b.Sort()
	return b.Labels(), true
}

// Readable reports whether tags make a Prometheus series with Join: no empty
// name or value, no tag named __name__, no name twice. Rows whose tags are
// not readable are never returned.
func Readable(tags []codec.Tag) bool {
	for i, t := range tags {
		if t.Name == "" || t.Value == "" || t.Name == model.MetricNameLabel {
			return false
		}
		for _, u := range tags[:i] {
			if u.Name == t.Name {
				return false
			}
		}
	}
	return true
}
