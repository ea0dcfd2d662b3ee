package kairosstore

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
)

// ChunkQuerier returns a querier over [mint, maxt] (inclusive, ms) whose
// series come as XOR chunks of at most chunkSamples samples, what a
// streamed remote read sends (docs/remote-protocols.md §5.4). The chunks of
// a float series are encoded while its cells are read, without keeping its
// samples first: keeping them, then iterating them into chunks, was a
// large part of the adapter's CPU in such a read.
func (s *Store) ChunkQuerier(mint, maxt int64) (storage.ChunkQuerier, error) {
	return &chunkQuerier{querier: &querier{s: s, mint: mint, maxt: maxt}}, nil
}

type chunkQuerier struct{ *querier }

// Select is querier.Select with chunks.
func (q *chunkQuerier) Select(ctx context.Context, _ bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.ChunkSeriesSet {
	set := q.sel(ctx, hints, ms, true)
	if ss, ok := set.(*seriesSet); ok {
		return chunkSeriesSet{ss}
	}
	return storage.NewSeriesSetToChunkSet(set) // errors, empty and index-only sets
}

// chunkSeriesSet is a chunked seriesSet seen as a storage.ChunkSeriesSet.
type chunkSeriesSet struct{ *seriesSet }

func (c chunkSeriesSet) At() storage.ChunkSeries { return chunkSeries{c.cur} }

type chunkSeries struct{ *lazySeries }

// Iterator reads the series' chunks (or takes them from the read ahead).
func (c chunkSeries) Iterator(chunks.Iterator) chunks.Iterator {
	r := c.set.take(c.i)
	return &chunkList{chks: r.chks, i: -1, err: r.err}
}

// chunkList iterates chunks read into memory; a read error is its Err.
type chunkList struct {
	chks []chunks.Meta
	i    int
	err  error
}

func (l *chunkList) At() chunks.Meta { return l.chks[l.i] }
func (l *chunkList) Next() bool {
	l.i++
	return l.i < len(l.chks)
}
func (l *chunkList) Err() error { return l.err }

// chunkSamples is how many samples a chunk holds at most, as Prometheus's
// own encoder of series into chunks (storage.NewSeriesToChunkEncoder) cuts
// them.
const chunkSamples = 120

// errUnordered stops the direct encoding of a series whose cells do not
// come in time order.
var errUnordered = errors.New("cells out of time order")

// readChunks is readSeries encoding XOR chunks: it returns the series'
// chunks and how many samples they hold. The cells of a series of one float
// type come in time order (rows in row-time order, cells in column order),
// so they go straight into chunks. Any other series (several types at
// once, histograms, rows that overlap, as KairosDB's rows of negative times
// can) is read as samples, merged and sorted, and then encoded. Cells found
// out of order halfway are read again that way; the samples read so far
// then count twice against the budget, which only refuses such a series
// early.
func (s *Store) readChunks(ctx context.Context, ref *index.Series, start, end int64, sizeHint int, budget *sampleBudget) ([]chunks.Meta, int, error) {
	if floatsInOrder(ref.Rows) {
		chks, n, err := s.encodeCells(ctx, ref, start, end, sizeHint, budget)
		if !errors.Is(err, errUnordered) {
			return chks, n, err
		}
	}
	ls, err := s.readSeries(ctx, ref, start, end, sizeHint, budget)
	if err != nil {
		return nil, 0, err
	}
	it := storage.NewSeriesToChunkEncoder(ls).Iterator(nil)
	var chks []chunks.Meta
	for it.Next() {
		chks = append(chks, it.At())
	}
	if err := it.Err(); err != nil {
		return nil, 0, fmt.Errorf("encode chunks of %s: %w", ref.Labels, err)
	}
	n := len(ls.ts)
	s.recycle(ls) // the chunks hold copies
	return chks, n, nil
}

// floatsInOrder reports whether the rows of a series (sorted by row time,
// as newSeriesSet leaves them) hold one float type in row windows that cannot
// overlap: non-negative row times (§3.1), one row per row window.
func floatsInOrder(rows []index.Row) bool {
	for i, r := range rows {
		switch {
		case r.DataType == codec.TypeHistogram, r.DataType == codec.TypeFloatHistogram, r.DataType == codec.TypeExemplar,
			r.RowTime < 0,
			i > 0 && (r.DataType != rows[0].DataType || r.Legacy != rows[0].Legacy || r.RowTime == rows[i-1].RowTime):
			return false
		}
	}
	return true
}

// encodeCells encodes the cells of a series of floatsInOrder rows into XOR
// chunks as they are read; errUnordered (wrapped) if they turn out not to
// come in time order. On an engine with doubleCells the rows of doubles
// come in bulk, as readSeriesIn reads them, a flush of cells at a time:
// those are encoded, then dropped, so that the series is held only as
// chunks, as it is when read cell by cell.
func (s *Store) encodeCells(ctx context.Context, ref *index.Series, start, end int64, sizeHint int, budget *sampleBudget) ([]chunks.Meta, int, error) {
	enc := chunkEncoder{
		chks:       make([]chunks.Meta, 0, sizeHint/chunkSamples+1),
		prev:       math.MinInt64,
		chunkBytes: 128,
	}
	var bulk *bulkRead
	if dc, ok := s.eng.(doubleCells); ok {
		out := s.newListSeries(ref.Labels, min(sizeHint, bulkFlush))
		defer func() { s.recycle(out) }()
		sorted := true // the encoder checks the order itself
		bulk = &bulkRead{eng: dc, out: out, sorted: &sorted, drain: func() error {
			err := enc.addAll(out.ts, out.vs)
			out.ts, out.vs = out.ts[:0], out.vs[:0]
			return err
		}}
	}
	err := s.eachCellIn(ctx, ref, []span{{start, end}}, budget, bulk, func(r *index.Row, t int64, col uint32, value []byte) (bool, error) {
		v, ok := s.floatCell(r, col, value)
		if !ok {
			return false, nil
		}
		return true, enc.add(t, v)
	})
	if err != nil {
		return nil, 0, err
	}
	return enc.finish(), enc.total, nil
}

// bulkFlush is how many samples a flush of CellDoubles holds at most
// (pebblekv's ctxCheckEvery): the size of encodeCells' scratch slices.
const bulkFlush = 1024

// chunkEncoder cuts samples, in time order, into XOR chunks of at most
// chunkSamples samples.
type chunkEncoder struct {
	chks       []chunks.Meta
	minT       int64 // the current chunk's
	enc        xorEncoder
	open       bool // a chunk is being written
	total      int
	prev       int64 // the last timestamp added
	chunkBytes int   // the size to allocate a chunk with: the last one's
}

// add appends one sample; errUnordered if t is not after the last one.
func (e *chunkEncoder) add(t int64, v float64) error {
	if t <= e.prev {
		return errUnordered
	}
	e.prev = t
	if !e.open || e.enc.num == chunkSamples {
		e.cut(t)
	}
	e.enc.append(t, v)
	e.total++
	return nil
}

// addAll is add of every sample of ts and vs, checked and cut a chunk at a
// time rather than a sample at a time.
func (e *chunkEncoder) addAll(ts []int64, vs []float64) error {
	vs = vs[:len(ts)]
	for len(ts) > 0 {
		if !e.open || e.enc.num == chunkSamples {
			e.cut(ts[0])
		}
		n := min(len(ts), chunkSamples-e.enc.num)
		for i, t := range ts[:n] {
			if t <= e.prev {
				return errUnordered
			}
			e.prev = t
			e.enc.append(t, vs[i])
		}
		e.total += n
		ts, vs = ts[n:], vs[n:]
	}
	return nil
}

// cut ends the current chunk, if any, and starts one at t, with room for
// as many bytes as the last one took, so that a chunk like the one before
// it is written without growing its buffer.
func (e *chunkEncoder) cut(t int64) {
	e.end()
	e.enc.reset(make([]byte, 0, max(e.chunkBytes, 128)))
	e.minT, e.open = t, true
}

// end adds the current chunk, if any, to the chunks.
func (e *chunkEncoder) end() {
	if !e.open {
		return
	}
	c := e.enc.chunk()
	e.chunkBytes = len(c.Bytes())
	e.chks = append(e.chks, chunks.Meta{MinTime: e.minT, MaxTime: e.enc.t, Chunk: c})
	e.open = false
}

// finish returns the chunks, the current one included.
func (e *chunkEncoder) finish() []chunks.Meta {
	e.end()
	return e.chks
}
