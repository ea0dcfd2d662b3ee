package kairosstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/prometheus/model/exemplar"
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

// isExemplarMetric reports whether a stored metric name is an exemplar
// metric rather than a series' metric.
func isExemplarMetric(name string) bool { return strings.HasSuffix(name, ExemplarSuffix) }

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
// AppendExemplarValue writes for labels checkExemplarLabels accepts, so
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
	if err := checkExemplarLabels(ls); err != nil {
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

// checkExemplarLabels accepts the label sets Prometheus can hold: names not
// empty, UTF-8 throughout, sorted by name without repeats. Empty values are
// kept as they came. The OpenMetrics limit of 128 characters is not
// enforced: it is the sender's rule, and longer sets store and read fine.
func checkExemplarLabels(ls labels.Labels) error {
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

// Exemplars returns the exemplars with timestamps in [start, end]
// (inclusive, ms) of the series the matchers select, for an exemplar query
// API. It runs the three-phase read (§7) over the exemplar metrics of the
// selected metric names. Results are sorted by series labels and exemplars
// by timestamp; series without exemplars in the range are left out.
func (s *Store) Exemplars(ctx context.Context, start, end int64, ms ...*labels.Matcher) ([]exemplar.QueryResult, error) {
	plan, err := s.mapper.Plan(ms)
	if err != nil {
		return nil, badRequest("%w", err)
	}
	if plan.Empty() || start > end {
		return nil, nil
	}
	var metrics []string
	if plan.Metrics != nil {
		for _, m := range plan.Metrics {
			metrics = append(metrics, m+ExemplarSuffix)
		}
	} else {
		t0 := time.Now()
		err := s.eng.MetricNames(ctx, func(name string) error {
			base, ok := strings.CutSuffix(name, ExemplarSuffix)
			if !ok || !plan.MatchName(base) {
				return nil
			}
			metrics = append(metrics, name)
			if s.opts.MaxMetrics > 0 && len(metrics) > s.opts.MaxMetrics {
				return badRequest("the selector matches more than %d metric names (--query.max-metrics); add a __name__ matcher", s.opts.MaxMetrics)
			}
			return nil
		})
		s.observe("metric_names", t0)
		if err != nil {
			return nil, err
		}
	}
	refs, err := s.findSeries(ctx, metrics, plan, start, end)
	if err != nil {
		return nil, err
	}
	if s.opts.MaxSeries > 0 && len(refs) > s.opts.MaxSeries {
		return nil, badRequest("the query selects %d series, more than the limit of %d (--query.max-series)", len(refs), s.opts.MaxSeries)
	}
	var out []exemplar.QueryResult
	for _, ref := range refs {
		es, err := s.readExemplars(ctx, ref, start, end)
		if err != nil {
			return nil, err
		}
		if len(es) == 0 {
			continue
		}
		// The finder named the series after the exemplar metric.
		lb := labels.NewBuilder(ref.lset)
		lb.Set(labels.MetricName, strings.TrimSuffix(ref.lset.Get(labels.MetricName), ExemplarSuffix))
		out = append(out, exemplar.QueryResult{SeriesLabels: lb.Labels(), Exemplars: es})
	}
	// Dropping the suffix can change the order of names.
	slices.SortFunc(out, func(a, b exemplar.QueryResult) int { return labels.Compare(a.SeriesLabels, b.SeriesLabels) })
	return out, nil
}

// readExemplars reads the prom_exemplar cells of one series in [start, end].
func (s *Store) readExemplars(ctx context.Context, ref *seriesRef, start, end int64) ([]exemplar.Exemplar, error) {
	t0 := time.Now()
	defer s.observe("data_points", t0)
	var out []exemplar.Exemplar
	for _, r := range ref.rows {
		if r.dataType != TypeExemplar {
			continue // a metric whose own name ends in the suffix
		}
		lo, hi := s.spec.SliceBounds(r.rowTime, start, end)
		err := s.eng.Cells(ctx, r.key, lo, hi, func(col uint32, value []byte) error {
			t := s.spec.Timestamp(r.rowTime, col)
			if t < start || t > end {
				return nil
			}
			ls, v, err := DecodeExemplarValue(value)
			if err != nil {
				s.m.skipped.WithLabelValues("undecodable").Inc()
				return nil
			}
			// Remote write marks an exemplar without a timestamp by 0
			// (prompb Exemplar.ToExemplar).
			out = append(out, exemplar.Exemplar{Labels: ls, Value: v, Ts: t, HasTs: t != 0})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read exemplars of %s: %w", ref.lset, err)
		}
	}
	slices.SortStableFunc(out, func(a, b exemplar.Exemplar) int { return cmp.Compare(a.Ts, b.Ts) })
	return out, nil
}
