package adapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
	"github.com/kairos-remote/kairos-adapter/remotewrite"
)

// streamedContentType is compared by prefix, space included, by the
// Prometheus client (docs/remote-protocols.md §5.4), so it must be exactly this.
const streamedContentType = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse"

// readHandler serves remote read, following the structure of Prometheus's
// storage/remote/read_handler.go: limit, decode with size caps, negotiate,
// then answer every query in order.
type readHandler struct {
	store      Store
	logger     *slog.Logger
	m          *metrics
	maxBytes   int64
	limit      requestSlots
	maxSamples int // per query, 0 = unlimited
	budget     func(context.Context, int) context.Context
	maxFrame   int
	timeout    time.Duration
	states     sync.Pool // *readState
}

// readState holds the buffers one request needs and the next can reuse.
type readState struct {
	compressed, decoded []byte
	out                 []byte // marshalled response or frame
	enc                 []byte // snappy-encoded SAMPLES response
	samples             []prompb.Sample
	histograms          []prompb.Histogram
}

// query is one converted prompb.Query.
type query struct {
	start, end int64
	matchers   []*labels.Matcher
	hints      *storage.SelectHints
}

func (h *readHandler) getState() *readState {
	if st, ok := h.states.Get().(*readState); ok {
		return st
	}
	return &readState{}
}

func (h *readHandler) putState(st *readState) {
	for _, b := range []*[]byte{&st.compressed, &st.decoded, &st.out, &st.enc} {
		if cap(*b) > maxPooledBuffer {
			*b = nil
		}
	}
	// Drop histogram references so a pooled state pins no big buckets.
	clear(st.histograms[:cap(st.histograms)])
	h.states.Put(st)
}

func (h *readHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.limit.tryAcquire() {
		h.m.limitRejections.WithLabelValues("read").Inc()
		http.Error(w, fmt.Sprintf("too many concurrent read requests (limit %d); retry later or raise the read concurrency limit", cap(h.limit)), http.StatusServiceUnavailable)
		return
	}
	defer h.limit.release()

	ctx := r.Context()
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.timeout)
		defer cancel()
	}
	st := h.getState()
	defer h.putState(st)

	req, err := h.decode(w, r, st)
	if err != nil {
		h.fail(w, err, http.StatusBadRequest)
		return
	}
	respType, err := negotiateResponseType(req.AcceptedResponseTypes)
	if err != nil {
		h.fail(w, err, http.StatusBadRequest)
		return
	}
	typeLabel := strings.ToLower(respType.String())
	// Convert every query before answering any, so a bad matcher in the
	// last query is a clean 400 even in streamed mode.
	queries, err := convertQueries(req.Queries)
	if err != nil {
		h.fail(w, err, http.StatusBadRequest)
		h.m.readQueries.WithLabelValues(typeLabel, "400").Add(float64(len(req.Queries)))
		return
	}
	code := "aborted" // unless a handler below returns
	defer func() {
		// Runs on abort too, letting the panic pass through.
		h.m.readQueries.WithLabelValues(typeLabel, code).Add(float64(len(queries)))
	}()
	if respType == prompb.ReadRequest_STREAMED_XOR_CHUNKS {
		code = h.streamed(ctx, w, st, queries, typeLabel)
		return
	}
	code = h.samples(ctx, w, st, queries, typeLabel)
}

// fail answers an error raised before the first byte of the response.
func (h *readHandler) fail(w http.ResponseWriter, err error, fallback int) string {
	status := statusOf(err, fallback)
	if status >= 500 {
		h.logger.Error("Remote read failed", "status", status, "err", err)
	} else {
		h.logger.Warn("Remote read rejected", "status", status, "err", err)
	}
	http.Error(w, err.Error(), status)
	return strconv.Itoa(status)
}

