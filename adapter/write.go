package adapter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"

	"github.com/kairos-remote/kairos-adapter/remotewrite"
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
	limit    requestSlots
	budget   *byteBudget // bytes of writes in flight (budget.go)
	states   sync.Pool   // *writeState
	series   *seriesCache
	symbols  *symbolTable
}

// writeState is what one request needs and the next can reuse.
type writeState struct {
	compressed, decoded []byte
	d                   *remotewrite.Decoder
	key                 []byte      // the 2.0 series' cache keys, one after the other
	ids                 []uint32    // the numbers of a 2.0 request's symbols (symbolTable)
	ends                []int       // where each 2.0 series' key ends in key
	keys                [][]byte    // the cache key of each series, nil for none
	refs                []SeriesRef // the store's ref of each series, 0 when unknown
	// metaSet remembers metadata already passed to SetMetadata in this
	// request: RW2 repeats it on every series of a family.
	metaSet map[string]metadata.Metadata
}

func (h *writeHandler) getState() *writeState {
	if st, ok := h.states.Get().(*writeState); ok {
		return st
	}
	return &writeState{d: remotewrite.NewDecoder(), metaSet: map[string]metadata.Metadata{}}
}

func (h *writeHandler) putState(st *writeState) {
	if cap(st.compressed) > maxPooledBuffer {
		st.compressed = nil
	}
	if cap(st.decoded) > maxPooledBuffer {
		st.decoded = nil
	}
	st.d.Trim(maxPooledSeries, maxPooledBuffer)
	if cap(st.key) > maxPooledBuffer {
		st.key = nil
	}
	if cap(st.keys) > maxPooledSeries {
		st.keys, st.refs, st.ends = nil, nil, nil
	}
	// The keys must not keep the request's body alive in the pool.
	clear(st.keys)
	if cap(st.ids) > maxPooledSeries {
		st.ids = nil
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

	return h.write(r.Context(), st, body, proto)
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

// write stores a prometheus.WriteRequest or an
// io.prometheus.write.v2.Request, decoded by remotewrite window by window
// (writeWindow). A body that does not decode, or a 2.0 request whose
// symbol table is broken (no ref in it can be trusted), is refused as a
// whole and nothing is committed. Otherwise series are independent: an
// invalid one is reported (400) after the valid rest is committed (2.0
// spec §"Partial Write").
func (h *writeHandler) write(ctx context.Context, st *writeState, body []byte, proto writeProto) writeResult {
	d := st.d
	if err := d.Reset(body, proto == writeV2); err != nil {
		return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(proto, body, err.Error())}
	}
	o := newOutcome(h.store.NewAppender(), st)
	var gen uint32
	if proto == writeV2 {
		// 2.0 series are cached under their label refs renumbered
		// through the symbol table.
		st.ids = slices.Grow(st.ids[:0], len(d.Symbols()))
		st.ids, gen = h.symbols.resolve(st.ids, d.Symbols())
	}
	for o.fatal == nil {
		more, err := d.Next(writeWindow)
		if err != nil {
			return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(proto, body, err.Error())}
		}
		if !more {
			break
		}
		var c counts
		c.samples, c.histograms, c.exemplars = d.Received()
		o.received.add(c)
		if err := d.CheckSymbols(); err != nil {
			h.m.countFailed(proto, reasonInvalid, o.received)
			h.m.countReceived(proto, o.received)
			return writeResult{status: http.StatusBadRequest, msg: "invalid symbol table, nothing stored: " + err.Error()}
		}
		o.app.Grow(min(c.samples+c.histograms+c.exemplars, max(d.WindowBytes()/minGrowItemBytes, 1024)))
		series := d.Series()
		h.lookupRefs(st, series, proto, gen)
		for i := range series {
			if res, ok := h.appendSeries(o, d, &series[i], st.refs[i], st.keys[i], body, proto); !ok {
				return res
			}
			if o.fatal != nil {
				break
			}
		}
		for i := range d.Families() {
			if o.fatal != nil {
				break
			}
			o.setMetadata(d.Family(i))
		}
	}
	if d.OnlyUnknown() {
		return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(proto, body, "it holds only unknown fields")}
	}
	return h.finish(ctx, o, proto)
}

