package queryapi

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
)

// Limits bound what a query can cost before it is evaluated. Prometheus's
// engine allocates in proportion to some parameters of a query whatever the
// data: per-step statistics for every subquery step (16 bytes a step, so
// `[1y:1ms]` asks for hundreds of gigabytes, a fatal error no recover can
// catch), and its parser takes time that grows with the square of the
// nesting depth. Samples are bounded by --query.max-samples; these bound the
// rest.
type Limits struct {
	// MaxLength is the most bytes a PromQL expression may have.
	MaxLength int
	// MaxDepth is the deepest an expression may nest: brackets in its
	// text, and nodes in its syntax tree (a chain of binary operators
	// nests as deep as it has terms).
	MaxDepth int
	// MaxSubquerySteps is the most steps the subqueries of one query may
	// evaluate together.
	MaxSubquerySteps int
}

// Defaults: every dashboard query we know of fits, among them a 30-day SLO
// subquery at 1-minute resolution over a 90-day range (172,800 steps).
const (
	DefaultMaxLength        = 128 << 10
	DefaultMaxDepth         = 200
	DefaultMaxSubquerySteps = 1_000_000
)

func (l Limits) withDefaults() Limits {
	l.MaxLength = cmp.Or(l.MaxLength, DefaultMaxLength)
	l.MaxDepth = cmp.Or(l.MaxDepth, DefaultMaxDepth)
	l.MaxSubquerySteps = cmp.Or(l.MaxSubquerySteps, DefaultMaxSubquerySteps)
	return l
}

// parse checks the text of an expression against the limits, parses it,
// and checks the depth of its tree. The text is checked first because the
// parser's time grows faster than the text it reads.
func (a *API) parse(q string) (parser.Expr, error) {
	if len(q) > a.limits.MaxLength {
		return nil, fmt.Errorf("the expression is %d bytes long, more than the %d that --query.max-length allows", len(q), a.limits.MaxLength)
	}
	if d := bracketDepth(q); d > a.limits.MaxDepth {
		return nil, fmt.Errorf("the expression nests brackets %d deep, more than the %d that --query.max-depth allows", d, a.limits.MaxDepth)
	}
	expr, err := a.parser.ParseExpr(q)
	if err != nil {
		return nil, err
	}
	if d := treeDepth(expr, a.limits.MaxDepth); d > a.limits.MaxDepth {
		return nil, fmt.Errorf("the expression nests more than the %d levels that --query.max-depth allows (each operator, function call and bracket is a level)", a.limits.MaxDepth)
	}
	return expr, nil
}

// bracketDepth is the deepest nesting of (), [] and {} in a PromQL text,
// brackets inside string literals and comments aside. A text that does not
// parse may give any number: the parser says what is wrong with it.
func bracketDepth(q string) int {
	depth, deepest := 0, 0
	for i := 0; i < len(q); i++ {
		switch c := q[i]; c {
		case '(', '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ')', ']', '}':
			depth = max(depth-1, 0)
		case '#':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case '"', '\'', '`':
			for i++; i < len(q) && q[i] != c; i++ {
				if q[i] == '\\' && c != '`' {
					i++
				}
			}
		}
	}
	return deepest
}

// treeDepth is the depth of the syntax tree, counted up to limit+1.
func treeDepth(e parser.Node, limit int) int {
	deepest := 0
	var walk func(n parser.Node, d int)
	walk = func(n parser.Node, d int) {
		if d > deepest {
			deepest = d
		}
		if d > limit {
			return
		}
		for _, c := range parser.Children(n) {
			walk(c, d+1)
		}
	}
	walk(e, 1)
	return deepest
}

