package queryapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
)

// minTime and maxTime are the defaults of the optional start and end
// parameters: Prometheus's bounds, which clients send back (as Grafana
// does).
var (
	minTime = timeparam.Min
	maxTime = timeparam.Max

	minTimeText = timeparam.MinText
	maxTimeText = timeparam.MaxText
)

// parseTime is the one time parser of every endpoint (internal/timeparam):
// NaN, ±Inf and times outside [minTime, maxTime] are errors.
func parseTime(s string) (time.Time, error) { return timeparam.Parse(s) }

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
func parseDuration(s string) (time.Duration, error) { return timeparam.ParseDuration(s) }

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
