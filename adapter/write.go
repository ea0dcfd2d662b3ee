package adapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// Response headers remote write 2.0 requires on every answer (spec
// §"Required Written Response Headers"; protocol doc §3.4). They are never set
// on 1.0 answers: senders would read them as a partial write (Prometheus #17683).
const (
	headerSamplesWritten    = "X-Prometheus-Remote-Write-Samples-Written"
	headerHistogramsWritten = "X-Prometheus-Remote-Write-Histograms-Written"
	headerExemplarsWritten  = "X-Prometheus-Remote-Write-Exemplars-Written"
)

// maxPooledSeries keeps one huge request from pinning its decoded series.
const maxPooledSeries = 64 << 10

// maxListedRejections bounds the error body: Prometheus logs only its first
// 1024 bytes anyway.
const maxListedRejections = 10

// writeHandler serves remote write 1.0 and 2.0 on one endpoint. It is
// hand-rolled rather than client_golang's exp handler so that every status
// code, and the 2.0 headers on every answer, are under our control.
type writeHandler struct {
	store    Store
	logger   *slog.Logger
	m        *metrics
	maxBytes int64
	limit    limiter
	states   sync.Pool // *writeState
	series   *seriesCache
	symbols  *symbolTable
}

// writeState is what one request needs and the next can reuse.
type writeState struct {
	compressed, decoded []byte
	b                   labels.ScratchBuilder
	// ls is the label set of the series being appended. It is rebuilt in
	// place for every series (ScratchBuilder.Overwrite), which the Appender
	// contract allows: appenders copy what they keep.
	ls labels.Labels
	// Decoded requests, reused across requests (see unmarshal.go).
	v1      rw1Request
	arena   []byte
	v2      writev2.Request
	v2arena v2Arena
	key     []byte   // the 2.0 series' cache keys, one after the other
	ids     []uint32 // the numbers of a 2.0 request's symbols (symbolTable)
	ends    []int    // where each 2.0 series' key ends in key
	keys    [][]byte // the cache key of each series, nil for none
	refs    []any    // the store handle of each series, nil when unknown
	// metaSet remembers metadata already passed to SetMetadata in this
	// request: RW2 repeats it on every series of a family.
	metaSet map[string]metadata.Metadata
}

func (h *writeHandler) getState() *writeState {
	if st, ok := h.states.Get().(*writeState); ok {
		return st
	}
	return &writeState{b: labels.NewScratchBuilder(16), metaSet: map[string]metadata.Metadata{}}
}

func (h *writeHandler) putState(st *writeState) {
	if cap(st.compressed) > maxPooledBuffer {
		st.compressed = nil
	}
	if cap(st.decoded) > maxPooledBuffer {
		st.decoded = nil
	}
	if cap(st.v1.series) > maxPooledSeries {
		st.v1 = rw1Request{}
	}
	if cap(st.arena) > maxPooledBuffer {
		st.arena = nil
	}
	if cap(st.key) > maxPooledBuffer {
		st.key = nil
	}
	if cap(st.keys) > maxPooledSeries {
		st.keys, st.refs, st.ends = nil, nil, nil
	}
	// The handles and keys must not keep anything alive in the pool.
	clear(st.refs)
	clear(st.keys)
	if cap(st.v2.Timeseries) > maxPooledSeries {
		st.v2 = writev2.Request{}
	}
	if cap(st.v2arena.refs)*4 > maxPooledBuffer || cap(st.v2arena.samples)*24 > maxPooledBuffer {
		st.v2arena = v2Arena{}
	}
	clear(st.metaSet)
	h.states.Put(st)
}

// counts are items of the three kinds the 2.0 headers report.
type counts struct {
	samples, histograms, exemplars int
}

func (c *counts) add(o counts) {
	c.samples += o.samples
	c.histograms += o.histograms
	c.exemplars += o.exemplars
}

func (c counts) minus(o counts) counts {
	return counts{c.samples - o.samples, c.histograms - o.histograms, c.exemplars - o.exemplars}
}

// writeResult is the answer to one write request.
type writeResult struct {
	status  int    // 204 on success
	msg     string // error body
	written counts // confirmed stored (zero unless Commit succeeded)
	quiet   bool   // counted by a metric already; a log line each would flood under overload
}

