package adapter

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Deleter is what the admin API needs from a store that can delete series.
type Deleter interface {
	// Delete removes the samples of the series selected by ms in
	// [start, end] (inclusive, ms) and reports how many rows it touched.
	Delete(ctx context.Context, start, end int64, ms ...*labels.Matcher) (int, error)
}

// deleteSeriesHandler serves Prometheus's delete_series admin call with the
// same parameters: one or more match[] selectors, optional start and end as
// RFC 3339 or Unix seconds (default: all time). Like Prometheus it answers
// 204 and is off unless the operator turns the admin API on.
func deleteSeriesHandler(d Deleter, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, "cannot parse the form: "+err.Error(), http.StatusBadRequest)
			return
		}
		selectors := r.Form["match[]"]
		if len(selectors) == 0 {
			http.Error(w, "no match[] parameter: name the series to delete, e.g. match[]={job=\"old\"}", http.StatusBadRequest)
			return
		}
		start, end, ok := timeRange(w, r)
		if !ok {
			return
		}
		// Parse every selector before deleting anything.
		sets := make([][]*labels.Matcher, 0, len(selectors))
		for _, s := range selectors {
			ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector(s)
			if err != nil {
				http.Error(w, fmt.Sprintf("invalid match[] %q: %v", s, err), http.StatusBadRequest)
				return
			}
			// A selector whose every matcher also matches the empty string
			// selects every series ({} parses too): refused, by the rule
			// Prometheus applies to the match[] of /api/v1/series, so a
			// typo cannot wipe a keyspace other writers share. (Prometheus's
			// own delete_series does not check it.)
			if !slices.ContainsFunc(ms, func(m *labels.Matcher) bool { return !m.Matches("") }) {
				http.Error(w, fmt.Sprintf("invalid match[] %q: match[] must contain at least one non-empty matcher", s), http.StatusBadRequest)
				return
			}
			sets = append(sets, ms)
		}
		for i, ms := range sets {
			n, err := d.Delete(r.Context(), start, end, ms...)
			if err != nil {
				logger.Warn("Delete failed", "match", selectors[i], "err", err)
				http.Error(w, fmt.Sprintf("delete %s: %v", selectors[i], err), statusOf(err, http.StatusInternalServerError))
				return
			}
			logger.Info("Deleted series", "match", selectors[i], "start", start, "end", end, "rows", n)
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// timeRange reads the optional start and end of an admin call (default: all
// time), answering 400 when they are invalid.
func timeRange(w http.ResponseWriter, r *http.Request) (start, end int64, ok bool) {
	start, err := parseTimeParam(r.Form.Get("start"), math.MinInt64)
	if err != nil {
		http.Error(w, "invalid start: "+err.Error(), http.StatusBadRequest)
		return 0, 0, false
	}
	end, err = parseTimeParam(r.Form.Get("end"), math.MaxInt64)
	if err != nil {
		http.Error(w, "invalid end: "+err.Error(), http.StatusBadRequest)
		return 0, 0, false
	}
	if start > end {
		http.Error(w, "start is after end", http.StatusBadRequest)
		return 0, 0, false
	}
	return start, end, true
}

// parseTimeParam reads a time as Prometheus's API does: Unix seconds with an
// optional fraction, or RFC 3339; empty means def. The result is in ms.
func parseTimeParam(s string, def int64) (int64, error) {
	if s == "" {
		return def, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		ms := f * 1000
		if math.IsNaN(ms) || ms < math.MinInt64 || ms > math.MaxInt64 {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		return int64(math.Round(ms)), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither Unix seconds nor RFC 3339", s)
	}
	return t.UnixMilli(), nil
}
