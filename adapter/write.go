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
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/prompb"
)

// Response headers remote write 2.0 requires on every answer (spec
// §"Required Written Response Headers"; docs/remote-protocols.md §3.4). They are never set
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
	budget   *byteBudget // bytes of writes in flight (budget.go)
	states   sync.Pool   // *writeState
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
	v2      rw2Request
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
	if cap(st.v2.series) > maxPooledSeries || cap(st.v2.symbols) > maxPooledSeries {
		st.v2 = rw2Request{}
	}
	if cap(st.ids) > maxPooledSeries {
		st.ids = nil
	}
	if cap(st.v2arena.refs)*4 > maxPooledBuffer {
		st.v2arena = v2Arena{}
	}
	clear(st.metaSet)
	// One huge histogram or exemplar must not stay pinned in the pool.
	st.v1.scratch, st.v2.scratch = itemScratch{}, itemScratch{}
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

	// The body is reserved as it is announced, then at its estimated cost
	// before it is decoded (budget.go).
	res, ok := h.budget.reserve(announcedCost(r, h.maxBytes))
	if !ok {
		return h.overBudget(announcedCost(r, h.maxBytes))
	}
	defer res.release()
	var err error
	if st.compressed, err = readBody(w, r, h.maxBytes, st.compressed); err != nil {
		return errorResult(err)
	}
	if cost := writeCost(st.compressed, h.maxBytes); !res.growTo(cost) {
		return h.overBudget(cost)
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

// writeWindow is how many series (and 1.0 metadata entries) are decoded
// and appended at a time. Decoding a request window by window bounds what
// it builds, however many (tiny) series it holds, and lets an invalid
// request be refused before it is built; a window is large enough that
// Prometheus's requests (2,000 series by default) fit in one.
const writeWindow = 4096

// writeV1 stores a prometheus.WriteRequest. Series are independent: an
// invalid one is reported (400) after the valid rest is committed.
func (h *writeHandler) writeV1(ctx context.Context, st *writeState, body []byte) writeResult {
	req := &st.v1
	b := newBatch(h.store.NewAppender(), st)
	var unknown, guessed, some bool
	for rest := body; len(rest) > 0; {
		var err error
		var u bool
		window := rest
		rest, u, st.arena, err = unmarshalV1Request(req, rest, st.arena, writeWindow)
		unknown = unknown || u
		if err != nil {
			// Nothing is committed: the request is refused as a whole.
			return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV1, body, err.Error())}
		}
		some = some || len(req.series) > 0 || len(req.metadata) > 0
		if !guessed {
			for i := range req.series {
				// A ReadRequest whose queries carry no timestamps nor
				// matchers decodes as series without labels (others
				// fail to decode); reject it as a whole instead of
				// reporting each "series".
				if len(req.series[i].labels) == 0 {
					if guessMessage(body) == protoRead {
						return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV1, body, "it has series without labels")}
					}
					guessed = true
					break
				}
			}
		}
		if res, ok := h.appendV1Window(b, st, body, window[:len(window)-len(rest)]); !ok {
			return res
		}
		if b.fatal != nil {
			break
		}
	}
	if !some && unknown {
		// A 2.0 (or read) body parses as an empty 1.0 message whose
		// fields are all unknown (docs/remote-protocols.md §3.1, grafana/mimir#10423):
		// answering 2xx would silently drop it.
		return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV1, body, "it holds only unknown fields")}
	}
	return h.finish(ctx, b, writeV1)
}

