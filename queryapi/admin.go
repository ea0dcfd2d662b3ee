package queryapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
)

// MetadataStore is what /api/v1/metadata reads; without it the endpoint
// answers no family.
type MetadataStore interface {
	// Metadata returns the metadata per metric family name; metric ""
	// means every family, limit 0 no limit.
	Metadata(ctx context.Context, metric string, limit int) (map[string][]metadata.Metadata, error)
}

// Deleter is what the admin API needs of a store that can delete series.
type Deleter interface {
	// Delete removes the samples of the series selected by ms in
	// [start, end] (inclusive, ms) and reports how many rows it touched.
	Delete(ctx context.Context, start, end int64, ms ...*labels.Matcher) (int, error)
}

// JSON serves f's answer in the query API's envelope, with its form
// parsing, timeout and gzip, f's warnings as the envelope's, and f's error
// through classify (storeerr's kinds; anything else 500 internal). The web
// UI's /api/v1/status/ endpoints are served through it, so that every
// /api/v1/ path answers one way.
func (a *API) JSON(name string, f func(*http.Request) (data any, warnings []string, err error)) http.Handler {
	return a.handler(func(r *http.Request) (any, annotations.Annotations, *apiError) {
		data, warnings, err := f(r)
		var ann annotations.Annotations
		for _, w := range warnings {
			ann = ann.Add(errors.New(w))
		}
		if err != nil {
			return nil, ann, storeError(err)
		}
		return data, ann, nil
	}, name)
}

// noContent is the data of an answer that has none: 204, as Prometheus
// answers a delete.
type noContent struct{}

// metadata serves GET /api/v1/metadata?metric=&limit= as Prometheus does,
// so Grafana and promtool can use it: limit absent or negative means all
// families, 0 means none.
func (a *API) metadata(r *http.Request) (any, annotations.Annotations, *apiError) {
	limit := -1
	if s := r.FormValue("limit"); s != "" {
		var err error
		if limit, err = strconv.Atoi(s); err != nil {
			return nil, nil, badData(errors.New("limit must be a number"))
		}
	}
	res := map[string][]metadata.Metadata{}
	ms, ok := a.store.(MetadataStore)
	if limit == 0 || !ok {
		return res, nil, nil
	}
	got, err := ms.Metadata(r.Context(), r.FormValue("metric"), max(limit, 0))
	if err != nil {
		apiErr := storeError(err)
		a.logger.Warn("Metadata query failed", "status", apiErr.typ.status(), "err", err)
		return nil, nil, apiErr
	}
	// Enforce the limit even if the store returns more, keeping the
	// alphabetically first families so answers are stable.
	names := make([]string, 0, len(got))
	for name := range got {
		names = append(names, name)
	}
	slices.Sort(names)
	if limit > 0 && len(names) > limit {
		names = names[:limit]
	}
	for _, name := range names {
		res[name] = got[name]
	}
	return res, nil, nil
}

// deleteSeries serves Prometheus's delete_series admin call with the same
// parameters: one or more match[] selectors, optional start and end as RFC
// 3339 or Unix seconds (default: all time). Like Prometheus it answers 204
// and is off unless the operator turns the admin API on.
func (a *API) deleteSeries(r *http.Request) (any, annotations.Annotations, *apiError) {
	d := a.store.(Deleter) // Register serves this route only for a Deleter
	selectors := r.Form["match[]"]
	if len(selectors) == 0 {
		return nil, nil, badData(errors.New("no match[] parameter: name the series to delete, e.g. match[]={job=\"old\"}"))
	}
	start, end, apiErr := adminRange(r)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	// Parse every selector before deleting anything.
	sets := make([][]*labels.Matcher, 0, len(selectors))
	for _, s := range selectors {
		ms, err := a.parser.ParseMetricSelector(s)
		if err != nil {
			return nil, nil, badData(fmt.Errorf("invalid match[] %q: %v", s, err))
		}
		// A selector whose every matcher also matches the empty string
		// selects every series ({} parses too): refused, by the rule
		// Prometheus applies to the match[] of /api/v1/series, so a typo
		// cannot wipe a keyspace other writers share. (Prometheus's own
		// delete_series does not check it.)
		if !slices.ContainsFunc(ms, func(m *labels.Matcher) bool { return !m.Matches("") }) {
			return nil, nil, badData(fmt.Errorf("invalid match[] %q: match[] must contain at least one non-empty matcher", s))
		}
		sets = append(sets, ms)
	}
	for i, ms := range sets {
		n, err := d.Delete(r.Context(), start, end, ms...)
		if err != nil {
			a.logger.Warn("Delete failed", "match", selectors[i], "err", err)
			apiErr := storeError(err)
			apiErr.err = fmt.Errorf("delete %s: %w", selectors[i], err)
			return nil, nil, apiErr
		}
		a.logger.Info("Deleted series", "match", selectors[i], "start", start, "end", end, "rows", n)
	}
	return noContent{}, nil, nil
}

