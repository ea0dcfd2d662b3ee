package frontend

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/parser/posrange"
	"github.com/prometheus/prometheus/util/jsonutil"

	"github.com/kairos-remote/kairos-adapter/queryapi"
)

// shardPlan is how an aggregation is evaluated in shards by series: each
// shard's query reads only the series whose labels hash to it
// (queryapi.RangeRequest.ShardIndex), and the shards' answers combine by
// op. avg is evaluated as a sum and a count per shard.
type shardPlan struct {
	op      parser.ItemType
	n       int      // shards
	queries []string // one per shard; for avg the sums, then the counts
	// positions maps, per query, where each node of the shard's text
	// starts to where it starts in the query's own text, so that the
	// annotations of a shard ("... (1:16)") point into the query.
	positions []map[posrange.Pos]posrange.Pos
}

// shardParts plans the shards of q's parts, if any (shardsPerPart).
func (f *Frontend) shardParts(q *rangeQuery) {
	if n := shardsPerPart(f.opts.Shards, f.opts.Parallelism, len(q.parts)); n > 1 {
		q.shard = planShards(q.query, q.expr, f.parser, n)
	}
}

// shardsPerPart is how many shards each of a query's parts is evaluated
// in: shards when set, else (0) as many as fill the cores that the parts
// leave idle. Shards are for a query of fewer parts than cores (a day is
// one): once the parts alone keep parallelism sub-queries busy, a shard
// only adds what every sub-query costs besides its series (a parse and
// plan, the store's lookup of the series and its row_keys checks; avg
// doubles the count, a sum and a count per shard): see BENCHMARKS.md,
// "Issue #30: the five panels".
func shardsPerPart(shards, parallelism, parts int) int {
	if shards > 0 {
		return shards
	}
	if parts <= 0 || parts >= parallelism {
		return 1
	}
	return min((parallelism-1)/parts+1, maxAutoShards)
}

// maxAutoShards bounds the shards --query.parallelism alone asks for: it
// is a count of goroutines, which an operator may set far above the cores
// (shards that cannot run at once only add evaluations), and each shard
// is a query text and a position map held until the part is answered.
const maxAutoShards = 64

// shardableFuncs are the functions whose every output series is computed
// from one input series alone, so that a series' shard holds all it needs.
var shardableFuncs = map[string]bool{
	"rate": true, "increase": true, "delta": true, "irate": true, "idelta": true,
	"deriv": true, "predict_linear": true, "resets": true, "changes": true,
	"avg_over_time": true, "min_over_time": true, "max_over_time": true, "sum_over_time": true,
	"count_over_time": true, "last_over_time": true, "present_over_time": true,
	"stddev_over_time": true, "stdvar_over_time": true, "quantile_over_time": true, "mad_over_time": true,
	"abs": true, "ceil": true, "floor": true, "exp": true, "sqrt": true, "ln": true, "log2": true,
	"log10": true, "round": true, "sgn": true, "clamp": true, "clamp_min": true, "clamp_max": true,
}

// planShards returns the shard queries of e, or nil when e is not an
// aggregation the shards can combine exactly: sum, min, max, count or avg
// (by or without any labels) over an expression in which every series is
// computed from one series of one metric alone (shardableFuncs, arithmetic
// with constants, subqueries of those). Every selector must name its
// metric: two metrics with otherwise equal labels would collide once a
// function drops their names, an error that only the whole query sees.
func planShards(q string, e parser.Expr, p parser.Parser, n int) *shardPlan {
	agg, ok := queryapi.Unparen(e).(*parser.AggregateExpr)
	if !ok || agg.Param != nil || !perSeries(agg.Expr) {
		return nil
	}
	switch agg.Op {
	case parser.SUM, parser.MIN, parser.MAX, parser.COUNT, parser.AVG:
	default:
		return nil
	}
	plan := &shardPlan{op: agg.Op, n: n}
	ops := []parser.ItemType{agg.Op}
	if agg.Op == parser.AVG {
		ops = []parser.ItemType{parser.SUM, parser.COUNT}
	}
	for _, op := range ops {
		// Every shard of op evaluates the same text: the shard travels
		// beside it (queryapi.RangeRequest.ShardIndex).
		e2, err := p.ParseExpr(q)
		if err != nil {
			return nil
		}
		a := queryapi.Unparen(e2).(*parser.AggregateExpr)
		a.Op = op
		text := a.String()
		pos, ok := positionMap(e, text, p)
		if !ok {
			return nil
		}
		for range n {
			plan.queries = append(plan.queries, text)
			plan.positions = append(plan.positions, pos)
		}
	}
	return plan
}

