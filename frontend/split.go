package frontend

import (
	"errors"
	"fmt"
	"math"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
	"github.com/kairos-remote/kairos-adapter/queryapi"
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
//
// Each part holds at least one evaluation time, so there are at most as
// many parts as times: more than the query API's MaxPoints+1 gives one
// part (which the query API refuses), so no request makes more.
func splitParts(start, end, step, interval int64) []part {
	if interval <= 0 || timeparam.Steps(start, end, step) > queryapi.MaxPoints+1 {
		return []part{{index: 0, start: start, end: end}}
	}
	var parts []part
	for t := start; t <= end; {
		idx := floorDiv(t, interval)
		last := end
		if idx < math.MaxInt64/interval { // (idx+1)*interval holds
			bound := (idx + 1) * interval // first time of the next interval
			// The last evaluation time before bound.
			last = min(t+(bound-1-t)/step*step, end)
		}
		parts = append(parts, part{index: idx, start: t, end: last})
		if last > math.MaxInt64-step {
			break
		}
		t = last + step
	}
	return parts
}

// partInterval is the interval a query over the evaluation times [start,
// end] is split at: interval, or the least multiple of it that cuts the
// range into at most maxParts parts (maxParts >= 3). Parts then still
// start at multiples of interval since the epoch (UTC midnights for a
// day), so a part of a query whose start and step are multiples of a
// rollup resolution that divides interval reads whole buckets.
func partInterval(start, end, interval int64, maxParts int) int64 {
	if interval <= 0 || end < start {
		return interval
	}
	// A span of k intervals, not aligned, touches at most k+2 of them.
	span := uint64(end - start) // < 2^63: times are within Prometheus's bounds
	per := uint64(interval) * uint64(maxParts-2)
	k := max((span+per-1)/per, 1)
	if k > uint64(math.MaxInt64)/uint64(interval) {
		return interval // no multiple holds: splitParts bounds the parts
	}
	return interval * int64(k)
}

// alignInterval is iv (a multiple of interval, from partInterval) rounded
// up to a multiple of align where iv is at least align and align is a
// multiple of interval: the parts then start at multiples of align since
// the epoch, the store's row windows (KairosDB's rows, three weeks by
// default), and a row is read by one part instead of by the two whose
// boundary falls inside it. A larger interval never makes more parts, and
// an answer does not depend on where the parts start. iv where no such
// multiple holds in int64.
func alignInterval(iv, interval, align int64) int64 {
	if iv <= 0 || interval <= 0 || align <= 0 || iv < align || align%interval != 0 || iv%align == 0 {
		return iv
	}
	k := uint64(iv)/uint64(align) + 1
	if k > uint64(math.MaxInt64)/uint64(align) {
		return iv
	}
	return int64(k * uint64(align))
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

// parseTime reads a time as the query API does (internal/timeparam, one
// parser for every endpoint), in ms.
func parseTime(s string) (int64, error) {
	t, err := timeparam.Parse(s)
	if err != nil {
		return 0, err
	}
	return t.UnixMilli(), nil
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