func (h *readHandler) decode(w http.ResponseWriter, r *http.Request, st *readState) (*prompb.ReadRequest, error) {
	// Prometheus always sends snappy; its own read handler does not even
	// look at Content-Encoding, so a missing header is taken as snappy
	// here. Naming another encoding is refused.
	if ce := r.Header.Get("Content-Encoding"); ce != "" {
		if err := checkSnappyEncoding(ce); err != nil {
			return nil, err
		}
	}
	var err error
	if st.compressed, err = readBody(w, r, h.maxBytes, st.compressed); err != nil {
		return nil, err
	}
	body, err := decodeSnappy(st.decoded, st.compressed, h.maxBytes)
	if err != nil {
		return nil, err
	}
	st.decoded = body
	var req prompb.ReadRequest
	if err := req.Unmarshal(body); err != nil {
		return nil, newRequestError(http.StatusBadRequest, "body is not a valid prometheus.ReadRequest: "+err.Error())
	}
	if len(req.Queries) == 0 && len(req.XXX_unrecognized) > 0 {
		// A remote-write body parses as a read request whose fields are all
		// unknown; an empty 200 would tell its sender nothing went wrong.
		msg := "body is not a valid prometheus.ReadRequest: it holds only unknown fields"
		if guess := remotewrite.Guess(body); guess == protoV1 || guess == protoV2 {
			msg += fmt.Sprintf("; it looks like a remote-write request (%s): send it to the write endpoint /api/v1/write", guess)
		}
		return nil, newRequestError(http.StatusBadRequest, msg)
	}
	return &req, nil
}

// negotiateResponseType picks the first accepted type we support; an empty
// list means SAMPLES, what Prometheus before 2.13 expected.
func negotiateResponseType(accepted []prompb.ReadRequest_ResponseType) (prompb.ReadRequest_ResponseType, error) {
	if len(accepted) == 0 {
		return prompb.ReadRequest_SAMPLES, nil
	}
	for _, t := range accepted {
		switch t {
		case prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS:
			return t, nil
		}
	}
	return 0, newRequestError(http.StatusBadRequest, fmt.Sprintf("none of the accepted response types %v is supported; supported: SAMPLES, STREAMED_XOR_CHUNKS", accepted))
}

