package adapter

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// writeV2 stores an io.prometheus.write.v2.Request. A broken symbol table
// rejects the whole request before anything is appended, because no ref in
// it can be trusted; a bad series is reported after the rest is committed
// (spec §"Partial Write").
func (h *writeHandler) writeV2(ctx context.Context, st *writeState, body []byte) writeResult {
	req := &st.v2
	sum, err := unmarshalV2Request(req, body, &st.v2arena)
	if err != nil {
		return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV2, body, err.Error())}
	}
	if len(req.Symbols) == 0 && len(req.Timeseries) == 0 && sum.unknown {
		// A 1.0 (or read) body parses as an empty 2.0 message: fields
		// 1-3 are reserved in 2.0 precisely so this can be detected.
		return writeResult{status: http.StatusBadRequest, msg: decodeFailureMessage(writeV2, body, "it holds only unknown fields")}
	}

	b := newBatch(h.store.NewAppender(), st)
	b.received = sum.received
	if err := validateSymbols(req, sum); err != nil {
		h.m.countFailed(writeV2, reasonInvalid, b.received)
		h.m.countReceived(writeV2, b.received)
		return writeResult{status: http.StatusBadRequest, msg: "invalid symbol table, nothing stored: " + err.Error()}
	}
	b.grow()
	ra, _ := b.app.(refAppender)
	var gen uint32
	lastMeta := v2MetaKey{} // no metadata, of the series without a name
	name := nameSymbol(req.Symbols)
	if ra != nil {
		// Series of floats only go through handles, keyed by their label
		// refs renumbered through the symbol table.
		st.ids, gen = h.symbols.resolve(st.ids[:0], req.Symbols)
		// All keys go into one buffer first, and are sliced from it once
		// it no longer moves.
		st.key, st.ends, st.keys = st.key[:0], st.ends[:0], st.keys[:0]
		for i := range req.Timeseries {
			ts := &req.Timeseries[i]
			if len(ts.Samples) > 0 && len(ts.Histograms) == 0 && len(ts.Exemplars) == 0 {
				st.key = appendSymbolKey(st.key, gen, ts.LabelsRefs, st.ids)
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
	for i := range req.Timeseries {
		ts := &req.Timeseries[i]
		c := counts{len(ts.Samples), len(ts.Histograms), len(ts.Exemplars)}
		var ls labels.Labels
		var err error
		if ra != nil && st.keys[i] != nil {
			err = h.appendV2Floats(ra, st, ts, req.Symbols, st.keys[i], st.refs[i])
		} else if ls, err = v2Labels(&st.b, ts.LabelsRefs, req.Symbols, &st.ls); err == nil {
			err = appendV2Series(b.app, &st.b, ls, ts, req.Symbols)
		}
		if err != nil && ls.IsEmpty() {
			ls, _ = v2Labels(&st.b, ts.LabelsRefs, req.Symbols, &st.ls) // to name the series
		}
		if !b.done(ls, c, err) {
			break
		}
		if err == nil {
			// The metric family is the series' __name__ as is: RW2
			// metadata belongs to the series, and foo_bucket, foo_count
			// and foo_sum each carry their own copy, so no suffix is
			// stripped (unlike RW1, which names families). The series of
			// a family come one after another, each with the same
			// metadata: only a change is looked at.
			m := &ts.Metadata
			key := v2MetaKey{m.Type, m.HelpRef, m.UnitRef, v2NameRef(ts.LabelsRefs, req.Symbols, name)}
			if key != lastMeta {
				if md := v2Metadata(m, req.Symbols); !md.IsEmpty() {
					b.setMetadata(req.Symbols[key.name], md)
				}
				lastMeta = key
			}
		}
	}
	return h.finish(ctx, b, writeV2)
}

// validateSymbols checks every reference of the request (spec §"Symbols"):
// symbols[0] is "", each ref is inside the table, labels_refs come in pairs.
// The series are only walked, to say which one is wrong, when the summary
// shows that one is.
func validateSymbols(req *writev2.Request, sum v2Summary) error {
	n := uint64(len(req.Symbols))
	if n > 0 && req.Symbols[0] != "" {
		return fmt.Errorf("symbols[0] must be the empty string, got %q", req.Symbols[0])
	}
	if n == 0 && len(req.Timeseries) > 0 {
		return fmt.Errorf("symbols table is empty but the request has %d series", len(req.Timeseries))
	}
	if uint64(sum.maxRef) < n && !sum.oddRefs {
		return nil
	}
	for i := range req.Timeseries {
		ts := &req.Timeseries[i]
		if err := checkRefs(ts.LabelsRefs, n); err != nil {
			return fmt.Errorf("series %d: %w", i, err)
		}
		for j := range ts.Exemplars {
			if err := checkRefs(ts.Exemplars[j].LabelsRefs, n); err != nil {
				return fmt.Errorf("series %d exemplar %d: %w", i, j, err)
			}
		}
		if uint64(ts.Metadata.HelpRef) >= n || uint64(ts.Metadata.UnitRef) >= n {
			return fmt.Errorf("series %d: metadata help_ref %d or unit_ref %d outside the symbols table (size %d)", i, ts.Metadata.HelpRef, ts.Metadata.UnitRef, n)
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
func (h *writeHandler) appendV2Floats(ra refAppender, st *writeState, ts *writev2.TimeSeries, symbols []string, key []byte, ref any) error {
	ref, err := h.seriesRef(ra, ref, key, func() (labels.Labels, error) {
		return v2Labels(&st.b, ts.LabelsRefs, symbols, &st.ls)
	})
	if err != nil {
		return err
	}
	for _, s := range ts.Samples {
		if err := ra.AppendRef(ref, s.Timestamp, s.Value); err != nil {
			return err
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
		return labels.EmptyLabels(), errors.New("series has no labels")
	}
	sb.Reset()
	for i := 0; i < len(refs); i += 2 {
		// Checked here: the duplicate check below takes a first empty
		// name for a repeat.
		if symbols[refs[i]] == "" {
			return labels.EmptyLabels(), errors.New("a label has an empty name")
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

func appendV2Series(app Appender, sb *labels.ScratchBuilder, ls labels.Labels, ts *writev2.TimeSeries, symbols []string) error {
	// Spec: a series carries samples or histograms, never both, never none.
	switch {
	case len(ts.Samples) > 0 && len(ts.Histograms) > 0:
		return errors.New("series has both samples and histograms; send them as separate series")
	case len(ts.Samples) == 0 && len(ts.Histograms) == 0 && len(ts.Exemplars) == 0:
		// Exemplars alone are accepted although the spec asks for a sample
		// or histogram: Prometheus 3.x sends each exemplar in a series of
		// its own (prometheus/prometheus#17857), and refusing them would
		// drop every exemplar it sends.
		return errors.New("series has neither samples nor histograms")
	}
	// NOTE: start timestamps (Sample/Histogram start_timestamp) are not
	// stored: the KairosDB layout has no place for them.
	for _, s := range ts.Samples {
		if err := app.Append(ls, s.Timestamp, s.Value); err != nil {
			return err
		}
	}
	for i := range ts.Histograms {
		if err := appendHistogram(app, ls, ts.Histograms[i].Timestamp, &ts.Histograms[i]); err != nil {
			return err
		}
	}
	for _, ep := range ts.Exemplars {
		e, err := ep.ToExemplar(sb, symbols)
		if err != nil {
			return &exemplarsRejected{err}
		}
		if err := app.AppendExemplar(ls, e); err != nil {
			return &exemplarsRejected{err}
		}
	}
	return nil
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
