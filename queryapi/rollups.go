package queryapi

import (
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/kairos-remote/kairos-adapter/readhint"
	"github.com/kairos-remote/kairos-adapter/rollup"
)

// The query API plans how the store reads each selector, and the store
// obeys (kairosstore/rollupread.go): it gives a readhint.Hint to every
// selector it can read more cheaply than raw, which the engine's querier
// (hints.go) puts in the context of that selector's Select. Two ways:
//
//   - Rollups. min_over_time, max_over_time and sum_over_time of x[R] read
//     the rollup of that aggregate; count_over_time becomes sum_over_time
//     over the count rollup, avg_over_time their quotient, or, where each
//     window is one bucket, reads the buckets' means. Only where every
//     window is a whole number of buckets (R, the step, and the first
//     evaluation time minus the offset are multiples of the resolution), so
//     the result is exactly the raw one. rate and increase read the counter
//     rollup at a resolution of at most R/4, or one on whose bucket ends
//     every window ends (counter): within about 1 % of raw, not exact (the
//     store reads raw the windows where a series starts or stops). The
//     largest resolution allowed wins; with max_source_resolution=auto an
//     inexact one is at most step/5 (Thanos's rule; R for an instant
//     query), with a resolution at most that one, with 0 or raw none.
//   - Windows. A selector of a range query whose step is longer than what
//     it reads at each step (R, or the lookback delta of an instant
//     selector) reads only those windows, not the cells between them.
//
// A selector is planned only when its windows are those of the query's
// steps and its own range: not inside a subquery, without @, not anchored
// or smoothed, and naming its metric (so that the rollup series can be
// named).

// sourceResolution is a max_source_resolution: auto, or at most max (0:
// raw only).
type sourceResolution struct {
	auto bool
	max  rollup.Resolution
}

// parseSourceResolution reads max_source_resolution as Thanos names it:
// auto, 0 or raw, or one of the resolutions rollups are kept at.
func parseSourceResolution(s string, resolutions []rollup.Resolution) (sourceResolution, error) {
	switch s {
	case "", "auto":
		return sourceResolution{auto: true}, nil
	case "0", "0s", "raw":
		return sourceResolution{}, nil
	}
	d, err := model.ParseDuration(s)
	if err == nil {
		r := rollup.Resolution(d)
		if slices.Contains(resolutions, r) || r == rollup.Resolution(5*time.Minute) || r == rollup.Resolution(time.Hour) {
			return sourceResolution{max: r}, nil
		}
	}
	return sourceResolution{}, fmt.Errorf("max_source_resolution %q: want auto, 0 (or raw), or a rollup resolution such as 5m or 1h", s)
}

// planner plans the reads of one query.
type planner struct {
	start, step, lookback int64 // ms; step 0 for an instant query
	src                   sourceResolution
	resolutions           []rollup.Resolution // largest first
	hints                 selectorHints
	// dry plans without rewriting the tree: the hints only (FromRollups).
	dry bool
}

// newPlanner is the planner of a query from start at step, with the
// request's max_source_resolution in form.
func (a *API) newPlanner(form url.Values, lookback time.Duration, start time.Time, step time.Duration) (*planner, *apiError) {
	src := a.sourceRes
	if s := form.Get("max_source_resolution"); s != "" {
		var err error
		if src, err = parseSourceResolution(s, a.resolutions); err != nil {
			return nil, badParam(err, "max_source_resolution")
		}
	}
	return &planner{start: start.UnixMilli(), step: step.Milliseconds(), lookback: lookback.Milliseconds(), src: src, resolutions: a.resolutions}, nil
}

// planReads plans the reads of expr, the parsed query, in place: it
// rewrites the calls that read rollups on the syntax tree (count_over_time
// to a sum of counts, avg_over_time to sums over counts) and returns the
// hint of each planned selector.
func (a *API) planReads(form url.Values, opts promql.QueryOpts, expr parser.Expr, start time.Time, step time.Duration) (parser.Expr, selectorHints, *apiError) {
	lookback := a.lookback
	if d := opts.LookbackDelta(); d > 0 {
		lookback = d
	}
	p, apiErr := a.newPlanner(form, lookback, start, step)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	return p.expr(expr, false), p.hints, nil
}

// fromRollups reports whether the planner would read every selector of
// expr, a range query from start at step with the parameters form, from
// rollups (at any resolution; the store stitches raw samples on where the
// rollup job has not reached). It leaves expr as it is. A query without
// selectors, or whose max_source_resolution the query API refuses, is
// not.
func (a *API) fromRollups(expr parser.Expr, form url.Values, start time.Time, step time.Duration) bool {
	p, apiErr := a.newPlanner(form, a.lookback, start, step)
	if apiErr != nil || p.finest() == 0 {
		return false
	}
	p.dry = true
	p.expr(expr, false)
	selectors, rolled := 0, 0
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			selectors++
			if len(vs.LabelMatchers) > 0 && p.hints[vs.LabelMatchers[0]].Resolution != 0 {
				rolled++
			}
		}
		return nil
	})
	return selectors > 0 && rolled == selectors
}