// lookupRefs sets st.keys and st.refs to the cache key and the store's ref
// of each series of a window: 1.0 series are keyed by their encoded labels,
// 2.0 series by their label refs renumbered in generation gen (all keys go
// into one buffer first, and are sliced from it once it no longer moves).
func (h *writeHandler) lookupRefs(st *writeState, series []remotewrite.Series, proto writeProto, gen uint32) {
	st.keys = st.keys[:0]
	if proto == writeV1 {
		for i := range series {
			st.keys = append(st.keys, series[i].LabelFields())
		}
	} else {
		st.key, st.ends = st.key[:0], st.ends[:0]
		for i := range series {
			if refs := series[i].LabelRefs(); len(refs) > 0 {
				st.key = appendSymbolKey(st.key, gen, refs, st.ids)
			}
			st.ends = append(st.ends, len(st.key))
		}
		start := 0
		for _, end := range st.ends {
			var key []byte
			if end > start {
				key = st.key[start:end:end]
				start = end
			}
			st.keys = append(st.keys, key)
		}
	}
	st.refs = h.series.lookup(st.refs[:0], st.keys)
}

// appendSeries appends the items of one series: through ref, the store's
// ref of it from the cache, and otherwise (ref 0) through its labels, which
// are then built once, and the store's ref remembered under key. ok is
// false when the request is refused as a whole, with res.
func (h *writeHandler) appendSeries(o *outcome, d *remotewrite.Decoder, s *remotewrite.Series, ref SeriesRef, key, body []byte, proto writeProto) (res writeResult, ok bool) {
	var c counts
	c.samples, c.histograms, c.exemplars = s.Counts()
	cur := seriesCursor{d: d, s: s, ref: ref}
	var err error
	if ref == 0 {
		err = cur.build()
	}
	if err == nil {
		err = d.Check(s)
	}
	if err == nil {
		err = cur.appendItems(o)
	}
	if _, bad := errors.AsType[*remotewrite.MalformedError](err); bad {
		// Nothing is committed: the request is refused as a whole.
		return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(proto, body, err.Error())}, false
	}
	if (err != nil || o.pending()) && !cur.built && o.listing() {
		_ = cur.build() // to name the series
	}
	if cur.ref != 0 && cur.ref != ref && key != nil {
		h.series.put(key, cur.ref)
	}
	if !o.done(cur.ls, c, err) {
		return writeResult{}, true
	}
	if err == nil {
		if family, md, ok := d.SeriesMetadata(s); ok {
			o.setMetadata(family, md)
		}
	}
	return writeResult{}, true
}

// seriesCursor is the series being appended: the store's ref of it, and its
// labels once built.
type seriesCursor struct {
	d     *remotewrite.Decoder
	s     *remotewrite.Series
	ref   SeriesRef
	ls    labels.Labels
	built bool
}

func (c *seriesCursor) build() error {
	c.built = true
	var err error
	c.ls, err = c.d.Labels(c.s)
	return err
}

// stale takes the error of appending an item through c.ref: when it says
// the store no longer knows the ref (UnknownRefError), the labels are built
// and again is true: the item is to be appended again, through them.
func (c *seriesCursor) stale(err error) (again bool, _ error) {
	if _, ok := errors.AsType[UnknownRefError](err); !ok || c.built {
		return false, err
	}
	c.ref = 0
	if err := c.build(); err != nil {
		return false, err
	}
	return true, nil
}

