package frontend

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// part is the evaluation times start, start+step, ..., end of one interval.
type part struct {
	index      int64 // which interval: start / interval
	start, end int64 // ms, both evaluation times of the whole query
}

// splitParts cuts the evaluation times start, start+step, ..., end at the
// multiples of interval (UTC midnights for a day): each part holds the
// times that fall in one interval, so every part is evaluated at exactly
// the times the whole query would be. interval <= 0 gives one part.
func splitParts(start, end, step, interval int64) []part {
	if interval <= 0 {
		return []part{{index: 0, start: start, end: end}}
	}
	var parts []part
	for t := start; t <= end; {
		idx := floorDiv(t, interval)
		bound := (idx + 1) * interval // first time of the next interval
		// The last evaluation time before bound.
		last := t + (bound-1-t)/step*step
		last = min(last, end)
		parts = append(parts, part{index: idx, start: t, end: last})
		if last > math.MaxInt64-step {
			break
		}
		t = last + step
	}
	return parts
}

// splittable reports whether every step of e is evaluated on its own, so
// that parts of the range give the same answers as the whole. In PromQL
// each step of a range query is evaluated independently: selectors, range
// windows, offsets and subqueries (whose steps are aligned to multiples of
// their step since the epoch, not to the query's start) look at the same
// samples whatever the range. What ties a step to the range is the @
// modifier: `@ start()` and `@ end()` name the range's own ends, and a
// fixed `@` is kept whole too, as Mimir does, since its selectors would be
// read once per part for the same answer.
func splittable(e parser.Expr) bool {
	ok := true
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			if n.Timestamp != nil || n.StartOrEnd != 0 {
				ok = false
			}
		case *parser.SubqueryExpr:
			if n.Timestamp != nil || n.StartOrEnd != 0 {
				ok = false
			}
		}
		if !ok {
			return errors.New("stop")
		}
		return nil
	})
	return ok
}

// parseTime reads the query API's times: Unix seconds with a fraction,
// rounded to the millisecond, or RFC 3339; the result is in ms.
func parseTime(s string) (int64, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		sec, frac := math.Modf(f)
		if math.Abs(sec) > math.MaxInt64/1000-1 {
			return 0, fmt.Errorf("time %q out of range", s)
		}
		return int64(sec)*1000 + int64(math.Round(frac*1000)), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, err
	}
	if t.Year() < 1 || t.Year() > 9999 {
		return 0, fmt.Errorf("time %q out of range", s)
	}
	return t.UnixMilli(), nil
}

// parseDuration reads seconds or a Prometheus duration.
func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		d := f * float64(time.Second)
		if math.IsNaN(d) || d >= math.MaxInt64 || d <= math.MinInt64 {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		return time.Duration(d), nil
	}
	d, err := model.ParseDuration(s)
	return time.Duration(d), err
}

// formatTime writes ms as seconds with exactly the milliseconds, so that
// the query API reads back the same time.
func formatTime(ms int64) string {
	sign := ""
	if ms < 0 {
		sign, ms = "-", -ms
	}
	return fmt.Sprintf("%s%d.%03d", sign, ms/1000, ms%1000)
}
