package remotewrite

import (
	"encoding/binary"
	"math"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// plainSample decodes the sample field at the start of b when it holds a
// value and a timestamp only, in field order, with a one-byte length: what
// Prometheus sends for every sample but a zero value or time. n is the
// length of the whole field.
func plainSample(b []byte) (v float64, t int64, n int, ok bool) {
	if len(b) < 13 || b[0] != 2<<3|2 || b[1] < 11 || b[1] >= 0x80 || int(b[1]) > len(b)-2 ||
		b[2] != 1<<3|1 || b[11] != 2<<3 {
		return 0, 0, 0, false
	}
	payload := b[2 : 2+int(b[1])]
	ut, m := binary.Uvarint(payload[10:])
	if m <= 0 || m != len(payload)-10 {
		return 0, 0, 0, false
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(payload[1:9])), int64(ut), 2 + len(payload), true
}

// unmarshalSample decodes a sample of either version: value (1), timestamp
// (2) and the 2.0 start_timestamp (3).
func unmarshalSample(b []byte) (v float64, t, start int64, err error) {
	for len(b) > 0 {
		field, wire, payload, rest, err := nextField(b)
		if err != nil {
			return 0, 0, 0, err
		}
		b = rest
		switch field {
		case 1:
			if wire != 1 {
				return 0, 0, 0, wrongWire(wire, "value")
			}
			v = math.Float64frombits(binary.LittleEndian.Uint64(payload))
		case 2:
			if wire != 0 {
				return 0, 0, 0, wrongWire(wire, "timestamp")
			}
			t = int64(uvarint(payload))
		case 3:
			if wire != 0 {
				return 0, 0, 0, wrongWire(wire, "start_timestamp")
			}
			start = int64(uvarint(payload))
		}
	}
	return v, t, start, nil
}

// encodedFields are the fields of one kind (samples, histograms or
// exemplars) of one series, left encoded: the bytes from its first such
// field to the end of its last, which decoding checked, and how many there
// are. Other fields in between are skipped by nextSample and nextPayload.
type encodedFields struct {
	b []byte
	n int
}

// add takes in the field series[off:off+n], series being the payload of
// the series.
func (s *encodedFields) add(series []byte, off, n int) {
	start := off
	if s.n > 0 {
		start = cap(series) - cap(s.b)
	}
	s.b = series[start : off+n]
	s.n++
}

// nextSample decodes the first sample of b, a part of encodedFields.b
// starting at a field, and returns the rest; ok is false when none is left.
func nextSample(b []byte) (v float64, t int64, rest []byte, ok bool) {
	for len(b) > 0 {
		if v, t, n, ok := plainSample(b); ok {
			return v, t, b[n:], true
		}
		field, _, payload, rest, _ := nextField(b) // checked when decoded
		if field == 2 {
			v, t, _, _ := unmarshalSample(payload)
			return v, t, rest, true
		}
		b = rest
	}
	return 0, 0, nil, false
}

// itemScratch is where the histograms and exemplars of a request are
// decoded, one at a time: when decoding a window, to check them, and when
// appending, to convert them. Its slices are reused, so that neither costs
// an allocation per item; what it converts is valid until the next one (the
// Appender contract).
type itemScratch struct {
	h1  prompb.Histogram
	h2  writev2.Histogram
	ex1 prompb.Exemplar
	ex2 writev2.Exemplar
	h   histogram.Histogram
	fh  histogram.FloatHistogram
	// The labels of the exemplar being appended, built in place with a
	// builder of their own: the series' labels live in the other one's
	// buffer (ScratchBuilder.Overwrite).
	exB      labels.ScratchBuilder
	exLabels labels.Labels
}

// exemplar converts the exemplar last decoded (ex1 when v1, else ex2,
// whose refs CheckSymbols checked) into an exemplar whose labels are
// sc.exLabels.
func (sc *itemScratch) exemplar(v1 bool, symbols []string) exemplar.Exemplar {
	sc.exB.Reset()
	var v float64
	var t int64
	if v1 {
		for _, l := range sc.ex1.Labels {
			sc.exB.Add(l.Name, l.Value)
		}
		v, t = sc.ex1.Value, sc.ex1.Timestamp
	} else {
		refs := sc.ex2.LabelsRefs
		for i := 0; i+1 < len(refs); i += 2 {
			sc.exB.Add(symbols[refs[i]], symbols[refs[i+1]])
		}
		v, t = sc.ex2.Value, sc.ex2.Timestamp
	}
	sc.exB.Sort()
	sc.exB.Overwrite(&sc.exLabels)
	return exemplar.Exemplar{Labels: sc.exLabels, Value: v, Ts: t, HasTs: t != 0}
}

func (sc *itemScratch) v1Histogram(payload []byte) error {
	h := &sc.h1
	*h = prompb.Histogram{
		NegativeSpans: h.NegativeSpans[:0], PositiveSpans: h.PositiveSpans[:0],
		NegativeDeltas: h.NegativeDeltas[:0], PositiveDeltas: h.PositiveDeltas[:0],
		NegativeCounts: h.NegativeCounts[:0], PositiveCounts: h.PositiveCounts[:0],
		CustomValues: h.CustomValues[:0],
	}
	return h.Unmarshal(payload)
}

func (sc *itemScratch) v2Histogram(payload []byte) error {
	h := &sc.h2
	*h = writev2.Histogram{
		NegativeSpans: h.NegativeSpans[:0], PositiveSpans: h.PositiveSpans[:0],
		NegativeDeltas: h.NegativeDeltas[:0], PositiveDeltas: h.PositiveDeltas[:0],
		NegativeCounts: h.NegativeCounts[:0], PositiveCounts: h.PositiveCounts[:0],
		CustomValues: h.CustomValues[:0],
	}
	return h.Unmarshal(payload)
}

func (sc *itemScratch) v1Exemplar(payload []byte) error {
	sc.ex1 = prompb.Exemplar{Labels: sc.ex1.Labels[:0]}
	return sc.ex1.Unmarshal(payload)
}

func (sc *itemScratch) v2Exemplar(payload []byte) error {
	sc.ex2 = writev2.Exemplar{LabelsRefs: sc.ex2.LabelsRefs[:0]}
	return sc.ex2.Unmarshal(payload)
}

// histogram converts the histogram last decoded (h1 when v1, else h2) as
// prompb's and writev2's ToIntHistogram and ToFloatHistogram do, into
// sc.h or sc.fh; exactly one of the two results is non-nil.
func (sc *itemScratch) histogram(v1 bool) (*histogram.Histogram, *histogram.FloatHistogram) {
	type wire struct {
		float                              bool
		resetHint                          histogram.CounterResetHint
		schema                             int32
		zeroThreshold, sum                 float64
		zeroCountInt, countInt             uint64
		zeroCountFloat, countFloat         float64
		posDeltas, negDeltas               []int64
		posCounts, negCounts, customValues []float64
	}
	var w wire
	pos, neg := sc.h.PositiveSpans[:0], sc.h.NegativeSpans[:0]
	if v1 {
		h := &sc.h1
		w = wire{h.IsFloatHistogram(), histogram.CounterResetHint(h.ResetHint), h.Schema, h.ZeroThreshold, h.Sum,
			h.GetZeroCountInt(), h.GetCountInt(), h.GetZeroCountFloat(), h.GetCountFloat(),
			h.PositiveDeltas, h.NegativeDeltas, h.PositiveCounts, h.NegativeCounts, h.CustomValues}
		for _, s := range h.PositiveSpans {
			pos = append(pos, histogram.Span{Offset: s.Offset, Length: s.Length})
		}
		for _, s := range h.NegativeSpans {
			neg = append(neg, histogram.Span{Offset: s.Offset, Length: s.Length})
		}
	} else {
		h := &sc.h2
		w = wire{h.IsFloatHistogram(), histogram.CounterResetHint(h.ResetHint), h.Schema, h.ZeroThreshold, h.Sum,
			h.GetZeroCountInt(), h.GetCountInt(), h.GetZeroCountFloat(), h.GetCountFloat(),
			h.PositiveDeltas, h.NegativeDeltas, h.PositiveCounts, h.NegativeCounts, h.CustomValues}
		for _, s := range h.PositiveSpans {
			pos = append(pos, histogram.Span{Offset: s.Offset, Length: s.Length})
		}
		for _, s := range h.NegativeSpans {
			neg = append(neg, histogram.Span{Offset: s.Offset, Length: s.Length})
		}
	}
	// Both keep the spans' arrays for the next histogram.
	sc.h.PositiveSpans, sc.h.NegativeSpans = pos, neg
	// Absent fields are nil, as the generated decoder leaves them: the
	// scratch's are empty but not nil once a histogram had them, and
	// Validate takes non-nil custom bounds for custom buckets.
	w.posDeltas, w.negDeltas = nilIfEmpty(w.posDeltas), nilIfEmpty(w.negDeltas)
	w.posCounts, w.negCounts = nilIfEmpty(w.posCounts), nilIfEmpty(w.negCounts)
	w.customValues = nilIfEmpty(w.customValues)
	if w.float {
		sc.fh = histogram.FloatHistogram{
			CounterResetHint: w.resetHint, Schema: w.schema, ZeroThreshold: w.zeroThreshold,
			ZeroCount: w.zeroCountFloat, Count: w.countFloat, Sum: w.sum,
			PositiveSpans: pos, PositiveBuckets: w.posCounts,
			NegativeSpans: neg, NegativeBuckets: w.negCounts,
			CustomValues: w.customValues,
		}
		return nil, &sc.fh
	}
	sc.h = histogram.Histogram{
		CounterResetHint: w.resetHint, Schema: w.schema, ZeroThreshold: w.zeroThreshold,
		ZeroCount: w.zeroCountInt, Count: w.countInt, Sum: w.sum,
		PositiveSpans: pos, PositiveBuckets: w.posDeltas,
		NegativeSpans: neg, NegativeBuckets: w.negDeltas,
		CustomValues: w.customValues,
	}
	return &sc.h, nil
}

func nilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}