func (h *writeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	proto, err := parseWriteContentType(r.Header.Get("Content-Type"))
	if err != nil {
		// The version is unknown, so no 2.0 headers.
		http.Error(w, err.Error(), http.StatusUnsupportedMediaType)
		return
	}
	res := h.serve(w, r, proto)
	if proto == writeV2 {
		hd := w.Header()
		hd.Set(headerSamplesWritten, strconv.Itoa(res.written.samples))
		hd.Set(headerHistogramsWritten, strconv.Itoa(res.written.histograms))
		hd.Set(headerExemplarsWritten, strconv.Itoa(res.written.exemplars))
	}
	if res.status == http.StatusNoContent {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	switch {
	case res.quiet:
	case res.status >= 500:
		h.logger.Error("Remote write failed", "protocol", proto.String(), "status", res.status, "err", res.msg)
	default:
		h.logger.Warn("Remote write rejected", "protocol", proto.String(), "status", res.status, "err", res.msg)
	}
	http.Error(w, res.msg, res.status)
}

func (h *writeHandler) serve(w http.ResponseWriter, r *http.Request, proto writeProto) writeResult {
	if !h.limit.tryAcquire() {
		h.m.limitRejections.WithLabelValues("write").Inc()
		return writeResult{
			status: http.StatusServiceUnavailable,
			msg:    fmt.Sprintf("too many concurrent write requests (limit %d); retry later or raise the write concurrency limit", cap(h.limit)),
			quiet:  true,
		}
	}
	defer h.limit.release()

	if err := checkSnappyEncoding(r.Header.Get("Content-Encoding")); err != nil {
		return errorResult(err)
	}
	st := h.getState()
	defer h.putState(st)

	var err error
	if st.compressed, err = readBody(w, r, h.maxBytes, st.compressed); err != nil {
		return errorResult(err)
	}
	var body []byte
	if body, err = decodeSnappy(st.decoded, st.compressed, h.maxBytes); err != nil {
		return errorResult(err)
	}
	st.decoded = body

	if proto == writeV2 {
		return h.writeV2(r.Context(), st, body)
	}
	return h.writeV1(r.Context(), st, body)
}

func errorResult(err error) writeResult {
	return writeResult{status: statusOf(err, http.StatusBadRequest), msg: err.Error()}
}

// writeV1 stores a prometheus.WriteRequest. Series are independent: an
// invalid one is reported (400) after the valid rest is committed.
func (h *writeHandler) writeV1(ctx context.Context, st *writeState, body []byte) writeResult {
	req := &st.v1
	unknown, arena, err := unmarshalV1Request(req, body, st.arena)
	st.arena = arena
	if err != nil {
		return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV1, body, err.Error())}
	}
	if len(req.series) == 0 && len(req.metadata) == 0 && unknown {
		// A 2.0 (or read) body parses as an empty 1.0 message whose
		// fields are all unknown (protocol doc §3.1, grafana/mimir#10423):
		// answering 2xx would silently drop it.
		return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV1, body, "it holds only unknown fields")}
	}
	for i := range req.series {
		// A ReadRequest whose queries carry no timestamps nor matchers
		// decodes as series without labels (others fail to decode); reject
		// it as a whole instead of reporting each "series".
		if len(req.series[i].labels) == 0 {
			if guessMessage(body) == protoRead {
				return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV1, body, "it has series without labels")}
			}
			break
		}
	}

	b := newBatch(h.store.NewAppender(), st)
	for i := range req.series {
		ts := &req.series[i]
		b.received.add(counts{len(ts.samples), len(ts.histograms), len(ts.exemplars)})
	}
	b.grow()
	ra, _ := b.app.(refAppender)
	if ra != nil {
		// Series of floats only go through handles, keyed by their
		// encoded labels.
		st.keys = st.keys[:0]
		for i := range req.series {
			ts := &req.series[i]
			var key []byte
			if len(ts.histograms) == 0 && len(ts.exemplars) == 0 {
				key = ts.labels
			}
			st.keys = append(st.keys, key)
		}
		st.refs = h.series.lookup(st.refs[:0], st.keys)
	}
	for i := range req.series {
		ts := &req.series[i]
		c := counts{len(ts.samples), len(ts.histograms), len(ts.exemplars)}
		var ls labels.Labels
		var err error
		if ra != nil && st.keys[i] != nil {
			err = h.appendV1Floats(ra, st, ts, st.refs[i])
		} else if ls, err = v1Labels(&st.b, ts.labels, &st.ls); err == nil {
			err = appendV1Series(b.app, &st.b, ls, ts)
		}
		if err != nil && ls.IsEmpty() {
			ls, _ = v1Labels(&st.b, ts.labels, &st.ls) // to name the series
		}
		if _, bad := errors.AsType[*malformedError](err); bad {
			// Nothing is committed: the request is refused as a whole.
			return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV1, body, err.Error())}
		}
		if !b.done(ls, c, err) {
			break
		}
	}
	for _, md := range req.metadata {
		if b.fatal != nil {
			break
		}
		b.setMetadata(md.MetricFamilyName, metadata.Metadata{Type: v1MetricType(md.Type), Help: md.Help, Unit: md.Unit})
	}
	return h.finish(ctx, b, writeV1)
}