// appendItems appends the series' histograms, samples and exemplars, in
// that order: an appender cannot take back what it was given, so
// everything that can reject the series comes first (a 2.0 series has
// samples or histograms, not both).
func (c *seriesCursor) appendItems(o *outcome) error {
	for f := c.s.Histograms(); ; {
		t, h, fh, ok := c.d.NextHistogram(&f)
		if !ok {
			break
		}
		if err := c.appendHistogram(o, t, h, fh); err != nil {
			return err
		}
	}
	// NOTE: start timestamps (2.0 Sample/Histogram start_timestamp) are
	// not stored: the KairosDB layout has no place for them.
	for f := c.s.Samples(); ; {
		v, t, ok := f.NextSample()
		if !ok {
			break
		}
		ref, err := o.app.Append(c.ref, c.ls, t, v)
		if err != nil {
			var again bool
			if again, err = c.stale(err); again {
				ref, err = o.app.Append(0, c.ls, t, v)
			}
		}
		c.ref = cmp.Or(ref, c.ref)
		if err != nil {
			if err = o.refuse(counts{samples: 1}, err); err != nil {
				return err
			}
		}
	}
	for f := c.s.Exemplars(); ; {
		e, ok := c.d.NextExemplar(&f)
		if !ok {
			return nil
		}
		ref, err := o.app.AppendExemplar(c.ref, c.ls, e)
		if err != nil {
			var again bool
			if again, err = c.stale(err); again {
				ref, err = o.app.AppendExemplar(0, c.ls, e)
			}
		}
		c.ref = cmp.Or(ref, c.ref)
		if err != nil {
			if err = o.refuse(counts{exemplars: 1}, err); err != nil {
				return &exemplarsRejected{err}
			}
		}
	}
}

// exemplarsRejected reports that a series' samples and histograms were
// appended but its exemplars were not. Only the exemplars count as rejected:
// rejecting the whole series would report stored samples as lost.
type exemplarsRejected struct{ err error }

func (e *exemplarsRejected) Error() string { return "exemplars not stored: " + e.err.Error() }
func (e *exemplarsRejected) Unwrap() error { return e.err }