// positionMap pairs the nodes of the query (orig) with those of a shard's
// text, which has the same tree but for avg's operator.
func positionMap(orig parser.Expr, text string, p parser.Parser) (map[posrange.Pos]posrange.Pos, bool) {
	shard, err := p.ParseExpr(text)
	if err != nil {
		return nil, false
	}
	nodes := func(e parser.Expr) []parser.Node {
		var out []parser.Node
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			// Absent children (an aggregation's parameter) come as
			// nil, some of them typed.
			if n != nil && !reflect.ValueOf(n).IsNil() {
				out = append(out, n)
			}
			return nil
		})
		return out
	}
	a, b := nodes(queryapi.Unparen(orig)), nodes(queryapi.Unparen(shard))
	if len(a) != len(b) {
		return nil, false
	}
	m := make(map[posrange.Pos]posrange.Pos, len(a))
	for i := range a {
		if fmt.Sprintf("%T", a[i]) != fmt.Sprintf("%T", b[i]) {
			return nil, false
		}
		m[b[i].PositionRange().Start] = a[i].PositionRange().Start
	}
	return m, true
}

// annotationPos is the position Prometheus appends to an annotation.
var annotationPos = regexp.MustCompile(`^(.*) \((\d+):(\d+)\)$`)

// translate rewrites the positions of a shard's annotations into the
// query's own; ok is false for one it cannot place.
func translate(anns []string, pos map[posrange.Pos]posrange.Pos, query string) ([]string, bool) {
	out := make([]string, 0, len(anns))
	for _, a := range anns {
		m := annotationPos.FindStringSubmatch(a)
		if m == nil {
			// Without a position ("N more ... omitted"): as it is.
			out = append(out, a)
			continue
		}
		line, _ := strconv.Atoi(m[2])
		col, _ := strconv.Atoi(m[3])
		orig, ok := pos[posrange.Pos(col-1)]
		if line != 1 || !ok {
			return nil, false
		}
		out = append(out, m[1]+" ("+posrange.PositionRange{Start: orig}.StartPosInput(query, 0)+")")
	}
	return out, true
}

// perSeries reports whether each series of e comes from one series of one
// named metric.
func perSeries(e parser.Expr) bool {
	switch n := e.(type) {
	case *parser.ParenExpr:
		return perSeries(n.Expr)
	case *parser.UnaryExpr:
		return perSeries(n.Expr)
	case *parser.VectorSelector:
		return namesMetric(n)
	case *parser.MatrixSelector:
		vs, ok := n.VectorSelector.(*parser.VectorSelector)
		return ok && namesMetric(vs)
	case *parser.SubqueryExpr:
		return perSeries(n.Expr)
	case *parser.Call:
		if !shardableFuncs[n.Func.Name] {
			return false
		}
		vectors := 0
		for _, a := range n.Args {
			if constant(a) {
				continue
			}
			if !perSeries(a) {
				return false
			}
			vectors++
		}
		return vectors == 1
	case *parser.BinaryExpr:
		switch {
		case constant(n.LHS):
			return perSeries(n.RHS)
		case constant(n.RHS):
			return perSeries(n.LHS)
		}
	}
	return false
}

// constant reports whether e is a scalar that reads no series: the same in
// every shard.
func constant(e parser.Expr) bool {
	if e.Type() != parser.ValueTypeScalar {
		return false
	}
	reads := false
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		switch node.(type) {
		case *parser.VectorSelector, *parser.MatrixSelector:
			reads = true
		}
		return nil
	})
	return !reads
}

func namesMetric(vs *parser.VectorSelector) bool {
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			return true
		}
	}
	return false
}

// shardOf is the part of the series one shard's query reads.
type shardOf struct{ index, count uint64 }

// evalSharded evaluates the shards of q over [start, end] and combines
// them; ok is false when their answers cannot be combined exactly: native
// histograms (whose sums the frontend does not add), annotations of avg's
// sums and counts, or annotations whose positions cannot be placed in the
// query's text.
func (f *Frontend) evalSharded(ctx context.Context, q *rangeQuery, start, end int64, sem chan struct{}) (*matrix, bool, *queryapi.Error) {
	plan := q.shard
	answers := make([]*matrix, len(plan.queries))
	err := f.fanOut(ctx, len(plan.queries), "a shard of the query", func(ctx context.Context, i int) (err *queryapi.Error) {
		f.metrics.shards.Inc()
		answers[i], err = f.call(ctx, plan.queries[i], q, start, end, sem, &shardOf{uint64(i % plan.n), uint64(plan.n)})
		return err
	})
	if err != nil {
		return nil, false, err
	}
	var warnings, infos []string
	for i, a := range answers {
		if len(a.warnings) > 0 || len(a.infos) > 0 {
			// avg's shards are sums and counts: their annotations
			// would name the wrong aggregation.
			if plan.op == parser.AVG {
				return nil, false, nil
			}
			w, ok1 := translate(a.warnings, plan.positions[i], q.query)
			in, ok2 := translate(a.infos, plan.positions[i], q.query)
			if !ok1 || !ok2 {
				return nil, false, nil
			}
			warnings, infos = appendNew(warnings, w), appendNew(infos, in)
		}
		for _, s := range a.series {
			if len(s.hists) > 0 {
				return nil, false, nil
			}
		}
	}
	if plan.op == parser.AVG {
		n := len(answers) / 2
		sums, ok1 := combine(parser.SUM, answers[:n])
		counts, ok2 := combine(parser.SUM, answers[n:])
		if !ok1 || !ok2 || !finite(sums) {
			return nil, false, nil
		}
		return divide(sums, counts), true, nil
	}
	g, ok := combine(plan.op, answers)
	if !ok || (plan.op == parser.SUM && !finite(g)) {
		return nil, false, nil
	}
	m := toMatrix(g)
	m.warnings, m.infos = warnings, infos
	return m, true, nil
}