// appendV1Floats appends the float samples of a series through its handle
// ref, which is nil for a series the cache does not know.
func (h *writeHandler) appendV1Floats(ra refAppender, st *writeState, ts *rw1Series, ref any) error {
	ref, err := h.seriesRef(ra, ref, ts.labels, func() (labels.Labels, error) {
		return v1Labels(&st.b, ts.labels, &st.ls)
	})
	if err != nil {
		return err
	}
	for _, s := range ts.samples {
		if err := ra.AppendRef(ref, s.Timestamp, s.Value); err != nil {
			return err
		}
	}
	return nil
}

// seriesRef returns ref, the handle the cache found, or for a series it
// does not know, asks the store for one, decoding its labels (build), and
// remembers it under key.
func (h *writeHandler) seriesRef(ra refAppender, ref any, key []byte, build func() (labels.Labels, error)) (any, error) {
	if ref != nil {
		return ref, nil
	}
	ls, err := build()
	if err != nil {
		return nil, err
	}
	if ref, err = ra.Ref(ls); err != nil {
		return nil, err
	}
	h.series.put(key, ref)
	return ref, nil
}

// malformedError is a label field that does not decode. Label fields are
// only framed when the request is read, and decoded when needed.
type malformedError struct{ err error }

func (e *malformedError) Error() string { return e.err.Error() }
func (e *malformedError) Unwrap() error { return e.err }

// v1Labels builds the series labels. Like Prometheus it sorts them rather
// than trusting the sender, and rejects what the protobuf structure cannot
// mean: no labels at all, or a name twice. Names and values themselves are
// the store's to validate.
func v1Labels(sb *labels.ScratchBuilder, encoded []byte, dst *labels.Labels) (labels.Labels, error) {
	if len(encoded) == 0 {
		return labels.EmptyLabels(), errors.New("series has no labels")
	}
	sb.Reset()
	emptyName := false
	if err := decodeV1Labels(encoded, func(name, value string) {
		// Checked here: the duplicate check below takes a first empty
		// name for a repeat.
		emptyName = emptyName || name == ""
		sb.Add(name, value)
	}); err != nil {
		return labels.EmptyLabels(), &malformedError{err}
	}
	if emptyName {
		return labels.EmptyLabels(), errors.New("a label has an empty name")
	}
	sb.Sort()
	sb.Overwrite(dst)
	ls := *dst
	if name, dup := ls.HasDuplicateLabelNames(); dup {
		return ls, fmt.Errorf("label %q appears more than once", name)
	}
	return ls, nil
}

func appendV1Series(app Appender, sb *labels.ScratchBuilder, ls labels.Labels, ts *rw1Series) error {
	for i := range ts.histograms {
		if err := appendHistogram(app, ls, ts.histograms[i].Timestamp, &ts.histograms[i]); err != nil {
			return err
		}
	}
	// Samples after histograms: an appender cannot take back what it was
	// given, so everything that can reject the series comes first.
	for _, s := range ts.samples {
		if err := app.Append(ls, s.Timestamp, s.Value); err != nil {
			return err
		}
	}
	for _, ep := range ts.exemplars {
		if err := app.AppendExemplar(ls, ep.ToExemplar(sb, nil)); err != nil {
			return &exemplarsRejected{err}
		}
	}
	return nil
}

// exemplarsRejected reports that a series' samples and histograms were
// appended but its exemplars were not. Only the exemplars count as rejected:
// rejecting the whole series would report stored samples as lost.
type exemplarsRejected struct{ err error }

func (e *exemplarsRejected) Error() string { return "exemplars not stored: " + e.err.Error() }
func (e *exemplarsRejected) Unwrap() error { return e.err }

// wireHistogram is a native histogram as either protocol carries it
// (prompb.Histogram, writev2.Histogram).
type wireHistogram interface {
	IsFloatHistogram() bool
	ToIntHistogram() *histogram.Histogram
	ToFloatHistogram() *histogram.FloatHistogram
}