// expr plans the selectors of e, inSub when e is inside a subquery; it
// returns e or what replaces it.
func (p *planner) expr(e parser.Expr, inSub bool) parser.Expr {
	switch n := e.(type) {
	case *parser.AggregateExpr:
		n.Expr = p.expr(n.Expr, inSub)
		if n.Param != nil {
			n.Param = p.expr(n.Param, inSub)
		}
	case *parser.BinaryExpr:
		n.LHS, n.RHS = p.expr(n.LHS, inSub), p.expr(n.RHS, inSub)
	case *parser.ParenExpr:
		n.Expr = p.expr(n.Expr, inSub)
	case *parser.UnaryExpr:
		n.Expr = p.expr(n.Expr, inSub)
	case *parser.SubqueryExpr:
		n.Expr = p.expr(n.Expr, true)
	case *parser.Call:
		return p.call(n, inSub)
	case *parser.VectorSelector:
		if !inSub && p.step > p.lookback && safe(n) {
			p.add(n, readhint.Hint{WindowMillis: p.lookback})
		}
	}
	return e
}

// call plans a function call: a range function of a selector reads
// rollups or windows, any other argument is planned as an expression.
func (p *planner) call(c *parser.Call, inSub bool) parser.Expr {
	for i, arg := range c.Args {
		ms, ok := arg.(*parser.MatrixSelector)
		if !ok {
			c.Args[i] = p.expr(arg, inSub)
			continue
		}
		vs, ok := ms.VectorSelector.(*parser.VectorSelector)
		if !ok || inSub || !safe(vs) {
			continue
		}
		rng := ms.Range.Milliseconds()
		var hint readhint.Hint
		if p.step > rng {
			hint = readhint.Hint{WindowMillis: rng}
		}
		switch c.Func.Name {
		case "min_over_time", "max_over_time", "sum_over_time", "count_over_time", "avg_over_time":
			if r := p.aligned(rng, vs.OriginalOffset.Milliseconds()); r != 0 {
				return p.rollupCall(c, ms, vs, hint, r)
			}
		case "rate", "increase":
			if r := p.counter(rng, vs.OriginalOffset.Milliseconds()); r != 0 {
				hint.Aggregate, hint.Resolution = rollup.Counter, r
			}
		}
		if hint != (readhint.Hint{}) {
			p.add(vs, hint)
		}
	}
	return c
}

// rollupCall rewrites an aggregation over time of x[R] to read rollups at r.
func (p *planner) rollupCall(c *parser.Call, ms *parser.MatrixSelector, vs *parser.VectorSelector, hint readhint.Hint, r rollup.Resolution) parser.Expr {
	hint.Resolution = r
	if p.dry {
		p.add(vs, hint)
		return c
	}
	switch c.Func.Name {
	case "min_over_time":
		hint.Aggregate = rollup.Min
	case "max_over_time":
		hint.Aggregate = rollup.Max
	case "sum_over_time":
		hint.Aggregate = rollup.Sum
	case "count_over_time":
		hint.Aggregate = rollup.Count
		c.Func = parser.Functions["sum_over_time"]
	case "avg_over_time":
		if ms.Range.Milliseconds() == r.Millis() {
			// Each window is one bucket, whose mean the store reads
			// (rollup.Avg): one selector, and no match of two. The
			// answer is the quotient's, but where a mean underflows to
			// -0: avg_over_time of it is 0, as over raw samples.
			hint.Aggregate = rollup.Avg
			break
		}
		// sum / count of the same windows: both keep the series' labels
		// but the name, so they match one to one. The count's selector
		// has matchers of its own, by which its Select is told apart
		// (selectorHints).
		countVS := *vs
		countVS.LabelMatchers = make([]*labels.Matcher, len(vs.LabelMatchers))
		for i, m := range vs.LabelMatchers {
			c := *m
			countVS.LabelMatchers[i] = &c
		}
		countMS := *ms
		countMS.VectorSelector = &countVS
		countHint := hint
		countHint.Aggregate = rollup.Count
		p.add(&countVS, countHint)
		hint.Aggregate = rollup.Sum
		p.add(vs, hint)
		sum := parser.Functions["sum_over_time"]
		// The new nodes stand where the call stood, for the positions
		// an annotation cites.
		at := c.PositionRange()
		return &parser.ParenExpr{PosRange: at, Expr: &parser.BinaryExpr{
			Op:             parser.DIV,
			LHS:            &parser.Call{Func: sum, Args: parser.Expressions{ms}, PosRange: at},
			RHS:            &parser.Call{Func: sum, Args: parser.Expressions{&countMS}, PosRange: at},
			VectorMatching: &parser.VectorMatching{Card: parser.CardOneToOne},
		}}
	}
	p.add(vs, hint)
	return c
}

