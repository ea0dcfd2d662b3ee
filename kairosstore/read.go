package kairosstore

import (
	"context"
	"slices"
	"sync"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
	"github.com/kairos-remote/kairos-adapter/readhint"
)

// Querier returns a querier over [mint, maxt] (inclusive, ms).
func (s *Store) Querier(mint, maxt int64) (storage.Querier, error) {
	return &querier{s: s, mint: mint, maxt: maxt}, nil
}

type querier struct {
	s          *Store
	mint, maxt int64
	// reads are the data_points reads its series sets launched. Close
	// cancels those still running (a query refused or abandoned leaves
	// reads ahead of it) and waits for them, so that nothing reads the
	// engine after the querier is closed, and the engine may be.
	reads   sync.WaitGroup
	mu      sync.Mutex
	cancels []context.CancelFunc
}

func (q *querier) Close() error {
	q.mu.Lock()
	for _, cancel := range q.cancels {
		cancel()
	}
	q.cancels = nil
	q.mu.Unlock()
	q.reads.Wait()
	return nil
}

// Select runs KairosDB's three-phase read (§7): the series and their rows
// from the indexes (index.Index.Select), then data_points slices
// (seriesset.go, cells.go). Series come sorted by labels whatever
// sortSeries says; their samples are read lazily, a bounded number of
// series ahead of the consumer, so memory does not grow with the size of
// the result.
func (q *querier) Select(ctx context.Context, _ bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	return q.sel(ctx, hints, ms, false)
}

// sel is Select; with chunked, the series set's reads encode XOR chunks
// (chunks.go) instead of keeping samples.
func (q *querier) sel(ctx context.Context, hints *storage.SelectHints, ms []*labels.Matcher, chunked bool) storage.SeriesSet {
	if hints != nil && hints.Func == "series" {
		return q.selectIndex(ctx, ms) // labels.go: no sample needed
	}
	if hints != nil && hints.ShardCount > 0 && hints.ShardIndex >= hints.ShardCount {
		return storage.ErrSeriesSet(badRequest("shard %d of %d: no such shard", hints.ShardIndex, hints.ShardCount))
	}
	// Chunked reads (remote read's streamed answers) encode raw cells
	// only: of the hints they apply the shard. Read hints come from the
	// query API; remote read gives none (README, "Long ranges"). The read
	// is planned while the index finds the series.
	var (
		planned *plannedRead
		planErr error
	)
	planned1 := make(chan struct{})
	if chunked {
		close(planned1)
	} else {
		go func() {
			defer close(planned1)
			// Not the request's goroutine: a panic here would end the
			// process.
			defer func() {
				if p := recover(); p != nil {
					planned, planErr = nil, recovered.Err(q.s.log, "a read's plan", p)
				}
			}()
			if planned, planErr = q.s.planRead(ctx, readhint.From(ctx), hints, q.mint, q.maxt); planErr == nil {
				if name, ok := metricName(ms); ok {
					q.s.prefetchNonFinite(ctx, planned, name)
				}
			}
		}()
	}
	series, err := q.s.selectSeries(ctx, index.Query{Matchers: ms, Start: q.mint, End: q.maxt})
	<-planned1
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	series = shard(series, hints)
	if len(series) == 0 {
		return storage.EmptySeriesSet()
	}
	if planErr != nil {
		return storage.ErrSeriesSet(planErr)
	}
	ctx, cancel := context.WithCancel(ctx)
	q.mu.Lock()
	q.cancels = append(q.cancels, cancel)
	q.mu.Unlock()
	return newSeriesSet(ctx, q.s, series, q.mint, q.maxt, &q.reads, chunked, planned)
}

// metricName is the metric name every series ms selects has, where one
// matcher says it exactly.
func metricName(ms []*labels.Matcher) (string, bool) {
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual && m.Value != "" {
			return m.Value, true
		}
	}
	return "", false
}

// shard keeps the series of the hints' shard (SelectHints.ShardIndex of
// ShardCount), by the hash of their labels, so that one aggregation can be
// evaluated in parts by series (the frontend's sharding).
func shard(series []*index.Series, hints *storage.SelectHints) []*index.Series {
	if hints == nil || hints.ShardCount == 0 {
		return series
	}
	return slices.DeleteFunc(series, func(s *index.Series) bool { return s.Labels.Hash()%hints.ShardCount != hints.ShardIndex })
}

// selectSeries is the series a query selects (index.Index.Select), at most
// --query.max-series of them.
func (s *Store) selectSeries(ctx context.Context, q index.Query) ([]*index.Series, error) {
	sel, err := s.idx.Select(ctx, q)
	if err != nil {
		return nil, fromIndex(err)
	}
	series := sel.Series
	if s.opts.MaxSeries > 0 && len(series) > s.opts.MaxSeries {
		return nil, badRequest("the query selects %d series, more than the limit of %d (--query.max-series)", len(series), s.opts.MaxSeries)
	}
	return series, nil
}
