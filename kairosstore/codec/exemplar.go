package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/prometheus/prometheus/model/labels"
)

// Exemplars live in data_points rows of a metric of their own: the series'
// metric name followed by ExemplarSuffix, with the series' tags and the data
// type prom_exemplar. The column is the exemplar's timestamp (§3.2); the
// value holds its labels and value (docs/histogram-encoding.md).
//
// Not in the series' own rows: KairosDB reads every row of the metric it
// queries and fails on a type it does not know (§4.9), and a float series
// with exemplars must stay readable by KairosDB. Not in service_index
// (§9.2): an exemplar query is a time-range scan, which is what data_points
// rows and the three-phase read (§7) give.
//
// The suffix starts with '#', which metric names do not contain in practice:
// the classic Prometheus rule is [a-zA-Z_:][a-zA-Z0-9_:]*, OpenTelemetry
// instrument names use letters, digits and _ . - /, and '#' starts a comment
// in the text exposition format. A UTF-8 metric name that does end in the
// suffix is still stored and read correctly, because its rows have other
// data types than prom_exemplar; only selectors that list metric names (a
// regex on __name__) do not find it. KairosDB lists the exemplar metrics
// among its metric names; querying one through KairosDB fails (§4.9).
const (
	TypeExemplar   = "prom_exemplar"
	ExemplarSuffix = "#exemplars"
)

// exemplarV1 is the first byte of every exemplar value.
const exemplarV1 = 0x01

// AppendExemplarValue appends the prom_exemplar value of an exemplar with
// labels ls and value v to dst: the version, v as 8 bytes, then the number of
// labels and each name and value with a uvarint length.
func AppendExemplarValue(dst []byte, ls labels.Labels, v float64) []byte {
	dst = append(dst, exemplarV1)
	dst = AppendDouble(dst, v)
	dst = binary.AppendUvarint(dst, uint64(ls.Len()))
	ls.Range(func(l labels.Label) {
		dst = appendLenString(dst, l.Name)
		dst = appendLenString(dst, l.Value)
	})
	return dst
}

func appendLenString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// DecodeExemplarValue decodes a prom_exemplar value. It accepts only what
// AppendExemplarValue writes for labels CheckExemplarLabels accepts, so
// every stored value has one encoding.
func DecodeExemplarValue(b []byte) (labels.Labels, float64, error) {
	r := valueReader{b: b}
	if v := r.u8(); r.err == nil && v != exemplarV1 {
		r.fail(fmt.Errorf("unknown version %d", v))
	}
	v := r.f64()
	n := r.count(2) // a label takes at least its two lengths
	sb := labels.NewScratchBuilder(n)
	for range n {
		name, value := r.str(), r.str()
		if r.err != nil {
			break
		}
		sb.Add(name, value)
	}
	if err := r.end(); err != nil {
		return labels.EmptyLabels(), 0, fmt.Errorf("kairosstore: exemplar value: %w", err)
	}
	ls := sb.Labels()
	if err := CheckExemplarLabels(ls); err != nil {
		return labels.EmptyLabels(), 0, fmt.Errorf("kairosstore: exemplar value: %w", err)
	}
	return ls, v, nil
}

func (r *valueReader) str() string {
	n := r.count(1)
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// CheckExemplarLabels accepts the label sets Prometheus can hold: names not
// empty, UTF-8 throughout, sorted by name without repeats. Empty values are
// kept as they came. The OpenMetrics limit of 128 characters is not
// enforced: it is the sender's rule, and longer sets store and read fine.
func CheckExemplarLabels(ls labels.Labels) error {
	prev := ""
	return ls.Validate(func(l labels.Label) error {
		switch {
		case l.Name == "":
			return errors.New("empty exemplar label name")
		case !utf8.ValidString(l.Name) || !utf8.ValidString(l.Value):
			return fmt.Errorf("exemplar label %q is not valid UTF-8", l.Name)
		case l.Name <= prev: // prev starts empty and names are not
			return fmt.Errorf("exemplar label %q repeated or out of order", l.Name)
		}
		prev = l.Name
		return nil
	})
}