// aligned is the largest resolution allowed whose buckets tile every
// window of a range rng evaluated at the query's steps, offset by off; 0
// when none does. The answer is then exact, so a resolution coarser than
// Thanos's step/5 may do (resolution): a year at a step of 6h reads one 6h
// bucket per window.
func (p *planner) aligned(rng, off int64) rollup.Resolution {
	return p.resolution(rng, func(r int64) (fits, exact bool) {
		return rng%r == 0 && p.ends(r, off), true
	})
}

// counter is the largest resolution allowed for rate or increase of a
// range rng (at least four of the finest resolution), offset by off: one
// of at most rng/4, whose points fall anywhere in a window, or one on
// whose bucket ends every window ends (the step and the first evaluation
// time minus off are multiples of it) and whose whole buckets cover all
// but at most a quarter of the window.
// rate then takes the same first and last points as from any finer
// resolution of those ends, so the coarse one reads fewer cells for the
// same answer; Grafana's rate(x[$__rate_interval]) at a step of 6h is a
// window of 6h plus one scrape interval, read from one 6h bucket.
func (p *planner) counter(rng, off int64) rollup.Resolution {
	if finest := p.finest(); finest == 0 || rng < 4*finest {
		// A few scrape intervals: raw's extrapolation from its first and
		// last samples and the buckets' exact increase differ by more than
		// the 1 % the rollups are held to.
		return 0
	}
	return p.resolution(rng, func(r int64) (fits, exact bool) {
		if p.ends(r, off) && r <= rng && rng%r <= rng/4 {
			return true, true
		}
		return r <= rng/4, false
	})
}

// ends says whether every window of the query ends on a bucket end of r
// (an instant query, step 0, has one window). start-off is taken modulo r
// from each term's remainder: the difference itself can wrap at
// Prometheus's bounds with an offset of centuries, and a wrapped
// difference has another remainder.
func (p *planner) ends(r, off int64) bool {
	return p.step%r == 0 && (p.start%r-off%r)%r == 0
}

// finest is the smallest resolution in ms; 0 with rollups off.
func (p *planner) finest() int64 {
	if len(p.resolutions) == 0 {
		return 0
	}
	return p.resolutions[len(p.resolutions)-1].Millis()
}

// resolution is the largest resolution allowed that fits. With auto,
// Thanos's rule holds (at most step/5), except that once the step admits
// rollups at all (the finest resolution is at most step/5), one that fits
// exactly (its buckets stand where the windows need them) may be coarser:
// its answer is the same, from fewer cells. Short steps stay raw.
func (p *planner) resolution(rng int64, fits func(r int64) (fits, exact bool)) rollup.Resolution {
	if !p.src.auto && p.src.max == 0 || p.finest() == 0 {
		return 0
	}
	limit := p.stepOr(rng) / 5
	admits := p.finest() <= limit
	for _, r := range p.resolutions {
		ms := r.Millis()
		if !p.src.auto && r > p.src.max {
			continue
		}
		ok, exact := fits(ms)
		if ok && (!p.src.auto || ms <= limit || exact && admits) {
			return r
		}
	}
	return 0
}

// stepOr is the query's step; an instant query's windows are one range
// apart as far as the rules go.
func (p *planner) stepOr(rng int64) int64 {
	if p.step == 0 {
		return rng
	}
	return p.step
}

// add gives vs hint h.
func (p *planner) add(vs *parser.VectorSelector, h readhint.Hint) {
	if p.hints == nil {
		p.hints = selectorHints{}
	}
	p.hints[vs.LabelMatchers[0]] = h
}

// safe says whether a selector is read at the query's steps over its own
// range, and names its metric.
func safe(vs *parser.VectorSelector) bool {
	return vs.Timestamp == nil && vs.StartOrEnd == 0 && !vs.Anchored && !vs.Smoothed &&
		slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
			return m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual && m.Value != ""
		})
}

// sortResolutions orders resolutions largest first, without duplicates.
func sortResolutions(rs []rollup.Resolution) []rollup.Resolution {
	rs = slices.Clone(rs)
	slices.Sort(rs)
	rs = slices.Compact(rs)
	slices.Reverse(rs)
	return rs
}
