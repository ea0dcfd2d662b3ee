// Package rollup is the layout of the adapter's rollups, shared by the job
// that writes them (rollupjob), the store that reads them (kairosstore) and
// the query API that decides when to read them (queryapi): how a rollup
// series is named and tagged, which raw samples fall in a bucket, how each
// aggregate is computed from them, and where the job keeps its progress in
// service_index. Pure functions, no I/O; how one query reads them is
// package readhint's. docs/kairosdb-layout.md §13 describes the same rules
// for a reader of the keyspace.
package rollup

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/util/kahansum"
)

// The tags a rollup series carries besides its raw series' tags. SavedFrom
// is KairosDB's own roll-up convention (a roll-up task's save_as metric is
// tagged saved_from=<source metric>); the other two say which of the ten
// rollup series of a raw series this is.
const (
	SavedFrom     = "saved_from"
	ResolutionTag = "rollup_resolution"
	AggregateTag  = "rollup_aggregate"
	// NameSuffix is KairosDB's conventional save_as name: <metric>_rollup.
	NameSuffix = "_rollup"
)

// Aggregate is one of the five values kept per bucket, Thanos's set.
type Aggregate string

const (
	Count Aggregate = "count"
	Sum   Aggregate = "sum"
	Min   Aggregate = "min"
	Max   Aggregate = "max"
	// Counter is the increase of a counter over the bucket, resets applied
	// (Compute says from where). Read back, the store turns the increases
	// into a running sum, a counter without resets, so rate and increase
	// over it need no knowledge of rollups.
	Counter Aggregate = "counter"
	// Avg is no series of its own, and the job writes none: a read of it
	// is each bucket's Mean of its Sum and Count, so that avg_over_time
	// over windows of one bucket reads one series instead of two.
	Avg Aggregate = "avg"
)

// Aggregates is every aggregate, in the order the job writes them.
var Aggregates = []Aggregate{Count, Sum, Min, Max, Counter}

// Resolution is a bucket width. Buckets are aligned to the Unix epoch.
type Resolution time.Duration

// String is the resolution as a Prometheus duration ("5m", "1h"), the
// value of the rollup_resolution tag.
func (r Resolution) String() string { return model.Duration(r).String() }

// Millis is the resolution in milliseconds.
func (r Resolution) Millis() int64 { return time.Duration(r).Milliseconds() }

// ParseResolution reads a resolution as written by String.
func ParseResolution(s string) (Resolution, error) {
	d, err := model.ParseDuration(s)
	if err != nil || d <= 0 || time.Duration(d)%time.Minute != 0 || time.Duration(d) > 24*time.Hour || (24*time.Hour)%time.Duration(d) != 0 {
		return 0, fmt.Errorf("rollup resolution %q: want a whole number of minutes that divides 24h", s)
	}
	return Resolution(d), nil
}

// Bucket is the bucket of a sample at t: buckets are left-open and
// right-closed, (end-r, end], like a PromQL range (t-range, t], and a
// bucket's value is written at its end. So an aggregate over the buckets
// ending in (t-range, t] is exactly the aggregate over the raw samples in
// that range whenever t and range are multiples of r.
func (r Resolution) Bucket(t int64) (end int64) {
	m := r.Millis()
	q := t / m // truncated towards zero: the ceiling already when t < 0
	if t > 0 && t%m != 0 {
		q++
	}
	return q * m
}

// Rollable says whether a raw series is rolled up: not a rollup itself, and
// not a series whose labels would collide with the rollup tags (KairosDB's
// own roll-ups carry saved_from; they are read raw).
func Rollable(ls labels.Labels) bool {
	return !ls.Has(SavedFrom) && !ls.Has(ResolutionTag) && !ls.Has(AggregateTag) && ls.Get(model.MetricNameLabel) != ""
}

// SeriesLabels are the labels of raw series ls's rollup at r of a.
func SeriesLabels(ls labels.Labels, r Resolution, a Aggregate) labels.Labels {
	b := labels.NewBuilder(ls)
	name := ls.Get(model.MetricNameLabel)
	b.Set(model.MetricNameLabel, name+NameSuffix)
	b.Set(SavedFrom, name)
	b.Set(ResolutionTag, r.String())
	b.Set(AggregateTag, string(a))
	return b.Labels()
}

// RawLabels are the labels of the raw series a rollup series was made from,
// and whether ls is a rollup series at all.
func RawLabels(ls labels.Labels) (labels.Labels, bool) {
	from := ls.Get(SavedFrom)
	if from == "" || !ls.Has(ResolutionTag) || !ls.Has(AggregateTag) || ls.Get(model.MetricNameLabel) != from+NameSuffix {
		return labels.EmptyLabels(), false
	}
	b := labels.NewBuilder(ls)
	b.Set(model.MetricNameLabel, from)
	b.Del(SavedFrom, ResolutionTag, AggregateTag)
	return b.Labels(), true
}