// adminRange is the start and end of an admin call, in ms. The admin
// calls delete or recompute what they cover, so their times are read more
// strictly than Prometheus reads them (its parser takes NaN, and a NaN
// start deleted every sample): each given at most once and not empty (an
// empty start from a template whose variable is unset would otherwise mean
// all time), and a finite time within Prometheus's bounds. Absent, they
// cover every time the layout can hold, not only the query API's default
// range. A time finer than the millisecond is rounded inward, so that no
// sample outside it is touched.
func adminRange(r *http.Request) (start, end int64, _ *apiError) {
	start, apiErr := adminTime(r, "start", math.MinInt64, timeparam.CeilMilli)
	if apiErr != nil {
		return 0, 0, apiErr
	}
	end, apiErr = adminTime(r, "end", math.MaxInt64, timeparam.FloorMilli)
	if apiErr != nil {
		return 0, 0, apiErr
	}
	if start > end {
		return 0, 0, badData(errors.New("start is after end"))
	}
	return start, end, nil
}

// adminTime reads one time of an admin call (adminRange), def when absent.
func adminTime(r *http.Request, name string, def int64, toMillis func(time.Time) int64) (int64, *apiError) {
	vs, ok := r.Form[name]
	switch {
	case !ok:
		return def, nil
	case len(vs) > 1:
		return 0, badParam(fmt.Errorf("given %d times: give one time, or leave it out for all time", len(vs)), name)
	case vs[0] == "":
		return 0, badParam(errors.New("empty: give a time, or leave it out for all time"), name)
	}
	t, err := parseTime(vs[0])
	if err != nil {
		return 0, badParam(err, name)
	}
	return toMillis(t), nil
}

// Recomputer marks rollups for recomputation (rollupjob.Job).
type Recomputer interface {
	// Recompute marks the units that [start, end] (ms) touches of the
	// metrics the selectors name (a nil selector: every metric) and returns
	// the metrics marked.
	Recompute(ctx context.Context, selectors [][]*labels.Matcher, start, end int64) ([]string, error)
}

// recomputeRollups serves POST /api/v1/admin/rollups/recompute: match[]
// selectors (none: every metric), optional start and end as delete_series
// takes them. The rollup job sees what the adapters sharing its keyspace
// change; after KairosDB or another writer changed samples behind their
// back, an operator marks the range here. It answers once the marks are
// stored, with the metrics marked; the job recomputes them in the
// background. An admin call like delete_series: off unless the admin API is
// on.
func (a *API) recomputeRollups(r *http.Request) (any, annotations.Annotations, *apiError) {
	start, end, apiErr := adminRange(r)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	sets := [][]*labels.Matcher{nil}
	if selectors := r.Form["match[]"]; len(selectors) > 0 {
		sets = sets[:0]
		for _, s := range selectors {
			ms, err := a.parser.ParseMetricSelector(s)
			if err != nil {
				return nil, nil, badData(fmt.Errorf("invalid match[] %q: %v", s, err))
			}
			sets = append(sets, ms)
		}
	}
	rc := a.rollups()
	if rc == nil {
		return nil, nil, &apiError{errUnavailable, errors.New("the store is not open yet")}
	}
	metrics, err := rc.Recompute(r.Context(), sets, start, end)
	if err != nil {
		a.logger.Warn("Marking rollups for recomputation failed", "err", err)
		apiErr := storeError(err)
		apiErr.err = fmt.Errorf("mark rollups for recomputation: %w", err)
		return nil, nil, apiErr
	}
	a.logger.Info("Rollups marked for recomputation", "match", r.Form["match[]"], "start", start, "end", end, "metrics", len(metrics))
	return map[string][]string{"metrics": metrics}, nil, nil
}

// ErrCannotSnapshot is what Options.Snapshot returns, wrapped with the
// reason, when the store cannot be snapshotted from here: answered 422
// execution, Prometheus's answer to an admin call its mode cannot serve
// (an agent's), so that a client does not retry it as it would a 503.
var ErrCannotSnapshot = errors.New("cannot snapshot this store")

// snapshotStore serves Prometheus's snapshot admin call: it answers the
// snapshot's name, {"name": "..."}, as Prometheus does. Prometheus's
// skip_head (leave out what is not in blocks yet) is accepted and checked
// the way Prometheus parses it, and changes nothing: the store has no head
// apart from its blocks, and a snapshot holds every write acknowledged
// before the call.
func (a *API) snapshotStore(r *http.Request) (any, annotations.Annotations, *apiError) {
	switch vs := r.Form["skip_head"]; {
	case len(vs) > 1:
		return nil, nil, badParam(fmt.Errorf("given %d times: give it once, or leave it out", len(vs)), "skip_head")
	case len(vs) == 1 && vs[0] != "":
		if _, err := strconv.ParseBool(vs[0]); err != nil {
			return nil, nil, badParam(errors.New("not a boolean: give true or false"), "skip_head")
		}
	}
	name, err := a.snapshot(r.Context())
	if errors.Is(err, ErrCannotSnapshot) {
		return nil, nil, &apiError{errExec, err}
	}
	if err != nil {
		a.logger.Warn("Snapshot failed", "err", err)
		apiErr := storeError(err)
		apiErr.err = fmt.Errorf("snapshot: %w", err)
		return nil, nil, apiErr
	}
	a.logger.Info("Snapshot taken", "name", name)
	return map[string]string{"name": name}, nil, nil
}
