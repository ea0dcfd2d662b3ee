package importer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/kairos-remote/kairos-adapter/internal/frames"
)

// Bounds of what one answer may make the import hold: a frame of a
// streamed answer (Prometheus's own default chunked_read_limit) and a whole
// sampled answer, decoded.
const (
	maxFrameBytes   = 50 << 20
	maxSampledBytes = 1 << 30
)

// readClient speaks remote read (docs/remote-protocols.md §5): it asks for
// STREAMED_XOR_CHUNKS first, then SAMPLES, and reads whichever the server
// answers.
type readClient struct {
	url         string
	client      *http.Client
	samplesOnly bool
}

// read runs one query; the series set streams the answer, so it must be
// read to its end (or fail) before the next read.
func (c *readClient) read(ctx context.Context, q *prompb.Query) storage.SeriesSet {
	req := &prompb.ReadRequest{
		Queries:               []*prompb.Query{q},
		AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS, prompb.ReadRequest_SAMPLES},
	}
	if c.samplesOnly {
		req.AcceptedResponseTypes = req.AcceptedResponseTypes[1:]
	}
	data, err := req.Marshal()
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(snappy.Encode(nil, data)))
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	hreq.Header.Set("Content-Encoding", "snappy")
	hreq.Header.Set("Accept-Encoding", "snappy")
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	hreq.Header.Set("User-Agent", "kairos-adapter-import")
	hreq.Header.Set("X-Prometheus-Remote-Read-Version", "0.1.0")
	resp, err := c.client.Do(hreq)
	if err != nil {
		return storage.ErrSeriesSet(retryable{fmt.Errorf("cannot reach the remote-read endpoint: %w", err)})
	}
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		err := fmt.Errorf("the server answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
		if resp.StatusCode/100 == 5 || resp.StatusCode == http.StatusTooManyRequests {
			err = retryable{err}
		}
		return storage.ErrSeriesSet(err)
	}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse"):
		return &chunkedSet{body: resp.Body, fr: frames.NewReader(resp.Body, maxFrameBytes)}
	case strings.HasPrefix(ct, "application/x-protobuf"):
		defer resp.Body.Close()
		return sampledSet(resp.Body)
	default:
		resp.Body.Close()
		return storage.ErrSeriesSet(fmt.Errorf("the server answered Content-Type %q, which is not a remote-read answer: is the URL a remote-read endpoint (such as /api/v1/read)?", ct))
	}
}

func sampledSet(body io.Reader) storage.SeriesSet {
	compressed, err := io.ReadAll(io.LimitReader(body, maxSampledBytes+1))
	if err != nil {
		return storage.ErrSeriesSet(retryable{fmt.Errorf("read the answer: %w", err)})
	}
	if n, err := snappy.DecodedLen(compressed); err != nil || n > maxSampledBytes || len(compressed) > maxSampledBytes {
		return storage.ErrSeriesSet(fmt.Errorf("the answer is not snappy-compressed or decodes to more than %d bytes: use a shorter --slice", maxSampledBytes))
	}
	data, err := snappy.Decode(nil, compressed)
	if err != nil {
		return storage.ErrSeriesSet(fmt.Errorf("decode the answer: %w", err))
	}
	var resp prompb.ReadResponse
	if err := resp.Unmarshal(data); err != nil {
		return storage.ErrSeriesSet(fmt.Errorf("decode the answer: %w", err))
	}
	if len(resp.Results) != 1 {
		return storage.ErrSeriesSet(fmt.Errorf("the answer has %d results for 1 query", len(resp.Results)))
	}
	return &listSet{ts: resp.Results[0].Timeseries, i: -1}
}

// listSet is the series of a sampled answer.
type listSet struct {
	ts []*prompb.TimeSeries
	i  int
}

func (s *listSet) Next() bool                        { s.i++; return s.i < len(s.ts) }
func (s *listSet) Err() error                        { return nil }
func (s *listSet) Warnings() annotations.Annotations { return nil }
func (s *listSet) At() storage.Series {
	ts := s.ts[s.i]
	return &sampledSeries{ls: labelsOf(ts.Labels), ts: ts}
}

type sampledSeries struct {
	ls labels.Labels
	ts *prompb.TimeSeries
}

func (s *sampledSeries) Labels() labels.Labels { return s.ls }
func (s *sampledSeries) Iterator(chunkenc.Iterator) chunkenc.Iterator {
	return &sampledIter{ts: s.ts}
}

// sampledIter goes through a series' samples and histograms in time order
// (each list is in time order; a series normally has only one of them).
type sampledIter struct {
	ts     *prompb.TimeSeries
	si, hi int
	cur    chunkenc.ValueType
	t      int64
	v      float64
	h      *prompb.Histogram
}

func (it *sampledIter) Next() chunkenc.ValueType {
	ss, hs := it.ts.Samples, it.ts.Histograms
	switch {
	case it.si < len(ss) && (it.hi >= len(hs) || ss[it.si].Timestamp <= hs[it.hi].Timestamp):
		it.t, it.v, it.cur = ss[it.si].Timestamp, ss[it.si].Value, chunkenc.ValFloat
		it.si++
	case it.hi < len(hs):
		it.h = &hs[it.hi]
		it.t, it.cur = it.h.Timestamp, chunkenc.ValHistogram
		if it.h.IsFloatHistogram() {
			it.cur = chunkenc.ValFloatHistogram
		}
		it.hi++
	default:
		it.cur = chunkenc.ValNone
	}
	return it.cur
}