// appendV1Window appends the window of st.v1 that was decoded from the part
// window of body. ok is false when the request is refused as a whole, with
// res.
func (h *writeHandler) appendV1Window(b *batch, st *writeState, body, window []byte) (res writeResult, ok bool) {
	req := &st.v1
	var c counts
	for i := range req.series {
		ts := &req.series[i]
		c.add(counts{ts.samples.n, ts.histograms.n, ts.exemplars.n})
	}
	b.received.add(c)
	b.grow(c, len(window))
	ra, _ := b.app.(refAppender)
	if ra != nil {
		// Series of floats only go through handles, keyed by their
		// encoded labels.
		st.keys = st.keys[:0]
		for i := range req.series {
			ts := &req.series[i]
			var key []byte
			if ts.samples.n > 0 && ts.histograms.n == 0 && ts.exemplars.n == 0 {
				key = ts.labels
			}
			st.keys = append(st.keys, key)
		}
		st.refs = h.series.lookup(st.refs[:0], st.keys)
	}
	for i := range req.series {
		ts := &req.series[i]
		c := counts{ts.samples.n, ts.histograms.n, ts.exemplars.n}
		var ls labels.Labels
		var err error
		if ra != nil && st.keys[i] != nil {
			err = h.appendV1Floats(b, ra, st, ts, st.refs[i])
		} else if ls, err = v1Labels(&st.b, ts.labels, &st.ls); err == nil {
			err = appendV1Series(b, &req.scratch, ls, ts)
		}
		if _, bad := errors.AsType[*malformedError](err); bad {
			// Nothing is committed: the request is refused as a whole.
			return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV1, body, err.Error())}, false
		}
		if (err != nil || b.pending()) && ls.IsEmpty() && b.listing() {
			ls, _ = v1Labels(&st.b, ts.labels, &st.ls) // to name the series
		}
		if !b.done(ls, c, err) {
			return writeResult{}, true
		}
	}
	for _, md := range req.metadata {
		if b.fatal != nil {
			break
		}
		b.setMetadata(md.MetricFamilyName, metadata.Metadata{Type: v1MetricType(md.Type), Help: md.Help, Unit: md.Unit})
	}
	return writeResult{}, true
}

// appendV1Floats appends the float samples of a series through its handle
// ref, which is nil for a series the cache does not know.
func (h *writeHandler) appendV1Floats(b *batch, ra refAppender, st *writeState, ts *rw1Series, ref any) error {
	ref, err := h.seriesRef(ra, ref, ts.labels, func() (labels.Labels, error) {
		return v1Labels(&st.b, ts.labels, &st.ls)
	})
	if err != nil {
		return err
	}
	return appendRefSamples(b, ra, ref, ts.samples)
}

// appendRefSamples appends encoded float samples through a series handle.
func appendRefSamples(b *batch, ra refAppender, ref any, samples encodedFields) error {
	for p := samples.b; ; {
		v, t, rest, ok := nextSample(p)
		if !ok {
			return nil
		}
		p = rest
		if err := ra.AppendRef(ref, t, v); err != nil {
			if err = b.refuse(counts{samples: 1}, err); err != nil {
				return err
			}
		}
	}
}