// appendHistogram validates a native histogram the way Prometheus's receiver
// and TSDB do before storing it: schemas 9..52 are reduced to 8, the
// exponential maximum; a histogram whose spans, buckets and counts disagree
// is a bad series (400), not something to store and fail on at read time.
func appendHistogram(app Appender, ls labels.Labels, t int64, wh wireHistogram) error {
	var (
		h       *histogram.Histogram
		fh      *histogram.FloatHistogram
		checked interface {
			ReduceResolution(targetSchema int32) error
			Validate() error
		}
		schema int32
	)
	if wh.IsFloatHistogram() {
		fh = wh.ToFloatHistogram()
		checked, schema = fh, fh.Schema
	} else {
		h = wh.ToIntHistogram()
		checked, schema = h, h.Schema
	}
	if histogram.IsExponentialSchemaReserved(schema) && schema > histogram.ExponentialSchemaMax {
		if err := checked.ReduceResolution(histogram.ExponentialSchemaMax); err != nil {
			return fmt.Errorf("invalid native histogram at %d: %w", t, err)
		}
	}
	if err := checked.Validate(); err != nil {
		return fmt.Errorf("invalid native histogram at %d: %w", t, err)
	}
	return app.AppendHistogram(ls, t, h, fh)
}

func v1MetricType(t prompb.MetricMetadata_MetricType) model.MetricType {
	switch t {
	case prompb.MetricMetadata_COUNTER:
		return model.MetricTypeCounter
	case prompb.MetricMetadata_GAUGE:
		return model.MetricTypeGauge
	case prompb.MetricMetadata_HISTOGRAM:
		return model.MetricTypeHistogram
	case prompb.MetricMetadata_GAUGEHISTOGRAM:
		return model.MetricTypeGaugeHistogram
	case prompb.MetricMetadata_SUMMARY:
		return model.MetricTypeSummary
	case prompb.MetricMetadata_INFO:
		return model.MetricTypeInfo
	case prompb.MetricMetadata_STATESET:
		return model.MetricTypeStateset
	default:
		return model.MetricTypeUnknown
	}
}

// batch collects the outcome of one request's series.
type batch struct {
	app                Appender
	metaSet            map[string]metadata.Metadata
	received, accepted counts
	rejected           counts
	rejections         []string // first maxListedRejections, for the error body
	nRejected          int      // series and metadata entries rejected
	status             int      // 4xx of the first rejection
	fatal              error    // a 5xx-class error: stop, do not commit
}

// grower is an Appender that can size its buffers for a whole request up
// front, instead of growing them sample by sample.
type grower interface{ Grow(items int) }

// grow tells the appender how many items the request holds.
func (b *batch) grow() {
	if g, ok := b.app.(grower); ok {
		g.Grow(b.received.samples + b.received.histograms + b.received.exemplars)
	}
}

func newBatch(app Appender, st *writeState) *batch {
	return &batch{app: app, metaSet: st.metaSet}
}

// done records the outcome of one series and reports whether to go on.
func (b *batch) done(ls labels.Labels, c counts, err error) bool {
	if err == nil {
		b.accepted.add(c)
		return true
	}
	status := statusOf(err, http.StatusBadRequest)
	if status >= 500 {
		b.fatal = err
		return false
	}
	if _, ok := errors.AsType[*exemplarsRejected](err); ok {
		b.accepted.add(counts{samples: c.samples, histograms: c.histograms})
		c = counts{exemplars: c.exemplars}
	}
	b.rejected.add(c)
	b.reject(status, fmt.Sprintf("%s: %v", truncate(ls.String()), err))
	return true
}

func (b *batch) setMetadata(family string, md metadata.Metadata) {
	if prev, ok := b.metaSet[family]; ok && prev == md {
		return
	}
	// family may point into the series' label set, which is rebuilt for
	// the next series, while metaSet keeps it for the whole request.
	family = strings.Clone(family)
	if err := b.app.SetMetadata(family, md); err != nil {
		status := statusOf(err, http.StatusBadRequest)
		if status >= 500 {
			b.fatal = err
			return
		}
		b.reject(status, fmt.Sprintf("metadata of %s: %v", truncate(family), err))
		return
	}
	b.metaSet[family] = md
}

func (b *batch) reject(status int, msg string) {
	if b.nRejected == 0 {
		b.status = status
	}
	b.nRejected++
	if len(b.rejections) < maxListedRejections {
		b.rejections = append(b.rejections, msg)
	}
}