func (it *sampledIter) Seek(t int64) chunkenc.ValueType {
	for it.cur == chunkenc.ValNone || it.t < t {
		if it.Next() == chunkenc.ValNone {
			return chunkenc.ValNone
		}
	}
	return it.cur
}
func (it *sampledIter) At() (int64, float64) { return it.t, it.v }
func (it *sampledIter) AtHistogram(*histogram.Histogram) (int64, *histogram.Histogram) {
	return it.t, it.h.ToIntHistogram()
}
func (it *sampledIter) AtFloatHistogram(*histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	if it.h.IsFloatHistogram() {
		return it.t, it.h.ToFloatHistogram()
	}
	return it.t, it.h.ToIntHistogram().ToFloat(nil)
}
func (it *sampledIter) AtT() int64  { return it.t }
func (it *sampledIter) AtST() int64 { return 0 }
func (it *sampledIter) Err() error  { return nil }

// chunkedSet reads a streamed answer frame by frame: uvarint length,
// big-endian CRC-32C, a ChunkedReadResponse.
type chunkedSet struct {
	body  io.Closer
	fr    *frames.Reader
	batch []*prompb.ChunkedSeries
	cur   storage.Series
	done  bool
	err   error
}

func (s *chunkedSet) Next() bool {
	for len(s.batch) == 0 {
		if s.done {
			return false
		}
		if err := s.frame(); err != nil {
			s.body.Close()
			s.done = true
			if !errors.Is(err, io.EOF) {
				s.err = err
			}
			return false
		}
	}
	cs := s.batch[0]
	s.batch = s.batch[1:]
	s.cur = &chunkSeries{ls: labelsOf(cs.Labels), chunks: cs.Chunks}
	return true
}

func (s *chunkedSet) frame() error {
	msg, err := s.fr.Next()
	switch {
	case err == io.EOF:
		return io.EOF
	case errors.Is(err, frames.ErrCorrupt):
		return fmt.Errorf("read the streamed answer: %w", err)
	case err != nil:
		return retryable{fmt.Errorf("read the streamed answer: %w", err)}
	}
	var resp prompb.ChunkedReadResponse
	if err := resp.Unmarshal(msg); err != nil {
		return fmt.Errorf("decode the streamed answer: %w", err)
	}
	s.batch = resp.ChunkedSeries
	return nil
}

func (s *chunkedSet) At() storage.Series                { return s.cur }
func (s *chunkedSet) Err() error                        { return s.err }
func (s *chunkedSet) Warnings() annotations.Annotations { return nil }

type chunkSeries struct {
	ls     labels.Labels
	chunks []prompb.Chunk
}

func (s *chunkSeries) Labels() labels.Labels { return s.ls }
func (s *chunkSeries) Iterator(chunkenc.Iterator) chunkenc.Iterator {
	return &chunksIter{chunks: s.chunks}
}

// chunksIter runs through a series' chunks one after the other.
type chunksIter struct {
	chunks []prompb.Chunk
	it     chunkenc.Iterator
	err    error
}

func (c *chunksIter) Next() chunkenc.ValueType {
	for c.err == nil {
		if c.it != nil {
			if vt := c.it.Next(); vt != chunkenc.ValNone {
				return vt
			}
			if c.err = c.it.Err(); c.err != nil {
				return chunkenc.ValNone
			}
		}
		if len(c.chunks) == 0 {
			return chunkenc.ValNone
		}
		ch := c.chunks[0]
		c.chunks = c.chunks[1:]
		chk, err := chunkenc.FromData(chunkenc.Encoding(ch.Type), ch.Data)
		if err != nil {
			c.err = fmt.Errorf("a chunk of type %s: %w", ch.Type, err)
			return chunkenc.ValNone
		}
		c.it = chk.Iterator(c.it)
	}
	return chunkenc.ValNone
}

func (c *chunksIter) Seek(t int64) chunkenc.ValueType {
	for {
		vt := c.Next()
		if vt == chunkenc.ValNone || c.it.AtT() >= t {
			return vt
		}
	}
}
func (c *chunksIter) At() (int64, float64) { return c.it.At() }
func (c *chunksIter) AtHistogram(h *histogram.Histogram) (int64, *histogram.Histogram) {
	return c.it.AtHistogram(h)
}
func (c *chunksIter) AtFloatHistogram(fh *histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	return c.it.AtFloatHistogram(fh)
}
func (c *chunksIter) AtT() int64  { return c.it.AtT() }
func (c *chunksIter) AtST() int64 { return 0 }
func (c *chunksIter) Err() error  { return c.err }

func labelsOf(ls []prompb.Label) labels.Labels {
	b := labels.NewScratchBuilder(len(ls))
	for _, l := range ls {
		b.Add(l.Name, l.Value)
	}
	b.Sort()
	return b.Labels()
}