// Point is one bucket's aggregates.
type Point struct {
	End                           int64 // the bucket's end, the timestamp of its values
	Count, Sum, Min, Max, Counter float64
}

// Value is the point's value of a.
func (p Point) Value(a Aggregate) float64 {
	switch a {
	case Count:
		return p.Count
	case Sum:
		return p.Sum
	case Min:
		return p.Min
	case Max:
		return p.Max
	default:
		return p.Counter
	}
}

// Compute aggregates float samples (ts ascending, no duplicates) into the
// buckets of r that end in (from, to]. Samples at or before from are
// only read for the counter: the last of them in the bucket before the
// first is where the first bucket's increase starts. Stale markers are not
// samples here, as PromQL's range functions do not see them; NaN is,
// as min_over_time and friends see it: Sum is NaN, Min and Max are NaN only
// when every value is. Counter skips NaN. An empty bucket has no point.
// Sum is the compensated sum sum_over_time takes of the bucket's samples,
// so that a window of one bucket answers from rollups what it answers raw,
// 1e300 and -1e300 in one bucket included.
func Compute(r Resolution, from, to int64, ts []int64, vs []float64) []Point {
	var out []Point
	m := r.Millis()
	var (
		cur      *Point
		sumC     float64 // cur's compensation (kahansum)
		prev     float64 // the last counter value seen, for resets
		havePrev bool
		prevEnd  int64 // the bucket prev belongs to
	)
	// finish folds cur's compensation into its Sum, as sum_over_time
	// does unless the sum is infinite.
	finish := func() {
		if cur != nil && !math.IsInf(cur.Sum, 0) {
			cur.Sum += sumC
		}
		sumC = 0
	}
	for i, t := range ts {
		v := vs[i]
		if value.IsStaleNaN(v) {
			continue
		}
		end := r.Bucket(t)
		if t <= from {
			if !math.IsNaN(v) {
				prev, havePrev, prevEnd = v, true, end
			}
			continue
		}
		if end > to {
			break
		}
		if cur == nil || cur.End != end {
			finish()
			out = append(out, Point{End: end, Min: v, Max: v})
			cur = &out[len(out)-1]
			// An increase starts from the previous bucket's last value,
			// not one older: across an empty bucket there is none.
			if havePrev && prevEnd != end-m {
				havePrev = false
			}
		}
		cur.Count++
		cur.Sum, sumC = kahansum.Inc(v, cur.Sum, sumC)
		if v < cur.Min || math.IsNaN(cur.Min) {
			cur.Min = v
		}
		if v > cur.Max || math.IsNaN(cur.Max) {
			cur.Max = v
		}
		if math.IsNaN(v) {
			continue
		}
		if havePrev {
			if v < prev {
				cur.Counter += v // a reset: the counter restarted from zero
			} else {
				cur.Counter += v - prev
			}
		}
		prev, havePrev, prevEnd = v, true, end
	}
	finish()
	return out
}

// Mean is a bucket's average from its sum and count, as the query API's
// sum_over_time(sum)/sum_over_time(count) of one bucket computes it: each
// sum_over_time of one value adds a zero compensation term (which turns a
// -0 into 0; it skips it for ±Inf, which is the same), and the quotient is
// float64 division. A count of 0 divides as well (±Inf or NaN), as the
// query did.
func Mean(sum, count float64) float64 {
	return (sum + 0) / (count + 0)
}

// Progress keys in service_index (docs/kairosdb-layout.md §13.3): service Service, service key
// ServiceKey; one key per resolution for the forward watermark and the
// backfill position, a lease per resolution, and one key per (unit,
// metric) marked for recomputation.
const (
	Service    = "_Rollups"
	ServiceKey = "PrometheusAdapter"
)

// DoneKey holds, for r, the range of bucket ends [from, to] whose buckets
// are all written ("<from> <to>", ms). Reads use rollups inside it only.
func DoneKey(r Resolution) string { return "done." + r.String() }

// FormatDone and ParseDone encode DoneKey's value.
func FormatDone(from, to int64) string {
	return strconv.FormatInt(from, 10) + " " + strconv.FormatInt(to, 10)
}

func ParseDone(s string) (from, to int64, err error) {
	a, b, ok := strings.Cut(s, " ")
	if ok {
		from, err = strconv.ParseInt(a, 10, 64)
		if err == nil {
			to, err = strconv.ParseInt(b, 10, 64)
		}
	}
	if !ok || err != nil || from > to {
		return 0, 0, fmt.Errorf("rollup progress %q: want \"<from> <to>\"", s)
	}
	return from, to, nil
}