// appendSamples is appendRefSamples for a series given by its labels.
func appendSamples(b *batch, ls labels.Labels, samples encodedFields) error {
	for p := samples.b; ; {
		v, t, rest, ok := nextSample(p)
		if !ok {
			return nil
		}
		p = rest
		if err := b.app.Append(ls, t, v); err != nil {
			if err = b.refuse(counts{samples: 1}, err); err != nil {
				return err
			}
		}
	}
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

// Errors of series that a request can repeat by the million, so each is
// one value rather than an allocation.
var (
	errNoLabels  = errors.New("series has no labels")
	errEmptyName = errors.New("a label has an empty name")
)

// v1Labels builds the series labels. Like Prometheus it sorts them rather
// than trusting the sender, and rejects what the protobuf structure cannot
// mean: no labels at all, or a name twice. Names and values themselves are
// the store's to validate.
func v1Labels(sb *labels.ScratchBuilder, encoded []byte, dst *labels.Labels) (labels.Labels, error) {
	if len(encoded) == 0 {
		return labels.EmptyLabels(), errNoLabels
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
		return labels.EmptyLabels(), errEmptyName
	}
	sb.Sort()
	sb.Overwrite(dst)
	ls := *dst
	if name, dup := ls.HasDuplicateLabelNames(); dup {
		return ls, fmt.Errorf("label %q appears more than once", name)
	}
	return ls, nil
}

func appendV1Series(b *batch, sc *itemScratch, ls labels.Labels, ts *rw1Series) error {
	for p := ts.histograms.b; ; {
		payload, rest, ok := nextPayload(p, 4)
		if !ok {
			break
		}
		p = rest
		_ = sc.v1Histogram(payload) // checked when decoded
		h, fh := sc.histogram(true)
		if err := appendHistogram(b, ls, sc.h1.Timestamp, h, fh); err != nil {
			return err
		}
	}
	// Samples after histograms: an appender cannot take back what it was
	// given, so everything that can reject the series comes first.
	if err := appendSamples(b, ls, ts.samples); err != nil {
		return err
	}
	for p := ts.exemplars.b; ; {
		payload, rest, ok := nextPayload(p, 3)
		if !ok {
			return nil
		}
		p = rest
		_ = sc.v1Exemplar(payload) // checked when decoded
		if err := b.appendExemplar(ls, sc.exemplar(true, nil)); err != nil {
			return err
		}
	}
}

// appendExemplar appends one exemplar; an error is an *exemplarsRejected.
func (b *batch) appendExemplar(ls labels.Labels, e exemplar.Exemplar) error {
	if err := b.app.AppendExemplar(ls, e); err != nil {
		if err = b.refuse(counts{exemplars: 1}, err); err != nil {
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

// appendHistogram validates a native histogram the way Prometheus's receiver
// and TSDB do before storing it: schemas 9..52 are reduced to 8, the
// exponential maximum; a histogram whose spans, buckets and counts disagree
// is a bad series (400), not something to store and fail on at read time.
func appendHistogram(b *batch, ls labels.Labels, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) error {
	var (
		checked interface {
			ReduceResolution(targetSchema int32) error
			Validate() error
		}
		schema int32
	)
	if fh != nil {
		checked, schema = fh, fh.Schema
	} else {
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
	if err := b.app.AppendHistogram(ls, t, h, fh); err != nil {
		return b.refuse(counts{histograms: 1}, err)
	}
	return nil
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
	nRejected          int      // series, items and metadata entries rejected
	status             int      // 4xx of the first rejection
	fatal              error    // a 5xx-class error: stop, do not commit
	// The items of the current series the appender refused alone
	// (ItemError), and the errors of those still to list, until done.
	refused     counts
	refusedErrs []error
}

// grower is an Appender that can size its buffers for a whole request up
// front, instead of growing them sample by sample.
type grower interface{ Grow(items int) }

// minGrowItemBytes is the fewest body bytes per item a window is assumed
// to spend when the appender is told its size: a Prometheus sample takes
// ~17 (a value, a millisecond timestamp and their framing), while an
// empty one takes 2, and an appender spends ~90 bytes per item it is
// told of. Beyond that, a window of tiny items grows the appender as it
// appends them, which costs only what is really stored.
const minGrowItemBytes = 16

// grow tells the appender how many items a window of size body bytes holds.
func (b *batch) grow(c counts, size int) {
	if g, ok := b.app.(grower); ok {
		g.Grow(min(c.samples+c.histograms+c.exemplars, max(size/minGrowItemBytes, 1024)))
	}
}

func newBatch(app Appender, st *writeState) *batch {
	return &batch{app: app, metaSet: st.metaSet}
}

// refuse takes an error of appending one item of kind c to the current
// series: nil when the appender refused that item alone (an ItemError),
// which is then reported; otherwise err, which refuses the series.
func (b *batch) refuse(c counts, err error) error {
	if _, ok := errors.AsType[ItemError](err); !ok {
		return err
	}
	b.refused.add(c)
	if len(b.rejections)+len(b.refusedErrs) < maxListedRejections {
		if c.exemplars > 0 {
			err = fmt.Errorf("exemplar: %w", err)
		}
		b.refusedErrs = append(b.refusedErrs, err)
	}
	return nil
}

// pending reports whether the current series has refused items to report.
func (b *batch) pending() bool { return b.refused != counts{} }

// listing reports whether a rejection is still listed in the error body,
// so that its text is worth building.
func (b *batch) listing() bool { return len(b.rejections) < maxListedRejections }

// done records the outcome of one series, c being its items, and reports
// whether to go on.
func (b *batch) done(ls labels.Labels, c counts, err error) bool {
	refused, errs := b.refused, b.refusedErrs
	b.refused, b.refusedErrs = counts{}, b.refusedErrs[:0]
	if err != nil {
		if status := statusOf(err, http.StatusBadRequest); status >= 500 {
			b.fatal = err
			return false
		}
	}
	rejected := refused
	switch _, exemplars := errors.AsType[*exemplarsRejected](err); {
	case err == nil:
	case exemplars:
		rejected.exemplars = c.exemplars
	default:
		rejected = c
		errs = nil // the series' own error says it all
	}
	b.accepted.add(c.minus(rejected))
	b.rejected.add(rejected)
	for _, e := range errs {
		b.rejectItem(ls, e)
	}
	if err != nil {
		b.rejectItem(ls, err)
	}
	return true
}

// rejectItem records the rejection of the series ls, or of an item of it.
func (b *batch) rejectItem(ls labels.Labels, err error) {
	msg := ""
	if b.listing() {
		msg = fmt.Sprintf("%s: %v", truncate(ls.String()), err)
	}
	b.reject(statusOf(err, http.StatusBadRequest), msg)
}

func (b *batch) setMetadata(family string, md metadata.Metadata) {
	if prev, ok := b.metaSet[family]; ok && prev == md {
		return
	}
	if err := b.app.SetMetadata(family, md); err != nil {
		status := statusOf(err, http.StatusBadRequest)
		if status >= 500 {
			b.fatal = err
			return
		}
		msg := ""
		if b.listing() {
			msg = fmt.Sprintf("metadata of %s: %v", truncate(family), err)
		}
		b.reject(status, msg)
		return
	}
	// family may point into the series' label set, which is rebuilt for
	// the next series, while metaSet keeps it for the whole request.
	b.metaSet[strings.Clone(family)] = md
}

// reject counts one rejection, and lists msg while there is room.
func (b *batch) reject(status int, msg string) {
	if b.nRejected == 0 {
		b.status = status
	}
	b.nRejected++
	if b.listing() {
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
	fmt.Fprintf(&sb, "%d invalid series, metadata entries or items rejected (%d samples, %d histograms, %d exemplars not stored); the rest (%d samples, %d histograms, %d exemplars) was stored:\n",
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

// guessMessage names the message body plausibly is, or "". Plausible
// means: it is a valid message of that type, has content, and has no
// unknown top-level fields where real messages have none. It only walks
// the body (wireMessage), so a body of millions of tiny fields costs no
// memory to guess.
func guessMessage(body []byte) string {
	symbols := 0
	if wireV2Request.walk(body, func(field uint64, known bool, _ []byte) bool {
		if field == 4 {
			symbols++
		}
		return known
	}) && symbols > 0 {
		return protoV2
	}
	items := 0
	if wireV1Request.walk(body, func(field uint64, known bool, payload []byte) bool {
		items++
		return known && (field != 1 || hasField(payload, 1)) // series have labels
	}) && items > 0 {
		return protoV1
	}
	queries := 0
	if wireReadRequest.walk(body, func(field uint64, known bool, _ []byte) bool {
		if field == 1 {
			queries++
		}
		return known
	}) && queries > 0 {
		return protoRead
	}
	return ""
}

// hasField reports whether the message b, which walk checked, has field.
func hasField(b []byte, field uint64) bool {
	for len(b) > 0 {
		f, _, _, rest, err := nextField(b)
		if err != nil {
			return false
		}
		if f == field {
			return true
		}
		b = rest
	}
	return false
}
