package queryapi

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"

	"github.com/kairos-remote/kairos-adapter/readhint"
)

// How a query's read hints reach the store. The query API parses a query
// once, rewrites and plans it on the syntax tree (rollups.go), and hands
// the engine that tree: the engine takes query text only and parses it
// with its parser, which is prepared, and which answers the handle it is
// given with the tree. The engine then passes each selector's own matchers
// to Select (populateSeries: n.LabelMatchers...), so the querier below
// knows each selector by its first matcher (the pointer, not the value:
// `sum_over_time(x[1h])` may read sums or, rewritten from count_over_time,
// counts) and puts its hint in the context of that Select, where the store
// reads it (readhint.From). Nothing of a hint is in a matcher, so no answer
// can carry one. TestRollupTable's rewritten count_over_time and
// avg_over_time fail if a Prometheus release stops passing the matchers so.

// selectorHints are the read hints of a query's selectors, by their first
// matcher.
type selectorHints map[*labels.Matcher]readhint.Hint

// prepared is the engine's parser: it answers a handle (put) with the tree
// it stands for, and parses anything else.
type prepared struct {
	parser.Parser
	mu    sync.Mutex
	next  uint64
	exprs map[string]parser.Expr
}

// put keeps e until the engine parses the handle returned, or drop.
// A handle starts with a character that no query may hold, and the query
// API parses every query itself before the engine sees it, so no text of
// a user is ever taken for a handle.
func (p *prepared) put(e parser.Expr) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	h := "\x00prepared " + strconv.FormatUint(p.next, 10)
	if p.exprs == nil {
		p.exprs = map[string]parser.Expr{}
	}
	p.exprs[h] = e
	return h
}

// drop forgets a handle that the engine did not parse (a query refused
// before its parse, or that waited for a slot until its deadline).
func (p *prepared) drop(h string) {
	p.mu.Lock()
	delete(p.exprs, h)
	p.mu.Unlock()
}

func (p *prepared) ParseExpr(s string) (parser.Expr, error) {
	p.mu.Lock()
	e, ok := p.exprs[s]
	delete(p.exprs, s)
	p.mu.Unlock()
	if ok {
		return e, nil
	}
	return p.Parser.ParseExpr(s)
}

// shard is the part of a query's series that it reads
// (RangeRequest.ShardIndex of ShardCount; count 0: all).
type shard struct{ index, count uint64 }

// queryable opens the store's querier for the range the engine asks for:
// that of the whole query. The engine passes each selector's matchers and
// hints to Select, where the query's shard (Prometheus's
// SelectHints.ShardIndex and ShardCount) and each selector's read hint are
// added.
func (a *API) queryable(sh shard, hints selectorHints) storage.Queryable {
	return storage.QueryableFunc(func(mint, maxt int64) (storage.Querier, error) {
		q, err := a.store.Querier(mint, maxt)
		if err != nil {
			return nil, err
		}
		return &narrowing{Querier: q, store: a.store, mint: mint, maxt: maxt, hints: hints, shard: sh}, nil
	})
}

// narrowing reads each selector only over the range its hints give (its
// own offset, @ time, range and lookback), not over the whole query's:
// in `x - x offset 1w` each selector reads its own hour, not the week
// between.
type narrowing struct {
	storage.Querier
	store      Store
	mint, maxt int64
	subs       []storage.Querier // closed with q, after the engine read their series
	hints      selectorHints
	shard      shard
}

func (q *narrowing) Close() error {
	errs := []error{q.Querier.Close()}
	for _, s := range q.subs {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

func (q *narrowing) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	if len(ms) > 0 {
		if h, ok := q.hints[ms[0]]; ok {
			ctx = readhint.With(ctx, h)
		}
	}
	if q.shard.count > 0 {
		var h storage.SelectHints
		if hints != nil {
			h = *hints
		} else {
			h = storage.SelectHints{Start: q.mint, End: q.maxt}
		}
		h.ShardIndex, h.ShardCount = q.shard.index, q.shard.count
		hints = &h
	}
	if hints == nil || hints.Start <= q.mint && hints.End >= q.maxt {
		return q.Querier.Select(ctx, sortSeries, hints, ms...)
	}
	sub, err := q.store.Querier(max(q.mint, hints.Start), min(q.maxt, hints.End))
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	q.subs = append(q.subs, sub)
	return sub.Select(ctx, sortSeries, hints, ms...)
}