// checkSteps refuses a query whose subqueries would evaluate more steps
// than the limit. It counts them as the engine will evaluate them: each
// subquery over its parent's window widened by its range, at its step, and
// an expression fixed by @ once. It reads the tree of qry, which the
// engine has preprocessed (the @ modifier's start() and end() resolved,
// step-invariant parts marked) and not yet evaluated.
func (a *API) checkSteps(qry promql.Query, start, end time.Time, step time.Duration) *apiError {
	stmt, ok := qry.Statement().(*parser.EvalStmt)
	if !ok {
		return nil
	}
	expr := stmt.Expr
	interval := step.Milliseconds()
	if interval == 0 {
		interval = 1 // how the engine evaluates an instant query
	}
	if n := labelCopies(expr); n > maxLabelCopies {
		return badData(fmt.Errorf("label_replace and label_join would repeat a label value %d times in one label, more than the %d this adapter allows", n, maxLabelCopies))
	}
	limit := int64(a.limits.MaxSubquerySteps)
	total := subquerySteps(expr, start.UnixMilli(), end.UnixMilli(), interval, a.evalInterval, limit)
	if total > limit {
		return badData(fmt.Errorf("the subqueries of this query would evaluate more than %d steps (--query.max-subquery-steps). Try a larger subquery step or a shorter range", limit))
	}
	return nil
}

// maxLabelCopies bounds how many times label_replace and label_join may
// copy a label value into one label, nested calls multiplied: the engine
// builds the new value whole for every series, so `$1` written 20,000 times
// over a 64 KB value would need 1.3 GB for one label. No query we know of
// needs more than a handful of copies.
const maxLabelCopies = 64

// labelCopies is the most copies of one label value that the label_replace
// and label_join calls under n can put into one label: each `$` of a
// replacement and each source label of a join is a copy.
func labelCopies(n parser.Node) int {
	copies := 1
	if call, ok := n.(*parser.Call); ok && len(call.Args) > 0 {
		switch call.Func.Name {
		case "label_replace":
			if len(call.Args) > 2 {
				if s, ok := Unparen(call.Args[2]).(*parser.StringLiteral); ok {
					copies = max(1, strings.Count(s.Val, "$"))
				}
			}
		case "label_join":
			copies = max(1, len(call.Args)-3)
		}
	}
	deepest := 1
	for _, c := range parser.Children(n) {
		deepest = max(deepest, labelCopies(c))
		if deepest > maxLabelCopies {
			break
		}
	}
	return min(copies*deepest, maxLabelCopies*maxLabelCopies)
}

// Unparen is e without the parentheses around it, for the frontend's
// reading of a query as for the limits'.
func Unparen(e parser.Expr) parser.Expr {
	for {
		p, ok := e.(*parser.ParenExpr)
		if !ok {
			return e
		}
		e = p.Expr
	}
}

// subquerySteps adds up the steps of the subqueries under n evaluated over
// [start, end] at interval, as promql's evaluator does (runSubquery),
// stopping once the sum is past limit.
func subquerySteps(n parser.Node, start, end, interval, noStepInterval, limit int64) int64 {
	switch e := n.(type) {
	case *parser.StepInvariantExpr:
		return subquerySteps(e.Expr, start, start, interval, noStepInterval, limit)
	case *parser.SubqueryExpr:
		offset, rng := e.Offset.Milliseconds(), e.Range.Milliseconds()
		if e.Timestamp != nil {
			start, end = *e.Timestamp, *e.Timestamp
		}
		if interval > 0 {
			end = start + (end-start)/interval*interval
		}
		sub := e.Step.Milliseconds()
		if sub <= 0 {
			sub = noStepInterval
		}
		subEnd := end - offset
		subStart := sub * ((start - offset - rng) / sub)
		if subStart <= start-offset-rng {
			subStart += sub
		}
		if subEnd < subStart {
			return 0
		}
		steps := (subEnd-subStart)/sub + 1
		if steps > limit || steps < 0 {
			return limit + 1
		}
		return steps + subquerySteps(e.Expr, subStart, subEnd, sub, noStepInterval, limit-steps)
	}
	var total int64
	for _, c := range parser.Children(n) {
		total += subquerySteps(c, start, end, interval, noStepInterval, limit-total)
		if total > limit {
			return total
		}
	}
	return total
}
