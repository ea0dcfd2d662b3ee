// Package remotewrite decodes remote-write 1.0 (prometheus.WriteRequest) and
// 2.0 (io.prometheus.write.v2.Request) bodies into one view of a series,
// window by window, for the one append loop of the adapter's write handler.
// Its decoders accept exactly the bodies the generated ones accept, with the
// same content (FuzzUnmarshal); see docs/remote-protocols.md §3 for what
// either protocol promises.
package remotewrite

import (
	"errors"
	"fmt"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// The protobuf messages a body can be, by their full names.
const (
	MessageV1   = "prometheus.WriteRequest"
	MessageV2   = "io.prometheus.write.v2.Request"
	MessageRead = "prometheus.ReadRequest"
)

// Series is one decoded time series of either version. Its labels stay
// encoded (label fields in 1.0, symbol refs in 2.0) until Decoder.Labels
// builds them, and its samples, histograms and exemplars stay encoded until
// they are appended, so that however many tiny ones a body holds, they cost
// no memory.
type Series struct {
	labels     []byte   // 1.0: the series' label fields, in the order sent
	refs       []uint32 // 2.0: labels_refs, a slice of the window's arena
	samples    encodedFields
	histograms encodedFields
	exemplars  encodedFields
	meta       seriesMeta // 2.0 only
	// oddExemplarRefs is set when the labels_refs of an exemplar have an
	// odd length (2.0).
	oddExemplarRefs bool
}

// seriesMeta is an io.prometheus.write.v2.Metadata, without the generated
// type's bookkeeping fields, which would double the size of a Series.
type seriesMeta struct {
	Type             writev2.Metadata_MetricType
	HelpRef, UnitRef uint32
}

// Counts is how many items of each kind the series holds.
func (s *Series) Counts() (samples, histograms, exemplars int) {
	return s.samples.n, s.histograms.n, s.exemplars.n
}

// LabelFields are the encoded label fields of a 1.0 series, as sent: equal
// bytes mean the same series.
func (s *Series) LabelFields() []byte { return s.labels }

// LabelRefs are the labels_refs of a 2.0 series, which Decoder.CheckSymbols
// checked.
func (s *Series) LabelRefs() []uint32 { return s.refs }

// Samples are the series' float samples, for Fields.NextSample.
func (s *Series) Samples() Fields { return Fields{s.samples} }

// Histograms are the series' histograms, for Decoder.NextHistogram.
func (s *Series) Histograms() Fields { return Fields{s.histograms} }

// Exemplars are the series' exemplars, for Decoder.NextExemplar.
func (s *Series) Exemplars() Fields { return Fields{s.exemplars} }

// Fields are the encoded items of one kind of a series; the Next methods
// decode them one at a time, consuming f.
type Fields struct{ e encodedFields }

// NextSample decodes the next float sample; ok is false when none is left.
func (f *Fields) NextSample() (v float64, t int64, ok bool) {
	v, t, f.e.b, ok = nextSample(f.e.b)
	return v, t, ok
}

// Decoder decodes one request at a time, window by window, and is reused
// across requests: its slices keep their room.
type Decoder struct {
	v2      bool
	rest    []byte
	body    []byte
	unknown bool
	some    bool
	guessed bool // 1.0: a series without labels was looked at
	v1      rw1Request
	arena   []byte
	req     rw2Request
	a       v2Arena
	base    int // 2.0: the number of the window's first series
	size    int // the window's bytes of the body
	sum     v2Summary
	// 2.0 metadata: the index of "__name__" (nameSymbol), and the metadata
	// of the series last asked about.
	name     int
	lastMeta v2MetaKey
	// The labels of the series last built, rebuilt in place for every
	// series (ScratchBuilder.Overwrite).
	b  labels.ScratchBuilder
	ls labels.Labels
}

// NewDecoder returns a decoder for Reset.
func NewDecoder() *Decoder {
	return &Decoder{b: labels.NewScratchBuilder(16)}
}

// Reset starts decoding body, a 2.0 request when v2, else a 1.0 one. A 2.0
// body's symbols are decoded here, so an error means it is not a valid
// message.
func (d *Decoder) Reset(body []byte, v2 bool) error {
	d.v2, d.body, d.rest = v2, body, body
	d.unknown, d.some, d.guessed = false, false, false
	d.base, d.sum = 0, v2Summary{}
	d.v1.series, d.v1.metadata = d.v1.series[:0], d.v1.metadata[:0]
	d.req.series = d.req.series[:0]
	if !v2 {
		return nil
	}
	var err error
	d.unknown, err = unmarshalV2Symbols(&d.req, body)
	d.name = nameSymbol(d.req.symbols)
	d.lastMeta = v2MetaKey{} // no metadata, of the series without a name
	return err
}

// errReadBody is a 1.0 body that is a remote-read request.
var errReadBody = errors.New("it has series without labels")

// Next decodes the next window of at most limit series (and 1.0 metadata
// entries). more is false when the body is all decoded; an error means the
// body is not a valid message.
func (d *Decoder) Next(limit int) (more bool, err error) {
	if len(d.rest) == 0 {
		return false, nil
	}
	before := len(d.rest)
	defer func() { d.size = before - len(d.rest) }()
	if d.v2 {
		d.base += len(d.req.series)
		d.rest, d.sum, err = unmarshalV2Window(&d.req, d.rest, &d.a, limit)
		d.some = d.some || len(d.req.series) > 0
		return true, err
	}
	var u bool
	d.rest, u, d.arena, err = unmarshalV1Request(&d.v1, d.rest, d.arena, limit)
	d.unknown = d.unknown || u
	if err != nil {
		return true, err
	}
	d.some = d.some || len(d.v1.series) > 0 || len(d.v1.metadata) > 0
	d.sum.received = [3]int{}
	for i := range d.v1.series {
		ts := &d.v1.series[i]
		d.sum.add(ts)
		// A ReadRequest whose queries carry no timestamps nor
		// matchers decodes as series without labels (others fail to
		// decode); it is refused as a whole instead of each "series".
		if !d.guessed && len(ts.labels) == 0 {
			d.guessed = true
			if Guess(d.body) == MessageRead {
				return true, errReadBody
			}
		}
	}
	return true, nil
}

// Series is the window's series.
func (d *Decoder) Series() []Series {
	if d.v2 {
		return d.req.series
	}
	return d.v1.series
}

// WindowBytes is how many bytes of the body the window was decoded from.
func (d *Decoder) WindowBytes() int { return d.size }

// Received counts the items of each kind of the window's series.
func (d *Decoder) Received() (samples, histograms, exemplars int) {
	return d.sum.received[0], d.sum.received[1], d.sum.received[2]
}

// Symbols is the symbols table of a 2.0 request.
func (d *Decoder) Symbols() []string { return d.req.symbols }

// OnlyUnknown reports, once the body is all decoded, that it holds nothing
// but fields the message does not define: a body of the other version (or
// a read request) parses so (docs/remote-protocols.md §3.1,
// grafana/mimir#10423), and answering 2xx would silently drop it. 2.0
// reserves fields 1-3 precisely so that this can be detected.
func (d *Decoder) OnlyUnknown() bool {
	return d.unknown && !d.some && (!d.v2 || len(d.req.symbols) == 0)
}

// Trim drops what a huge request left, so that pooling the decoder does
// not pin it: slices of more than maxItems elements or maxBytes bytes.
func (d *Decoder) Trim(maxItems, maxBytes int) {
	if cap(d.v1.series) > maxItems {
		d.v1 = rw1Request{}
	}
	if cap(d.arena) > maxBytes {
		d.arena = nil
	}
	if cap(d.req.series) > maxItems || cap(d.req.symbols) > maxItems {
		d.req = rw2Request{}
	}
	if cap(d.a.refs)*4 > maxBytes {
		d.a = v2Arena{}
	}
	// One huge histogram or exemplar must not stay pinned.
	d.v1.scratch, d.req.scratch = itemScratch{}, itemScratch{}
	d.body, d.rest = nil, nil
}

// MalformedError is a 1.0 label field that does not decode: label fields
// are only framed when a window is decoded, and decoded when needed, so
// this shows up when a series' labels are built, and refuses the request
// as a whole.
type MalformedError struct{ err error }

func (e *MalformedError) Error() string { return e.err.Error() }
func (e *MalformedError) Unwrap() error { return e.err }

// Errors of series that a request can repeat by the million, so each is
// one value rather than an allocation.
var (
	errNoLabels             = errors.New("series has no labels")
	errEmptyName            = errors.New("a label has an empty name")
	errSamplesAndHistograms = errors.New("series has both samples and histograms; send them as separate series")
	errNoSamples            = errors.New("series has neither samples nor histograms")
)

// Labels builds the labels of s, valid until the next call. Like
// Prometheus it sorts them rather than trusting the sender, and rejects
// what the protobuf structure cannot mean: no labels at all, an empty name,
// or a name twice. Names and values themselves are the store's to
// validate. A *MalformedError refuses the whole request.
func (d *Decoder) Labels(s *Series) (labels.Labels, error) {
	sb := &d.b
	sb.Reset()
	if d.v2 {
		refs, symbols := s.refs, d.req.symbols
		if len(refs) == 0 {
			return labels.EmptyLabels(), errNoLabels
		}
		for i := 0; i < len(refs); i += 2 {
			// Checked here: the duplicate check below takes a first
			// empty name for a repeat.
			if symbols[refs[i]] == "" {
				return labels.EmptyLabels(), errEmptyName
			}
			sb.Add(symbols[refs[i]], symbols[refs[i+1]])
		}
	} else {
		if len(s.labels) == 0 {
			return labels.EmptyLabels(), errNoLabels
		}
		emptyName := false
		if err := decodeV1Labels(s.labels, func(name, value string) {
			emptyName = emptyName || name == ""
			sb.Add(name, value)
		}); err != nil {
			return labels.EmptyLabels(), &MalformedError{err}
		}
		if emptyName {
			return labels.EmptyLabels(), errEmptyName
		}
	}
	sb.Sort()
	sb.Overwrite(&d.ls)
	ls := d.ls
	if name, dup := ls.HasDuplicateLabelNames(); dup {
		return ls, fmt.Errorf("label %q appears more than once", name)
	}
	return ls, nil
}

// Check refuses a 2.0 series that breaks the spec's rule: samples or
// histograms, never both, never none. 1.0 has no such rule.
func (d *Decoder) Check(s *Series) error {
	if !d.v2 {
		return nil
	}
	switch {
	case s.samples.n > 0 && s.histograms.n > 0:
		return errSamplesAndHistograms
	case s.samples.n == 0 && s.histograms.n == 0 && s.exemplars.n == 0:
		// Exemplars alone are accepted although the spec asks for a
		// sample or histogram: Prometheus 3.x sends each exemplar in a
		// series of its own (prometheus/prometheus#17857), and refusing
		// them would drop every exemplar it sends.
		return errNoSamples
	}
	return nil
}

// NextHistogram decodes the next histogram of f as prompb's and writev2's
// ToIntHistogram and ToFloatHistogram do: exactly one of h, fh is non-nil,
// valid until the next call. ok is false when none is left.
func (d *Decoder) NextHistogram(f *Fields) (t int64, h *histogram.Histogram, fh *histogram.FloatHistogram, ok bool) {
	num, sc := uint64(4), &d.v1.scratch
	if d.v2 {
		num, sc = 3, &d.req.scratch
	}
	payload, rest, ok := nextPayload(f.e.b, num)
	if !ok {
		return 0, nil, nil, false
	}
	f.e.b = rest
	// Checked when decoded.
	if d.v2 {
		_ = sc.v2Histogram(payload)
		t = sc.h2.Timestamp
	} else {
		_ = sc.v1Histogram(payload)
		t = sc.h1.Timestamp
	}
	h, fh = sc.histogram(!d.v2)
	return t, h, fh, true
}

// NextExemplar decodes the next exemplar of f, its labels valid until the
// next call; ok is false when none is left.
func (d *Decoder) NextExemplar(f *Fields) (e exemplar.Exemplar, ok bool) {
	num, sc := uint64(3), &d.v1.scratch
	if d.v2 {
		num, sc = 4, &d.req.scratch
	}
	payload, rest, ok := nextPayload(f.e.b, num)
	if !ok {
		return exemplar.Exemplar{}, false
	}
	f.e.b = rest
	// Checked when decoded.
	if d.v2 {
		_ = sc.v2Exemplar(payload)
	} else {
		_ = sc.v1Exemplar(payload)
	}
	return sc.exemplar(!d.v2, d.req.symbols), true
}

// Families is the number of 1.0 metadata entries of the window.
func (d *Decoder) Families() int {
	if d.v2 {
		return 0
	}
	return len(d.v1.metadata)
}

// Family is 1.0 metadata entry i of the window.
func (d *Decoder) Family(i int) (family string, md metadata.Metadata) {
	m := &d.v1.metadata[i]
	return m.MetricFamilyName, metadata.Metadata{Type: metricType(int32(m.Type)), Help: m.Help, Unit: m.Unit}
}

// SeriesMetadata is the metadata of a 2.0 series and its metric family:
// the series' __name__ as is. RW2 metadata belongs to the series, and
// foo_bucket, foo_count and foo_sum each carry their own copy, so no suffix
// is stripped (unlike RW1, which names families). The series of a family
// come one after another, each with the same metadata, so ok is true only
// when it differs from the last series asked about, and is not empty.
func (d *Decoder) SeriesMetadata(s *Series) (family string, md metadata.Metadata, ok bool) {
	if !d.v2 {
		return "", metadata.Metadata{}, false
	}
	m := &s.meta
	key := v2MetaKey{m.Type, m.HelpRef, m.UnitRef, v2NameRef(s.refs, d.req.symbols, d.name)}
	if key == d.lastMeta {
		return "", metadata.Metadata{}, false
	}
	d.lastMeta = key
	md = v2Metadata(m, d.req.symbols)
	return d.req.symbols[key.name], md, !md.IsEmpty()
}

// CheckSymbols checks every reference of a 2.0 window (spec §"Symbols"):
// symbols[0] is "", each ref is inside the table, labels_refs come in
// pairs. A broken table refuses the whole request, as no ref in it can be
// trusted. The series are only walked, to say which one is wrong, when the
// window's summary shows that one is.
func (d *Decoder) CheckSymbols() error {
	if !d.v2 {
		return nil
	}
	req, sum, base := &d.req, d.sum, d.base
	n := uint64(len(req.symbols))
	if n > 0 && req.symbols[0] != "" {
		return fmt.Errorf("symbols[0] must be the empty string, got %q", req.symbols[0])
	}
	if n == 0 && len(req.series) > 0 {
		return fmt.Errorf("symbols table is empty but the request has %d series", req.nSeries)
	}
	if uint64(sum.maxRef) < n && !sum.oddRefs {
		return nil
	}
	for i := range req.series {
		ts := &req.series[i]
		if err := checkRefs(ts.refs, n); err != nil {
			return fmt.Errorf("series %d: %w", base+i, err)
		}
		for j, p := 0, ts.exemplars.b; ; j++ {
			payload, rest, ok := nextPayload(p, 4)
			if !ok {
				break
			}
			p = rest
			_ = req.scratch.v2Exemplar(payload) // checked when decoded
			if err := checkRefs(req.scratch.ex2.LabelsRefs, n); err != nil {
				return fmt.Errorf("series %d exemplar %d: %w", base+i, j, err)
			}
		}
		if uint64(ts.meta.HelpRef) >= n || uint64(ts.meta.UnitRef) >= n {
			return fmt.Errorf("series %d: metadata help_ref %d or unit_ref %d outside the symbols table (size %d)", base+i, ts.meta.HelpRef, ts.meta.UnitRef, n)
		}
	}
	return nil
}

func checkRefs(refs []uint32, n uint64) error {
	if len(refs)%2 != 0 {
		return fmt.Errorf("labels_refs has odd length %d", len(refs))
	}
	for _, r := range refs {
		if uint64(r) >= n {
			return fmt.Errorf("ref %d outside the symbols table (size %d)", r, n)
		}
	}
	return nil
}

// v2MetaKey identifies a series' metadata and family within a request.
type v2MetaKey struct {
	typ              writev2.Metadata_MetricType
	help, unit, name uint32 // refs
}

// v2NameRef is the ref of the __name__ value of a series whose refs
// CheckSymbols checked; 0 (the empty string) when there is none. name is
// nameSymbol's answer: when the table holds "__name__" once, or not at all,
// refs are compared instead of the strings they point to, which are spread
// over the request and cost a cache miss each.
func v2NameRef(refs []uint32, symbols []string, name int) uint32 {
	for i := 0; i+1 < len(refs); i += 2 {
		if name >= -1 && int(refs[i]) == name || name < -1 && symbols[refs[i]] == model.MetricNameLabel {
			return refs[i+1]
		}
	}
	return 0
}

// nameSymbol is the index of "__name__" in symbols: -1 when it is not
// there, -2 when it is there more than once.
func nameSymbol(symbols []string) int {
	name := -1
	for i, s := range symbols {
		if s == model.MetricNameLabel {
			if name >= 0 {
				return -2
			}
			name = i
		}
	}
	return name
}

// v2Metadata converts metadata whose refs CheckSymbols checked.
func v2Metadata(m *seriesMeta, symbols []string) metadata.Metadata {
	return metadata.Metadata{Type: metricType(int32(m.Type)), Help: symbols[m.HelpRef], Unit: symbols[m.UnitRef]}
}

// metricTypes are Prometheus's metric types by their number in both
// protocols' enums (prometheus.MetricMetadata.MetricType and
// io.prometheus.write.v2.Metadata.MetricType), which number them alike.
var metricTypes = [...]model.MetricType{
	model.MetricTypeUnknown, model.MetricTypeCounter, model.MetricTypeGauge, model.MetricTypeHistogram,
	model.MetricTypeGaugeHistogram, model.MetricTypeSummary, model.MetricTypeInfo, model.MetricTypeStateset,
}

// metricType is the type numbered t in either protocol; unknown for a
// number neither defines.
func metricType(t int32) model.MetricType {
	if t < 0 || int(t) >= len(metricTypes) {
		return model.MetricTypeUnknown
	}
	return metricTypes[t]
}

// Guess names the message body plausibly is (MessageV1, MessageV2,
// MessageRead), or "". Plausible means: it is a valid message of that
// type, has content, and has no unknown top-level fields where real
// messages have none. It only walks the body (wireMessage), so a body of
// millions of tiny fields costs no memory to guess.
func Guess(body []byte) string {
	symbols := 0
	if wireV2Request.walk(body, func(field uint64, known bool, _ []byte) bool {
		if field == 4 {
			symbols++
		}
		return known
	}) && symbols > 0 {
		return MessageV2
	}
	items := 0
	if wireV1Request.walk(body, func(field uint64, known bool, payload []byte) bool {
		items++
		return known && (field != 1 || hasField(payload, 1)) // series have labels
	}) && items > 0 {
		return MessageV1
	}
	queries := 0
	if wireReadRequest.walk(body, func(field uint64, known bool, _ []byte) bool {
		if field == 1 {
			queries++
		}
		return known
	}) && queries > 0 {
		return MessageRead
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
