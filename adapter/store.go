package adapter

import (
	"context"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
)

// Store is what the HTTP layer needs from the storage. It is declared here,
// where it is consumed, so the handlers are tested with an in-memory fake and
// the adapter package does not know about Cassandra.
type Store interface {
	// NewAppender returns an appender for one write request. It is used by
	// one goroutine and dropped after Commit, or without Commit when the
	// request is abandoned (which must discard what was appended).
	NewAppender() Appender
	// Querier returns a querier over [mint, maxt] (milliseconds, inclusive).
	// Its Select streams the matching series, sorted by labels.Compare when
	// sortSeries is true, and reports failures through SeriesSet.Err.
	Querier(mint, maxt int64) (storage.Querier, error)
	// ChunkQuerier is Querier with the series as chunks, which the
	// streamed remote read sends as they are: a store that keeps or reads
	// samples in another form encodes them itself, where it can do so
	// cheaper than iterating samples into an encoder.
	ChunkQuerier(mint, maxt int64) (storage.ChunkQuerier, error)
	// Ready returns nil when the store can serve reads and writes.
	Ready(ctx context.Context) error
}

// SeriesRef is an Appender's reference to a series, as in Prometheus's
// storage.Appender (it is storage.SeriesRef, so that a store implements
// this contract without importing this package). 0 means none.
type SeriesRef = storage.SeriesRef

// Appender buffers the items of one write request until Commit.
//
// Each Append method takes the series by ref or, when ref is 0, by its
// labels ls, and returns the store's ref of the series (0 when it has
// none), valid for the life of the store and usable by any of its
// appenders: the handler keeps it, so that a series it has seen before is
// appended to without decoding its labels again (Prometheus sends every
// series again with each scrape). When ref is not 0, ls may be empty; a
// store that no longer knows ref and has no labels answers with an
// UnknownRefError, and the handler appends the item again with the labels.
//
// Everything passed in (label sets, strings, metadata, histograms, exemplars
// and their labels) is valid only during the call: the handler rebuilds one
// labels.Labels in place for every series, decodes histograms and exemplars
// one at a time into buffers it reuses, and its strings point into the
// request buffer, so that decoding costs no allocation per series or item.
// An appender copies what it keeps.
type Appender interface {
	// Append adds one float sample. An ItemError refuses this sample
	// alone: the series' other items are appended and stored. Any other
	// non-nil error means the series itself is invalid (bad labels):
	// answer 400 naming it; nothing of that series is stored.
	Append(ref SeriesRef, ls labels.Labels, t int64, v float64) (SeriesRef, error)
	// AppendHistogram adds one native histogram sample (exactly one of h, fh is non-nil). Same error meaning; a histogram that fails Validate is an invalid series.
	AppendHistogram(ref SeriesRef, ls labels.Labels, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (SeriesRef, error)
	// AppendExemplar adds one exemplar of the series. Same error meaning.
	AppendExemplar(ref SeriesRef, ls labels.Labels, e exemplar.Exemplar) (SeriesRef, error)
	// SetMetadata records metadata of a metric family.
	SetMetadata(metricFamily string, m metadata.Metadata) error
	// Grow tells the appender that about n more items (samples,
	// histograms and exemplars) are coming, so that it can size its
	// buffers once rather than grow them item by item. It is a hint: an
	// appender may ignore it.
	Grow(n int)
	// Commit stores everything appended (valid items only). nil only when all of it is durably stored; any error means the backend failed → 5xx (Prometheus retries; writes are idempotent).
	Commit(ctx context.Context) error
}

// ItemError is an error with which an Appender refuses one sample,
// histogram or exemplar but not its series, such as a timestamp the store
// cannot hold. The handler looks for it with errors.As, answers 400 naming
// the series and the item, and stores the rest: remote write allows a
// partial write, and the 2.0 headers count only what was stored. It is
// declared here, so the store need not import this package.
type ItemError interface {
	error
	// RefusesItemOnly is a marker: errors that have it refuse one item.
	RefusesItemOnly()
}

// UnknownRefError is an error with which an Appender refuses a ref it does
// not know (any more) when no labels came with it: stores forget series to
// bound their memory. The handler then appends the item again with the
// series' labels. Declared here for the same reason as ItemError.
type UnknownRefError interface {
	error
	// UnknownSeriesRef is a marker: errors that have it ask for labels.
	UnknownSeriesRef()
}
