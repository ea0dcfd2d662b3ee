package adapter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// writeV2 stores an io.prometheus.write.v2.Request. A broken symbol table
// rejects the whole request, and nothing is committed, because no ref in it
// can be trusted; a bad series is reported after the rest is committed
// (spec §"Partial Write"). The symbols are decoded first, then the series
// window by window (writeWindow).
func (h *writeHandler) writeV2(ctx context.Context, st *writeState, body []byte) writeResult {
	req := &st.v2
	unknown, err := unmarshalV2Symbols(req, body)
	if err != nil {
		return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV2, body, err.Error())}
	}
	b := newBatch(h.store.NewAppender(), st)
	ra, _ := b.app.(refAppender)
	var gen uint32
	if ra != nil {
		// Series of floats only go through handles, keyed by their label
		// refs renumbered through the symbol table.
		st.ids = slices.Grow(st.ids[:0], len(req.symbols))
		st.ids, gen = h.symbols.resolve(st.ids, req.symbols)
	}
	name := nameSymbol(req.symbols)
	lastMeta := v2MetaKey{} // no metadata, of the series without a name
	some, base := false, 0
	for rest := body; len(rest) > 0 && b.fatal == nil; {
		window := rest
		var sum v2Summary
		rest, sum, err = unmarshalV2Window(req, rest, &st.v2arena, writeWindow)
		if err != nil {
			return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV2, body, err.Error())}
		}
		some = some || len(req.series) > 0
		b.received.add(sum.received)
		base += len(req.series)
		if err := validateSymbols(req, sum, base-len(req.series)); err != nil {
			h.m.countFailed(writeV2, reasonInvalid, b.received)
			h.m.countReceived(writeV2, b.received)
			return writeResult{status: http.StatusBadRequest, msg: "invalid symbol table, nothing stored: " + err.Error()}
		}
		b.grow(sum.received, len(window)-len(rest))
		if ra != nil {
			// All keys go into one buffer first, and are sliced from it
			// once it no longer moves.
			st.key, st.ends, st.keys = st.key[:0], st.ends[:0], st.keys[:0]
			for i := range req.series {
				ts := &req.series[i]
				if ts.samples.n > 0 && ts.histograms.n == 0 && ts.exemplars.n == 0 {
					st.key = appendSymbolKey(st.key, gen, ts.refs, st.ids)
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
			st.refs = h.series.lookup(st.refs[:0], st.keys)
		}
		for i := range req.series {
			ts := &req.series[i]
			c := counts{ts.samples.n, ts.histograms.n, ts.exemplars.n}
			var ls labels.Labels
			var err error
			if ra != nil && st.keys[i] != nil {
				err = h.appendV2Floats(b, ra, st, ts, req.symbols, st.keys[i], st.refs[i])
			} else if ls, err = v2Labels(&st.b, ts.refs, req.symbols, &st.ls); err == nil {
				err = appendV2Series(b, &req.scratch, ls, ts, req.symbols)
			}
			if (err != nil || b.pending()) && ls.IsEmpty() && b.listing() {
				ls, _ = v2Labels(&st.b, ts.refs, req.symbols, &st.ls) // to name the series
			}
			if !b.done(ls, c, err) {
				break
			}
			if err == nil {
				// The metric family is the series' __name__ as is: RW2
				// metadata belongs to the series, and foo_bucket,
				// foo_count and foo_sum each carry their own copy, so no
				// suffix is stripped (unlike RW1, which names families).
				// The series of a family come one after another, each
				// with the same metadata: only a change is looked at.
				m := &ts.meta
				key := v2MetaKey{m.Type, m.HelpRef, m.UnitRef, v2NameRef(ts.refs, req.symbols, name)}
				if key != lastMeta {
					if md := v2Metadata(m, req.symbols); !md.IsEmpty() {
						b.setMetadata(req.symbols[key.name], md)
					}
					lastMeta = key
				}
			}
		}
	}
	if len(req.symbols) == 0 && !some && unknown {
		// A 1.0 (or read) body parses as an empty 2.0 message: fields
		// 1-3 are reserved in 2.0 precisely so this can be detected.
		return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV2, body, "it holds only unknown fields")}
	}
	return h.finish(ctx, b, writeV2)
}

