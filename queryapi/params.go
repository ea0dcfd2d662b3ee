package queryapi

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// minTime and maxTime are the defaults of the optional start and end
// parameters: the widest times whose RFC 3339 form still parses, the bounds
// Prometheus's HTTP API uses, so clients that send them back (as Grafana
// does) are understood.
var (
	minTime = time.Unix(math.MinInt64/1000+62135596801, 0).UTC()
	maxTime = time.Unix(math.MaxInt64/1000-62135596801, 999999999).UTC()

	minTimeText = minTime.Format(time.RFC3339Nano)
	maxTimeText = maxTime.Format(time.RFC3339Nano)
)

// parseTime reads a Unix time in (fractional) seconds, rounded to the
// millisecond, or an RFC 3339 time.
func parseTime(s string) (time.Time, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		sec, frac := math.Modf(f)
		ms := math.Round(frac * 1000)
		return time.Unix(int64(sec), int64(ms)*int64(time.Millisecond)).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	// time.Parse handles only four-digit years; the two bounds have more.
	switch s {
	case minTimeText:
		return minTime, nil
	case maxTimeText:
		return maxTime, nil
	}
	return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp", s)
}

// timeParam reads an optional time parameter.
func timeParam(r *http.Request, name string, def time.Time) (time.Time, error) {
	v := r.FormValue(name)
	if v == "" {
		return def, nil
	}
	t, err := parseTime(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid time value for '%s': %w", name, err)
	}
	return t, nil
}

// parseDuration reads seconds (fractional allowed) or a Prometheus duration
// such as 5m or 1h30m.
func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		ns := f * float64(time.Second)
		if ns > math.MaxInt64 || ns < math.MinInt64 || math.IsNaN(ns) {
			return 0, fmt.Errorf("cannot parse %q to a valid duration. It overflows int64", s)
		}
		return time.Duration(ns), nil
	}
	if d, err := model.ParseDuration(s); err == nil {
		return time.Duration(d), nil
	}
	return 0, fmt.Errorf("cannot parse %q to a valid duration", s)
}

// parseLimit reads the limit parameter; 0 (or absent) means no limit.
func parseLimit(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, errors.New("limit must be non-negative")
	}
	return n, nil
}

// parseMatchers reads match[] selectors. As in Prometheus, each must have a
// matcher that does not match the empty string, since a selector like
// {job=~".*"} would list every series of the store.
func parseMatchers(p parser.Parser, selectors []string) ([][]*labels.Matcher, error) {
	sets, err := p.ParseMetricSelectors(selectors)
	if err != nil {
		return nil, err
	}
	for _, set := range sets {
		ok := false
		for _, m := range set {
			if m != nil && !m.Matches("") {
				ok = true
				break
			}
		}
		if !ok {
			return nil, errors.New("match[] must contain at least one non-empty matcher")
		}
	}
	return sets, nil
}
