package queryapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/annotations"
)

// parseQuery answers /api/v1/parse_query: the query's syntax tree in the
// JSON shape of Prometheus's answer, which its UI draws as a tree. Each
// node is an object with a "type" and the fields of that type; durations
// are in milliseconds, numbers are strings.
func (a *API) parseQuery(r *http.Request) (any, annotations.Annotations, *apiError) {
	expr, apiErr := a.parseInGate(r)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	tree, err := astJSON(expr)
	if err != nil {
		return nil, nil, &apiError{errInternal, err}
	}
	return tree, nil, nil
}

type matcherJSON struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Type  string `json:"type"`
}

type selectorJSON struct {
	Type       string        `json:"type"`
	Name       string        `json:"name"`
	Offset     int64         `json:"offset"`
	OffsetExpr any           `json:"offsetExpr"`
	Matchers   []matcherJSON `json:"matchers"`
	Timestamp  *int64        `json:"timestamp"`
	StartOrEnd *string       `json:"startOrEnd"`
	Anchored   bool          `json:"anchored"`
	Smoothed   bool          `json:"smoothed"`
}

// matrixSelectorJSON is a vector selector with a range.
type matrixSelectorJSON struct {
	*selectorJSON
	Range     int64 `json:"range"`
	RangeExpr any   `json:"rangeExpr"`
}

type functionJSON struct {
	Name       string             `json:"name"`
	ArgTypes   []parser.ValueType `json:"argTypes"`
	Variadic   int                `json:"variadic"`
	ReturnType parser.ValueType   `json:"returnType"`
}

type matchingJSON struct {
	Card       string   `json:"card"`
	Labels     []string `json:"labels"`
	On         bool     `json:"on"`
	Include    []string `json:"include"`
	FillValues struct {
		LHS *float64 `json:"lhs"`
		RHS *float64 `json:"rhs"`
	} `json:"fillValues"`
}

// astJSON is node in parse_query's shape.
func astJSON(node parser.Expr) (any, error) {
	if node == nil {
		return nil, nil
	}
	// sub collects the first error of the children.
	var firstErr error
	sub := func(e parser.Expr) any {
		v, err := astJSON(e)
		if firstErr == nil {
			firstErr = err
		}
		return v
	}
	var out any
	switch n := node.(type) {
	case *parser.NumberLiteral:
		out = map[string]string{"type": "numberLiteral", "val": formatNumber(n.Val)}
	case *parser.StringLiteral:
		out = map[string]string{"type": "stringLiteral", "val": n.Val}
	case *parser.ParenExpr:
		out = map[string]any{"type": "parenExpr", "expr": sub(n.Expr)}
	case *parser.UnaryExpr:
		out = map[string]any{"type": "unaryExpr", "op": n.Op.String(), "expr": sub(n.Expr)}
	case *parser.AggregateExpr:
		out = map[string]any{
			"type": "aggregation", "op": n.Op.String(), "expr": sub(n.Expr), "param": sub(n.Param),
			"grouping": nonNil(n.Grouping), "without": n.Without,
		}
	case *parser.BinaryExpr:
		var matching *matchingJSON
		if m := n.VectorMatching; m != nil {
			matching = &matchingJSON{Card: m.Card.String(), Labels: nonNil(m.MatchingLabels), On: m.On, Include: nonNil(m.Include)}
			matching.FillValues.LHS, matching.FillValues.RHS = m.FillValues.LHS, m.FillValues.RHS
		}
		out = map[string]any{
			"type": "binaryExpr", "op": n.Op.String(), "lhs": sub(n.LHS), "rhs": sub(n.RHS),
			"matching": matching, "bool": n.ReturnBool,
		}
	case *parser.Call:
		args := make([]any, 0, len(n.Args))
		for _, arg := range n.Args {
			args = append(args, sub(arg))
		}
		f := functionJSON{Name: n.Func.Name, ArgTypes: n.Func.ArgTypes, Variadic: n.Func.Variadic, ReturnType: n.Func.ReturnType}
		out = map[string]any{"type": "call", "func": f, "args": args}
	case *parser.VectorSelector:
		out = vectorSelectorJSON(n)
	case *parser.MatrixSelector:
		vs, ok := n.VectorSelector.(*parser.VectorSelector)
		if !ok {
			return nil, fmt.Errorf("a matrix selector over %T", n.VectorSelector)
		}
		s := vectorSelectorJSON(vs)
		s.Type = "matrixSelector"
		out = matrixSelectorJSON{selectorJSON: s, Range: n.Range.Milliseconds(), RangeExpr: durationJSON(n.RangeExpr)}
	case *parser.SubqueryExpr:
		out = map[string]any{
			"type": "subquery", "expr": sub(n.Expr),
			"range": n.Range.Milliseconds(), "rangeExpr": durationJSON(n.RangeExpr),
			"offset": n.OriginalOffset.Milliseconds(), "offsetExpr": durationJSON(n.OriginalOffsetExpr),
			"step": n.Step.Milliseconds(), "stepExpr": durationJSON(n.StepExpr),
			"timestamp": n.Timestamp, "startOrEnd": startOrEnd(n.StartOrEnd),
		}
	case *parser.DurationExpr:
		out = durationJSON(n)
	default:
		return nil, fmt.Errorf("no JSON form for the expression %s (%T)", node, node)
	}
	return out, firstErr
}

func vectorSelectorJSON(n *parser.VectorSelector) *selectorJSON {
	ms := make([]matcherJSON, 0, len(n.LabelMatchers))
	for _, m := range n.LabelMatchers {
		ms = append(ms, matcherJSON{Name: m.Name, Value: m.Value, Type: m.Type.String()})
	}
	return &selectorJSON{
		Type: "vectorSelector", Name: n.Name,
		Offset: n.OriginalOffset.Milliseconds(), OffsetExpr: durationJSON(n.OriginalOffsetExpr),
		Matchers: ms, Timestamp: n.Timestamp, StartOrEnd: startOrEnd(n.StartOrEnd),
		Anchored: n.Anchored, Smoothed: n.Smoothed,
	}
}

// durationJSON is a duration expression (offset, range, step): null when
// the duration was a plain literal, and its number literals carry whether
// they were written as durations.
func durationJSON(e *parser.DurationExpr) any {
	if e == nil {
		return nil
	}
	return map[string]any{"type": "durationExpr", "op": e.Op.String(), "lhs": durationOperand(e.LHS), "rhs": durationOperand(e.RHS), "wrapped": e.Wrapped}
}

func durationOperand(e parser.Expr) any {
	switch n := e.(type) {
	case nil:
		return nil
	case *parser.DurationExpr:
		return durationJSON(n)
	case *parser.NumberLiteral:
		if n == nil {
			return nil
		}
		return map[string]any{"type": "numberLiteral", "val": formatNumber(n.Val), "duration": n.Duration}
	}
	v, _ := astJSON(e)
	return v
}

func formatNumber(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func startOrEnd(t parser.ItemType) *string {
	if t == 0 {
		return nil
	}
	s := t.String()
	return &s
}

func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}
