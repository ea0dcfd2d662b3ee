package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"

	"github.com/kairos-remote/kairos-adapter/adapter"
	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
)

// connectCassandra retries until Cassandra answers or ctx ends.
func connectCassandra(ctx context.Context, cfg cql.Config, logger *slog.Logger) (*cql.Engine, error) {
	backoff := time.Second
	for {
		e, err := cql.Open(ctx, cfg, logger)
		if err == nil {
			return e, nil
		}
		logger.Warn("Cannot connect to Cassandra yet; retrying", "hosts", strings.Join(cfg.Hosts, ","), "in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// lazyStore serves the HTTP handlers before the store is open: until then
// every call fails with storeerr.ErrUnavailable, which the edges answer 503,
// so Prometheus retries and /-/ready says not ready.
type lazyStore struct {
	p atomic.Pointer[kairosstore.Store]
}

func (l *lazyStore) set(s *kairosstore.Store) { l.p.Store(s) }
func (l *lazyStore) get() *kairosstore.Store  { return l.p.Load() }

// errStarting is unavailable: the edges answer it so that the sender retries.
var errStarting = storeerr.Unavailable(errors.New("the store is still starting (connecting to Cassandra)"))

func (l *lazyStore) NewAppender() adapter.Appender {
	if s := l.get(); s != nil {
		return s.NewAppender()
	}
	return startingAppender{}
}

func (l *lazyStore) Querier(mint, maxt int64) (storage.Querier, error) {
	if s := l.get(); s != nil {
		return s.Querier(mint, maxt)
	}
	return nil, errStarting
}

func (l *lazyStore) ChunkQuerier(mint, maxt int64) (storage.ChunkQuerier, error) {
	if s := l.get(); s != nil {
		return s.ChunkQuerier(mint, maxt)
	}
	return nil, errStarting
}

func (l *lazyStore) Metadata(ctx context.Context, metric string, limit int) (map[string][]metadata.Metadata, error) {
	if s := l.get(); s != nil {
		return s.Metadata(ctx, metric, limit)
	}
	return nil, errStarting
}

func (l *lazyStore) Delete(ctx context.Context, start, end int64, ms ...*labels.Matcher) (int, error) {
	if s := l.get(); s != nil {
		return s.Delete(ctx, start, end, ms...)
	}
	return 0, errStarting
}

func (l *lazyStore) Exemplars(ctx context.Context, start, end int64, ms ...*labels.Matcher) ([]exemplar.QueryResult, error) {
	if s := l.get(); s != nil {
		return s.Exemplars(ctx, start, end, ms...)
	}
	return nil, errStarting
}

func (l *lazyStore) Ready(ctx context.Context) error {
	if s := l.get(); s != nil {
		return s.Ready(ctx)
	}
	return errStarting
}

// startingAppender refuses every write while the store is starting.
type startingAppender struct{}

func (startingAppender) Append(adapter.SeriesRef, labels.Labels, int64, float64) (adapter.SeriesRef, error) {
	return 0, errStarting
}

func (startingAppender) AppendHistogram(adapter.SeriesRef, labels.Labels, int64, *histogram.Histogram, *histogram.FloatHistogram) (adapter.SeriesRef, error) {
	return 0, errStarting
}

func (startingAppender) AppendExemplar(adapter.SeriesRef, labels.Labels, exemplar.Exemplar) (adapter.SeriesRef, error) {
	return 0, errStarting
}

func (startingAppender) Grow(int)                                    {}
func (startingAppender) SetMetadata(string, metadata.Metadata) error { return errStarting }
func (startingAppender) Commit(context.Context) error                { return errStarting }