// finite reports whether no combined value is infinite. A sum of shards
// that overflowed is evaluated whole: the engine's avg turns to an
// incremental mean where a sum of finite values overflows, so the whole
// answer is finite where the shards' sum is not; and whether a sum of
// finite values overflows depends on the order of its additions. An
// infinite input costs the whole evaluation too (rare; the answer is the
// same). NaN is not re-evaluated: it comes out in any order, and summaries
// with no observation (NaN quantiles) are common. Left: a whole sum that
// overflows where no shard's does, and shards overflowing both ways into
// NaN (values near 1.8e308).
func finite(groups map[string]*group) bool {
	for _, g := range groups {
		for _, v := range g.vals {
			if math.IsInf(v, 0) {
				return false
			}
		}
	}
	return true
}

// group is one output series of the shards being combined.
type group struct {
	metric []byte
	labels labels.Labels
	vals   map[int64]float64
	// comp is the compensation of a Neumaier sum per time, as the
	// engine's own sum keeps one, so that a sum of shards that cancel
	// loses no more than the whole query's sum.
	comp map[int64]float64
}

// combine folds the shards' series by labels and time: sums (and counts)
// add, min and max keep the least and greatest, NaN only when every shard
// has NaN, as the engine's min and max do.
func combine(op parser.ItemType, answers []*matrix) (map[string]*group, bool) {
	out := map[string]*group{}
	for _, a := range answers {
		for _, s := range a.series {
			k := string(s.labels.Bytes(nil))
			g := out[k]
			if g == nil {
				g = &group{metric: s.metric, labels: s.labels, vals: make(map[int64]float64, len(s.floats)), comp: map[int64]float64{}}
				out[k] = g
			}
			for _, p := range s.floats {
				v, err := parseValue(p.v)
				if err != nil {
					return nil, false
				}
				have, ok := g.vals[p.t]
				switch {
				case !ok:
					g.vals[p.t] = v
				case op == parser.SUM || op == parser.COUNT:
					g.vals[p.t], g.comp[p.t] = neumaierAdd(have, v, g.comp[p.t])
				case op == parser.MAX:
					if have < v || math.IsNaN(have) {
						g.vals[p.t] = v
					}
				case op == parser.MIN:
					if have > v || math.IsNaN(have) {
						g.vals[p.t] = v
					}
				}
			}
		}
	}
	return out, true
}

// neumaierAdd adds v to sum, carrying the lost low-order part in c.
func neumaierAdd(sum, v, c float64) (float64, float64) {
	t := sum + v
	switch {
	case math.IsInf(t, 0):
		c = 0
	case math.Abs(sum) >= math.Abs(v):
		c += (sum - t) + v
	default:
		c += (v - t) + sum
	}
	return t, c
}

// settle adds each time's compensation to its sum.
func (g *group) settle() {
	for t, c := range g.comp {
		if v := g.vals[t]; !math.IsInf(v, 0) && !math.IsNaN(c) {
			g.vals[t] = v + c
		}
	}
	clear(g.comp)
}

func divide(sums, counts map[string]*group) *matrix {
	for k, g := range sums {
		g.settle()
		c := counts[k]
		if c != nil {
			c.settle()
		}
		for t, v := range g.vals {
			if c == nil {
				delete(g.vals, t)
				continue
			}
			g.vals[t] = v / c.vals[t]
		}
	}
	return toMatrix(sums)
}

func toMatrix(groups map[string]*group) *matrix {
	m := &matrix{series: make([]*series, 0, len(groups))}
	s := json.BorrowStream(nil)
	defer json.ReturnStream(s)
	for _, g := range groups {
		g.settle()
		if len(g.vals) == 0 {
			continue
		}
		sr := &series{metric: g.metric, labels: g.labels, floats: make([]point, 0, len(g.vals))}
		for t, v := range g.vals {
			s.Reset(nil)
			jsonutil.MarshalFloat(v, s)
			sr.floats = append(sr.floats, point{t: t, v: append([]byte(nil), s.Buffer()...)})
		}
		sortPoints(sr.floats)
		m.series = append(m.series, sr)
	}
	sortSeries(m.series)
	return m
}

func parseValue(b []byte) (float64, error) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return 0, errNotFloat
	}
	return strconv.ParseFloat(string(b[1:len(b)-1]), 64)
}
