package adapter

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Recomputer marks rollups for recomputation (rollup/job.Job.Recompute).
type Recomputer interface {
	// Recompute marks the units of the metrics the selectors name that
	// [start, end] (ms) touches and returns the metrics marked.
	Recompute(ctx context.Context, selectors [][]*labels.Matcher, start, end int64) ([]string, error)
}

// RecomputeHandler serves POST /api/v1/admin/rollups/recompute: match[]
// selectors (none: every metric) and optional start and end as
// delete_series takes them. The rollup job sees only what this process and
// the adapters sharing its keyspace change; after KairosDB or another
// writer changed samples behind their back, an operator marks the range
// here. It answers 200 with the metrics marked once the marks are stored;
// the job recomputes them in the background. get returns nil while the
// store is not open yet (503). No flag turns it on: it only schedules
// work the job throttles, and the web config's authentication applies.
func RecomputeHandler(get func() Recomputer, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, "cannot parse the form: "+err.Error(), http.StatusBadRequest)
			return
		}
		start, end, ok := timeRange(w, r)
		if !ok {
			return
		}
		sets := [][]*labels.Matcher{nil} // every metric
		if selectors := r.Form["match[]"]; len(selectors) > 0 {
			sets = sets[:0]
			for _, s := range selectors {
				ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector(s)
				if err != nil {
					http.Error(w, fmt.Sprintf("invalid match[] %q: %v", s, err), http.StatusBadRequest)
					return
				}
				sets = append(sets, ms)
			}
		}
		rc := get()
		if rc == nil {
			http.Error(w, "the store is not open yet", http.StatusServiceUnavailable)
			return
		}
		metrics, err := rc.Recompute(r.Context(), sets, start, end)
		if err != nil {
			logger.Warn("Marking rollups for recomputation failed", "err", err)
			http.Error(w, "mark rollups for recomputation: "+err.Error(), statusOf(err, http.StatusInternalServerError))
			return
		}
		logger.Info("Rollups marked for recomputation", "match", r.Form["match[]"], "start", start, "end", end, "metrics", len(metrics))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"metrics": metrics}})
	})
}