// finish commits the valid part and builds the answer. A failed commit
// confirms nothing, so the 2.0 headers then say 0 and the sender retries
// everything (our writes are idempotent).
func (h *writeHandler) finish(ctx context.Context, b *batch, proto writeProto) writeResult {
	h.m.countReceived(proto, b.received)
	h.m.countFailed(proto, reasonInvalid, b.rejected)
	// On a backend failure nothing is stored, not even the series not
	// processed yet.
	if b.fatal != nil {
		// Dropping the appender without Commit discards it.
		h.m.countFailed(proto, reasonBackend, b.received.minus(b.rejected))
		return writeResult{status: statusOf(b.fatal, http.StatusInternalServerError), msg: "cannot store the request, retry it: " + b.fatal.Error()}
	}
	if err := b.app.Commit(ctx); err != nil {
		h.m.countFailed(proto, reasonBackend, b.received.minus(b.rejected))
		return writeResult{status: statusOf(err, http.StatusInternalServerError), msg: "cannot store the request, retry it: " + err.Error()}
	}
	h.m.countWritten(proto, b.accepted)
	if b.nRejected == 0 {
		return writeResult{status: http.StatusNoContent, written: b.accepted}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d invalid series or metadata entries rejected (%d samples, %d histograms, %d exemplars not stored); the rest (%d samples, %d histograms, %d exemplars) was stored:\n",
		b.nRejected, b.rejected.samples, b.rejected.histograms, b.rejected.exemplars,
		b.accepted.samples, b.accepted.histograms, b.accepted.exemplars)
	for _, r := range b.rejections {
		sb.WriteString(r)
		sb.WriteByte('\n')
	}
	if more := b.nRejected - len(b.rejections); more > 0 {
		fmt.Fprintf(&sb, "and %d more\n", more)
	}
	return writeResult{status: b.status, msg: sb.String(), written: b.accepted}
}

func (m *metrics) countReceived(p writeProto, c counts) {
	m.samples.received.WithLabelValues(p.String()).Add(float64(c.samples))
	m.histograms.received.WithLabelValues(p.String()).Add(float64(c.histograms))
	m.exemplars.received.WithLabelValues(p.String()).Add(float64(c.exemplars))
}

func (m *metrics) countWritten(p writeProto, c counts) {
	m.samples.written.WithLabelValues(p.String()).Add(float64(c.samples))
	m.histograms.written.WithLabelValues(p.String()).Add(float64(c.histograms))
	m.exemplars.written.WithLabelValues(p.String()).Add(float64(c.exemplars))
}

func (m *metrics) countFailed(p writeProto, reason string, c counts) {
	m.samples.failed.WithLabelValues(p.String(), reason).Add(float64(c.samples))
	m.histograms.failed.WithLabelValues(p.String(), reason).Add(float64(c.histograms))
	m.exemplars.failed.WithLabelValues(p.String(), reason).Add(float64(c.exemplars))
}

// truncate keeps one huge label set from filling the error body.
func truncate(s string) string {
	const max = 256
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// decodeFailureMessage explains a body that is not the message the
// Content-Type announced, naming the message it looks like when another one
// parses: the usual causes are a 2.0 body sent as 1.0 (or the reverse) and a
// remote-read request posted to the write endpoint.
func decodeFailureMessage(p writeProto, body []byte, reason string) string {
	want := protoV1
	if p == writeV2 {
		want = protoV2
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "body is not a valid %s (remote write %s, chosen by Content-Type): %s", want, p, reason)
	switch guess := guessMessage(body); guess {
	case "":
	case protoRead:
		sb.WriteString("; it looks like a remote-read request (prometheus.ReadRequest): send it to the read endpoint /api/v1/read")
	default:
		fmt.Fprintf(&sb, "; it looks like a %s: set Content-Type: %s;proto=%s", guess, protobufMediaType, guess)
	}
	return sb.String()
}

// guessMessage names the message body plausibly is, or "". It is only used
// on the error path, so trying three decoders is fine. Plausible means: it
// decodes, has content, and has no unknown fields where real messages have
// none.
func guessMessage(body []byte) string {
	var v2 writev2.Request
	if v2.Unmarshal(body) == nil && len(v2.XXX_unrecognized) == 0 && len(v2.Symbols) > 0 {
		return protoV2
	}
	var v1 prompb.WriteRequest
	if v1.Unmarshal(body) == nil && len(v1.XXX_unrecognized) == 0 && (len(v1.Timeseries) > 0 || len(v1.Metadata) > 0) {
		plausible := true
		for i := range v1.Timeseries {
			if len(v1.Timeseries[i].Labels) == 0 {
				plausible = false
				break
			}
		}
		if plausible {
			return protoV1
		}
	}
	var rr prompb.ReadRequest
	if rr.Unmarshal(body) == nil && len(rr.XXX_unrecognized) == 0 && len(rr.Queries) > 0 {
		return protoRead
	}
	return ""
}