// convertQueries turns the wire queries into labels.Matchers. NewMatcher
// anchors regular expressions (^(?s:...)$), which the wire value lacks
// (docs/remote-protocols.md §5.2).
func convertQueries(pqs []*prompb.Query) ([]query, error) {
	qs := make([]query, 0, len(pqs))
	for i, pq := range pqs {
		if pq == nil {
			return nil, newRequestError(http.StatusBadRequest, fmt.Sprintf("query %d is empty", i))
		}
		q := query{start: pq.StartTimestampMs, end: pq.EndTimestampMs, matchers: make([]*labels.Matcher, 0, len(pq.Matchers))}
		for _, pm := range pq.Matchers {
			var mt labels.MatchType
			switch pm.Type {
			case prompb.LabelMatcher_EQ:
				mt = labels.MatchEqual
			case prompb.LabelMatcher_NEQ:
				mt = labels.MatchNotEqual
			case prompb.LabelMatcher_RE:
				mt = labels.MatchRegexp
			case prompb.LabelMatcher_NRE:
				mt = labels.MatchNotRegexp
			default:
				return nil, newRequestError(http.StatusBadRequest, fmt.Sprintf("query %d: unknown matcher type %d for label %q", i, pm.Type, truncate(pm.Name)))
			}
			m, err := labels.NewMatcher(mt, pm.Name, pm.Value)
			if err != nil {
				return nil, newRequestError(http.StatusBadRequest, fmt.Sprintf("query %d: invalid matcher %s%s%q: %s", i, truncate(pm.Name), mt, truncate(pm.Value), truncate(err.Error())))
			}
			q.matchers = append(q.matchers, m)
		}
		if ph := pq.Hints; ph != nil {
			q.hints = &storage.SelectHints{
				Start:    ph.StartMs,
				End:      ph.EndMs,
				Step:     ph.StepMs,
				Func:     ph.Func,
				Grouping: ph.Grouping,
				By:       ph.By,
				Range:    ph.RangeMs,
			}
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// limitError is the answer to a query over the sample or series limit.
// sampleBudget gives one query a budget of --query.max-samples samples,
// which the store counts as it reads (and reads ahead only within), the
// budget a PromQL query's selectors get too.
func (h *readHandler) sampleBudget(ctx context.Context) context.Context {
	if h.maxSamples == 0 {
		return ctx
	}
	return h.budget(ctx, h.maxSamples)
}

// overBudget is the answer to a query the store refused past its budget,
// in the words remote read has always used.
func (h *readHandler) overBudget(err error) error {
	if errors.Is(err, storeerr.ErrTooManySamples) {
		return limitError("sample", h.maxSamples)
	}
	return err
}

func limitError(what string, limit int) error {
	return newRequestError(http.StatusBadRequest, fmt.Sprintf("exceeded %s limit (%d)", what, limit))
}

// samples answers with one snappy-compressed ReadResponse holding one
// QueryResult per query, in query order. The whole response is built before
// the first byte, so every error is a normal HTTP error.
func (h *readHandler) samples(ctx context.Context, w http.ResponseWriter, st *readState, qs []query, typeLabel string) string {
	resp := prompb.ReadResponse{Results: make([]*prompb.QueryResult, len(qs))}
	var nSeries, nSamples int
	for i, q := range qs {
		res, err := h.querySamples(ctx, st, q, &nSeries, &nSamples)
		if err != nil {
			err = h.overBudget(err)
			return h.fail(w, fmt.Errorf("query %d: %w", i, err), http.StatusInternalServerError)
		}
		resp.Results[i] = res
	}
	size := resp.Size()
	if cap(st.out) < size {
		st.out = make([]byte, size)
	}
	n, err := resp.MarshalToSizedBuffer(st.out[:size])
	if err != nil {
		return h.fail(w, fmt.Errorf("marshal read response: %w", err), http.StatusInternalServerError)
	}
	if need := snappy.MaxEncodedLen(n); cap(st.enc) < need {
		st.enc = make([]byte, need)
	}
	// golang/snappy reuses dst only when it is long enough.
	enc := snappy.Encode(st.enc[:cap(st.enc)], st.out[:n])

	hd := w.Header()
	hd.Set("Content-Type", protobufMediaType)
	hd.Set("Content-Encoding", "snappy")
	if _, err := w.Write(enc); err != nil {
		h.logger.Debug("Cannot write remote read response", "err", err)
	}
	h.m.readSeries.WithLabelValues(typeLabel).Add(float64(nSeries))
	h.m.readSamples.WithLabelValues(typeLabel).Add(float64(nSamples))
	return "200"
}

func (h *readHandler) querySamples(ctx context.Context, st *readState, q query, totalSeries, totalSamples *int) (_ *prompb.QueryResult, err error) {
	querier, err := h.store.Querier(q.start, q.end)
	if err != nil {
		return nil, err
	}
	defer h.closeQuerier(querier)

	res := &prompb.QueryResult{}
	ss := querier.Select(h.sampleBudget(ctx), true, q.hints, q.matchers...)
	var (
		it                 chunkenc.Iterator
		nSeries, nSamples  int
		floats, histograms = st.samples[:0], st.histograms[:0]
	)
	defer func() { st.samples, st.histograms = floats[:0], histograms[:0] }()
	for ss.Next() {
		series := ss.At()
		nSeries++
		floats, histograms = floats[:0], histograms[:0]
		it = series.Iterator(it)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			nSamples++
			switch vt {
			case chunkenc.ValFloat:
				t, v := it.At()
				floats = append(floats, prompb.Sample{Timestamp: t, Value: v})
			case chunkenc.ValHistogram:
				t, hh := it.AtHistogram(nil)
				histograms = append(histograms, prompb.FromIntHistogram(t, hh))
			case chunkenc.ValFloatHistogram:
				t, fh := it.AtFloatHistogram(nil)
				histograms = append(histograms, prompb.FromFloatHistogram(t, fh))
			default:
				return nil, fmt.Errorf("series %s: unknown value type %s", series.Labels(), vt)
			}
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("series %s: %w", series.Labels(), err)
		}
		if len(floats) == 0 && len(histograms) == 0 {
			continue // rows overlap the range, samples do not: not a series of the answer
		}
		// The scratch slices are reused for the next series; the
		// response keeps exact-size copies (nil when empty).
		res.Timeseries = append(res.Timeseries, &prompb.TimeSeries{
			Labels:     prompb.FromLabels(series.Labels(), nil),
			Samples:    slices.Clip(slices.Clone(floats)),
			Histograms: slices.Clip(slices.Clone(histograms)),
		})
	}
	if err := ss.Err(); err != nil {
		return nil, err
	}
	h.logWarnings(ss)
	*totalSeries += nSeries
	*totalSamples += nSamples
	return res, nil
}

// streamed answers with STREAMED_XOR_CHUNKS frames: exactly one series per
// frame (the Prometheus client reads only chunked_series[0]), series sorted
// by labels, with the chunks the store's ChunkQuerier returns, sent as they
// are (the store encodes them: Store.ChunkQuerier). Once the first frame is
// out the status is 200 for good, so a later error aborts the connection:
// the client then sees a truncated stream instead of a silently partial
// result.
func (h *readHandler) streamed(ctx context.Context, w http.ResponseWriter, st *readState, qs []query, typeLabel string) string {
	f, ok := w.(http.Flusher)
	if !ok {
		return h.fail(w, errors.New("response writer cannot flush, streamed remote read is impossible"), http.StatusInternalServerError)
	}
	w.Header().Set("Content-Type", streamedContentType)
	cw := &chunkedWriter{w: w, f: f, buf: st.out}
	defer func() { st.out = cw.buf }()
	var nSeries, nSamples int
	for i, q := range qs {
		err := h.streamQuery(ctx, cw, int64(i), q, &nSeries, &nSamples)
		if err == nil {
			continue
		}
		err = fmt.Errorf("query %d: %w", i, h.overBudget(err))
		h.m.readSeries.WithLabelValues(typeLabel).Add(float64(nSeries))
		h.m.readSamples.WithLabelValues(typeLabel).Add(float64(nSamples))
		if !cw.started {
			return h.fail(w, err, http.StatusInternalServerError)
		}
		h.logger.Error("Aborting streamed remote read after the first frame", "err", err)
		h.m.abortedReads.Inc()
		panic(http.ErrAbortHandler)
	}
	h.m.readSeries.WithLabelValues(typeLabel).Add(float64(nSeries))
	h.m.readSamples.WithLabelValues(typeLabel).Add(float64(nSamples))
	return "200"
}

func (h *readHandler) streamQuery(ctx context.Context, cw *chunkedWriter, index int64, q query, totalSeries, totalSamples *int) error {
	querier, err := h.store.ChunkQuerier(q.start, q.end)
	if err != nil {
		return err
	}
	defer h.closeQuerier(querier)

	css := querier.Select(h.sampleBudget(ctx), true, q.hints, q.matchers...)
	var (
		it                chunks.Iterator
		prev              labels.Labels
		nSeries, nSamples int
		lbls              []prompb.Label
		chks              []prompb.Chunk
		cs                = &prompb.ChunkedSeries{}
		resp              = &prompb.ChunkedReadResponse{ChunkedSeries: []*prompb.ChunkedSeries{cs}, QueryIndex: index}
	)
	// Count what was streamed even when an error cuts the query short.
	defer func() { *totalSeries += nSeries; *totalSamples += nSamples }()
	for css.Next() {
		series := css.At()
		ls := series.Labels()
		// The client merges nothing and trusts the order; a store bug
		// here would silently corrupt query results, so check it.
		if nSeries > 0 && labels.Compare(prev, ls) > 0 {
			return fmt.Errorf("store returned series out of order: %s after %s", ls, prev)
		}
		prev = ls
		nSeries++
		lbls = prompb.FromLabels(ls, lbls[:0])
		frameBudget := h.maxFrame
		for i := range lbls {
			frameBudget -= lbls[i].Size()
		}
		left := frameBudget
		chks = chks[:0]
		it = series.Iterator(it)
		for more := it.Next(); more; {
			meta := it.At()
			if meta.Chunk == nil {
				return fmt.Errorf("series %s: store returned an unpopulated chunk", ls)
			}
			nSamples += meta.Chunk.NumSamples()
			chks = append(chks, prompb.Chunk{
				MinTimeMs: meta.MinTime,
				MaxTimeMs: meta.MaxTime,
				Type:      prompb.Chunk_Encoding(meta.Chunk.Encoding()),
				Data:      meta.Chunk.Bytes(),
			})
			left -= chks[len(chks)-1].Size()
			// A frame may overshoot the budget by one chunk, as in
			// Prometheus; a long series continues in the next frame
			// with the same labels.
			if more = it.Next(); more && left > 0 {
				continue
			}
			cs.Labels, cs.Chunks = lbls, chks
			if err := cw.writeFrame(resp); err != nil {
				return fmt.Errorf("write frame: %w", err)
			}
			chks = chks[:0]
			left = frameBudget
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("series %s: %w", ls, err)
		}
	}
	if err := css.Err(); err != nil {
		return err
	}
	h.logWarnings(css)
	return nil
}

func (h *readHandler) closeQuerier(q interface{ Close() error }) {
	if err := q.Close(); err != nil {
		h.logger.Warn("Cannot close querier", "err", err)
	}
}

func (h *readHandler) logWarnings(ss interface {
	Warnings() annotations.Annotations
}) {
	for _, w := range ss.Warnings() {
		h.logger.Warn("Remote read query warning", "warning", w)
	}
}