// validateSymbols checks every reference of a window, whose first series is
// the request's series number base (spec §"Symbols"):
// symbols[0] is "", each ref is inside the table, labels_refs come in pairs.
// The series are only walked, to say which one is wrong, when the summary
// shows that one is.
func validateSymbols(req *rw2Request, sum v2Summary, base int) error {
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

// appendV2Floats is appendV1Floats for a 2.0 series.
func (h *writeHandler) appendV2Floats(b *batch, ra refAppender, st *writeState, ts *rw2Series, symbols []string, key []byte, ref any) error {
	ref, err := h.seriesRef(ra, ref, key, func() (labels.Labels, error) {
		return v2Labels(&st.b, ts.refs, symbols, &st.ls)
	})
	if err != nil {
		return err
	}
	return appendRefSamples(b, ra, ref, ts.samples)
}

// v2MetaKey identifies a series' metadata and family within a request.
type v2MetaKey struct {
	typ              writev2.Metadata_MetricType
	help, unit, name uint32 // refs
}

// v2NameRef is the ref of the __name__ value of a series whose refs
// validateSymbols checked; 0 (the empty string) when there is none. name is
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

// v2Labels builds the labels of a series whose refs validateSymbols checked.
func v2Labels(sb *labels.ScratchBuilder, refs []uint32, symbols []string, dst *labels.Labels) (labels.Labels, error) {
	if len(refs) == 0 {
		return labels.EmptyLabels(), errNoLabels
	}
	sb.Reset()
	for i := 0; i < len(refs); i += 2 {
		// Checked here: the duplicate check below takes a first empty
		// name for a repeat.
		if symbols[refs[i]] == "" {
			return labels.EmptyLabels(), errEmptyName
		}
		sb.Add(symbols[refs[i]], symbols[refs[i+1]])
	}
	sb.Sort()
	sb.Overwrite(dst)
	ls := *dst
	if name, dup := ls.HasDuplicateLabelNames(); dup {
		return ls, fmt.Errorf("label %q appears more than once", name)
	}
	return ls, nil
}

// Errors of 2.0 series that a request can repeat by the million.
var (
	errSamplesAndHistograms = errors.New("series has both samples and histograms; send them as separate series")
	errNoSamples            = errors.New("series has neither samples nor histograms")
)

func appendV2Series(b *batch, sc *itemScratch, ls labels.Labels, ts *rw2Series, symbols []string) error {
	// Spec: a series carries samples or histograms, never both, never none.
	switch {
	case ts.samples.n > 0 && ts.histograms.n > 0:
		return errSamplesAndHistograms
	case ts.samples.n == 0 && ts.histograms.n == 0 && ts.exemplars.n == 0:
		// Exemplars alone are accepted although the spec asks for a sample
		// or histogram: Prometheus 3.x sends each exemplar in a series of
		// its own (prometheus/prometheus#17857), and refusing them would
		// drop every exemplar it sends.
		return errNoSamples
	}
	// NOTE: start timestamps (Sample/Histogram start_timestamp) are not
	// stored: the KairosDB layout has no place for them.
	if err := appendSamples(b, ls, ts.samples); err != nil {
		return err
	}
	for p := ts.histograms.b; ; {
		payload, rest, ok := nextPayload(p, 3)
		if !ok {
			break
		}
		p = rest
		_ = sc.v2Histogram(payload) // checked when decoded
		h, fh := sc.histogram(false)
		if err := appendHistogram(b, ls, sc.h2.Timestamp, h, fh); err != nil {
			return err
		}
	}
	for p := ts.exemplars.b; ; {
		payload, rest, ok := nextPayload(p, 4)
		if !ok {
			return nil
		}
		p = rest
		_ = sc.v2Exemplar(payload) // checked when decoded
		if err := b.appendExemplar(ls, sc.exemplar(false, symbols)); err != nil {
			return err
		}
	}
}

// v2Metadata converts metadata whose refs validateSymbols checked.
func v2Metadata(m *writev2.Metadata, symbols []string) metadata.Metadata {
	typ := model.MetricTypeUnknown
	switch m.Type {
	case writev2.Metadata_METRIC_TYPE_COUNTER:
		typ = model.MetricTypeCounter
	case writev2.Metadata_METRIC_TYPE_GAUGE:
		typ = model.MetricTypeGauge
	case writev2.Metadata_METRIC_TYPE_HISTOGRAM:
		typ = model.MetricTypeHistogram
	case writev2.Metadata_METRIC_TYPE_GAUGEHISTOGRAM:
		typ = model.MetricTypeGaugeHistogram
	case writev2.Metadata_METRIC_TYPE_SUMMARY:
		typ = model.MetricTypeSummary
	case writev2.Metadata_METRIC_TYPE_INFO:
		typ = model.MetricTypeInfo
	case writev2.Metadata_METRIC_TYPE_STATESET:
		typ = model.MetricTypeStateset
	}
	return metadata.Metadata{Type: typ, Help: symbols[m.HelpRef], Unit: symbols[m.UnitRef]}
}