// appendHistogram appends a native histogram the way Prometheus's receiver
// does: schemas 9..52 are reduced to 8, the exponential maximum. The store
// validates it (Appender.AppendHistogram): a histogram whose spans, buckets
// and counts disagree is a bad series (400), not something to store and
// fail on at read time.
func (c *seriesCursor) appendHistogram(o *outcome, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) error {
	var (
		checked interface {
			ReduceResolution(targetSchema int32) error
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
	ref, err := o.app.AppendHistogram(c.ref, c.ls, t, h, fh)
	if err != nil {
		var again bool
		if again, err = c.stale(err); again {
			ref, err = o.app.AppendHistogram(0, c.ls, t, h, fh)
		}
	}
	c.ref = cmp.Or(ref, c.ref)
	if err != nil {
		return o.refuse(counts{histograms: 1}, err)
	}
	return nil
}

// outcome tallies what became of one request's series: accepted and rejected
// items, the rejections listed in the answer, and a fatal backend error.
type outcome struct {
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

// minGrowItemBytes is the fewest body bytes per item a window is assumed
// to spend when the appender is told its size: a Prometheus sample takes
// ~17 (a value, a millisecond timestamp and their framing), while an
// empty one takes 2, and an appender spends ~90 bytes per item it is
// told of. Beyond that, a window of tiny items grows the appender as it
// appends them, which costs only what is really stored.
const minGrowItemBytes = 16

func newOutcome(app Appender, st *writeState) *outcome {
	return &outcome{app: app, metaSet: st.metaSet}
}

// refuse takes an error of appending one item of kind c to the current
// series: nil when the appender refused that item alone (an ItemError),
// which is then reported; otherwise err, which refuses the series.
func (o *outcome) refuse(c counts, err error) error {
	if _, ok := errors.AsType[ItemError](err); !ok {
		return err
	}
	o.refused.add(c)
	if len(o.rejections)+len(o.refusedErrs) < maxListedRejections {
		if c.exemplars > 0 {
			err = fmt.Errorf("exemplar: %w", err)
		}
		o.refusedErrs = append(o.refusedErrs, err)
	}
	return nil
}

// pending reports whether the current series has refused items to report.
func (o *outcome) pending() bool { return o.refused != counts{} }

// listing reports whether a rejection is still listed in the error body,
// so that its text is worth building.
func (o *outcome) listing() bool { return len(o.rejections) < maxListedRejections }

// done records the outcome of one series, c being its items, and reports
// whether to go on.
func (o *outcome) done(ls labels.Labels, c counts, err error) bool {
	refused, errs := o.refused, o.refusedErrs
	o.refused, o.refusedErrs = counts{}, o.refusedErrs[:0]
	if err != nil {
		if status := statusOf(err, http.StatusBadRequest); status >= 500 {
			o.fatal = err
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
	o.accepted.add(c.minus(rejected))
	o.rejected.add(rejected)
	for _, e := range errs {
		o.rejectItem(ls, e)
	}
	if err != nil {
		o.rejectItem(ls, err)
	}
	return true
}

// rejectItem records the rejection of the series ls, or of an item of it.
func (o *outcome) rejectItem(ls labels.Labels, err error) {
	msg := ""
	if o.listing() {
		msg = fmt.Sprintf("%s: %v", truncate(ls.String()), err)
	}
	o.reject(statusOf(err, http.StatusBadRequest), msg)
}

func (o *outcome) setMetadata(family string, md metadata.Metadata) {
	if prev, ok := o.metaSet[family]; ok && prev == md {
		return
	}
	if err := o.app.SetMetadata(family, md); err != nil {
		status := statusOf(err, http.StatusBadRequest)
		if status >= 500 {
			o.fatal = err
			return
		}
		msg := ""
		if o.listing() {
			msg = fmt.Sprintf("metadata of %s: %v", truncate(family), err)
		}
		o.reject(status, msg)
		return
	}
	// family may point into the series' label set, which is rebuilt for
	// the next series, while metaSet keeps it for the whole request.
	o.metaSet[strings.Clone(family)] = md
}

// reject counts one rejection, and lists msg while there is room.
func (o *outcome) reject(status int, msg string) {
	if o.nRejected == 0 {
		o.status = status
	}
	o.nRejected++
	if o.listing() {
		o.rejections = append(o.rejections, msg)
	}
}

// finish commits the valid part and builds the answer. A failed commit
// confirms nothing, so the 2.0 headers then say 0 and the sender retries
// everything (our writes are idempotent).
func (h *writeHandler) finish(ctx context.Context, o *outcome, proto writeProto) writeResult {
	h.m.countReceived(proto, o.received)
	h.m.countFailed(proto, reasonInvalid, o.rejected)
	// On a backend failure nothing is stored, not even the series not
	// processed yet.
	if o.fatal != nil {
		// Dropping the appender without Commit discards it.
		h.m.countFailed(proto, reasonBackend, o.received.minus(o.rejected))
		return writeResult{status: statusOf(o.fatal, http.StatusInternalServerError), msg: "cannot store the request, retry it: " + o.fatal.Error()}
	}
	if err := o.app.Commit(ctx); err != nil {
		h.m.countFailed(proto, reasonBackend, o.received.minus(o.rejected))
		return writeResult{status: statusOf(err, http.StatusInternalServerError), msg: "cannot store the request, retry it: " + err.Error()}
	}
	h.m.countWritten(proto, o.accepted)
	if o.nRejected == 0 {
		return writeResult{status: http.StatusNoContent, written: o.accepted}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d invalid series, metadata entries or items rejected (%d samples, %d histograms, %d exemplars not stored); the rest (%d samples, %d histograms, %d exemplars) was stored:\n",
		o.nRejected, o.rejected.samples, o.rejected.histograms, o.rejected.exemplars,
		o.accepted.samples, o.accepted.histograms, o.accepted.exemplars)
	for _, r := range o.rejections {
		sb.WriteString(r)
		sb.WriteByte('\n')
	}
	if more := o.nRejected - len(o.rejections); more > 0 {
		fmt.Fprintf(&sb, "and %d more\n", more)
	}
	return writeResult{status: o.status, msg: sb.String(), written: o.accepted}
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
	switch guess := remotewrite.Guess(body); guess {
	case "":
	case protoRead:
		sb.WriteString("; it looks like a remote-read request (prometheus.ReadRequest): send it to the read endpoint /api/v1/read")
	default:
		fmt.Fprintf(&sb, "; it looks like a %s: set Content-Type: %s;proto=%s", guess, protobufMediaType, guess)
	}
	return sb.String()
}
