package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/prometheus/prometheus/model/histogram"
)

// Native histograms (docs/remote-protocols.md §2.7) are cells of their
// series' data_points rows like float samples, under data types of their own.
// The values are described byte by byte in docs/histogram-encoding.md.
//
// KairosDB fails a whole query when it meets a data type it does not know
// (§4.9). It finds rows through row_keys and tag_indexed_row_keys, whose
// partitions are (metric, row time) (§5.3, §6.2), and reads only the
// partitions of the metric it queries (§7.4, §6.3). So a KairosDB query of a
// metric with histograms fails for the row windows holding them, and its
// queries of every other metric never see these types.
const (
	TypeHistogram      = "prom_histogram"       // integer counts
	TypeFloatHistogram = "prom_float_histogram" // float counts
)

// histogramV1 is the first byte of every histogram value. A reader skips
// values of a version it does not know (DecodeValue's rule for unknown
// types), so a later format can be introduced without breaking old readers.
const histogramV1 = 0x01

// AppendHistogramValue appends the prom_histogram value of h to dst. It
// writes what it is given; callers validate h first (histogram.Validate),
// since DecodeHistogramValue accepts only valid histograms. Fields that the
// schema does not use (zero bucket and negative side for custom buckets,
// custom values for exponential schemas) are not written.
func AppendHistogramValue(dst []byte, h *histogram.Histogram) []byte {
	custom := histogram.IsCustomBucketsSchema(h.Schema)
	dst = appendHistogramHead(dst, h.CounterResetHint, h.Schema)
	dst = binary.AppendUvarint(dst, h.Count)
	dst = AppendDouble(dst, h.Sum)
	if !custom {
		dst = AppendDouble(dst, h.ZeroThreshold)
		dst = binary.AppendUvarint(dst, h.ZeroCount)
	}
	dst = appendSpans(dst, h.PositiveSpans)
	dst = appendVarints(dst, h.PositiveBuckets)
	if custom {
		return appendFloats(dst, h.CustomValues)
	}
	dst = appendSpans(dst, h.NegativeSpans)
	return appendVarints(dst, h.NegativeBuckets)
}

// AppendFloatHistogramValue appends the prom_float_histogram value of fh to
// dst: the layout of AppendHistogramValue with every count an 8-byte float
// and absolute bucket counts instead of deltas.
func AppendFloatHistogramValue(dst []byte, fh *histogram.FloatHistogram) []byte {
	custom := histogram.IsCustomBucketsSchema(fh.Schema)
	dst = appendHistogramHead(dst, fh.CounterResetHint, fh.Schema)
	dst = AppendDouble(dst, fh.Count)
	dst = AppendDouble(dst, fh.Sum)
	if !custom {
		dst = AppendDouble(dst, fh.ZeroThreshold)
		dst = AppendDouble(dst, fh.ZeroCount)
	}
	dst = appendSpans(dst, fh.PositiveSpans)
	dst = appendFloats(dst, fh.PositiveBuckets)
	if custom {
		return appendFloats(dst, fh.CustomValues)
	}
	dst = appendSpans(dst, fh.NegativeSpans)
	return appendFloats(dst, fh.NegativeBuckets)
}

// DecodeHistogramValue decodes a prom_histogram value. It accepts only what
// AppendHistogramValue writes for a valid histogram: the known version, a
// known reset hint, minimal varints, no trailing bytes, and a histogram that
// passes histogram.Validate, so that what it returns can be encoded into
// Prometheus chunks without surprises.
func DecodeHistogramValue(b []byte) (*histogram.Histogram, error) {
	r := valueReader{b: b}
	h := &histogram.Histogram{}
	h.CounterResetHint, h.Schema = r.histogramHead()
	custom := histogram.IsCustomBucketsSchema(h.Schema)
	h.Count = r.uvarint()
	h.Sum = r.f64()
	if !custom {
		h.ZeroThreshold = r.f64()
		h.ZeroCount = r.uvarint()
	}
	h.PositiveSpans = r.spans()
	h.PositiveBuckets = r.varints()
	if custom {
		h.CustomValues = r.floats()
	} else {
		h.NegativeSpans = r.spans()
		h.NegativeBuckets = r.varints()
	}
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("kairosstore: histogram value: %w", err)
	}
	if err := h.Validate(); err != nil {
		return nil, fmt.Errorf("kairosstore: stored histogram is invalid: %w", err)
	}
	return h, nil
}

// DecodeFloatHistogramValue decodes a prom_float_histogram value with the
// rules of DecodeHistogramValue.
func DecodeFloatHistogramValue(b []byte) (*histogram.FloatHistogram, error) {
	r := valueReader{b: b}
	fh := &histogram.FloatHistogram{}
	fh.CounterResetHint, fh.Schema = r.histogramHead()
	custom := histogram.IsCustomBucketsSchema(fh.Schema)
	fh.Count = r.f64()
	fh.Sum = r.f64()
	if !custom {
		fh.ZeroThreshold = r.f64()
		fh.ZeroCount = r.f64()
	}
	fh.PositiveSpans = r.spans()
	fh.PositiveBuckets = r.floats()
	if custom {
		fh.CustomValues = r.floats()
	} else {
		fh.NegativeSpans = r.spans()
		fh.NegativeBuckets = r.floats()
	}
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("kairosstore: float histogram value: %w", err)
	}
	if err := fh.Validate(); err != nil {
		return nil, fmt.Errorf("kairosstore: stored float histogram is invalid: %w", err)
	}
	return fh, nil
}

func appendHistogramHead(dst []byte, hint histogram.CounterResetHint, schema int32) []byte {
	dst = append(dst, histogramV1, byte(hint))
	return binary.AppendVarint(dst, int64(schema))
}

// appendSpans writes a count, then each span as zigzag offset and length.
func appendSpans(dst []byte, spans []histogram.Span) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(spans)))
	for _, s := range spans {
		dst = binary.AppendVarint(dst, int64(s.Offset))
		dst = binary.AppendUvarint(dst, uint64(s.Length))
	}
	return dst
}

// appendVarints writes a count, then each value as a zigzag varint: integer
// bucket deltas are small and of either sign.
func appendVarints(dst []byte, vs []int64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(vs)))
	for _, v := range vs {
		dst = binary.AppendVarint(dst, v)
	}
	return dst
}

// appendFloats writes a count, then each value as 8 big-endian bytes, which
// keep every bit (NaN payloads included).
func appendFloats(dst []byte, vs []float64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(vs)))
	for _, v := range vs {
		dst = AppendDouble(dst, v)
	}
	return dst
}

var errShort = errors.New("truncated")

// valueReader decodes the fields of a histogram or exemplar value. The first
// failure sticks: later reads return zero values and end reports it, so a
// decoder reads straight through without checking every field.
type valueReader struct {
	b   []byte
	err error
}

func (r *valueReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

// end reports the first failure, or trailing bytes.
func (r *valueReader) end() error {
	if r.err == nil && len(r.b) > 0 {
		return fmt.Errorf("%d trailing bytes", len(r.b))
	}
	return r.err
}

func (r *valueReader) u8() byte {
	if len(r.b) == 0 {
		r.fail(errShort)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// uvarint reads a minimal unsigned varint, as binary.AppendUvarint writes:
// accepting padded ones would give one value several encodings.
func (r *valueReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	switch {
	case n == 0:
		r.fail(errShort)
		return 0
	case n < 0:
		r.fail(errors.New("varint overflows 64 bits"))
		return 0
	case n > 1 && r.b[n-1] == 0:
		r.fail(errors.New("varint is not minimal"))
		return 0
	}
	r.b = r.b[n:]
	return v
}

// varint reads a zigzag varint, the inverse of binary.AppendVarint.
func (r *valueReader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (r *valueReader) i32() int32 {
	v := r.varint()
	if v != int64(int32(v)) {
		r.fail(fmt.Errorf("%d overflows 32 bits", v))
		return 0
	}
	return int32(v)
}

func (r *valueReader) f64() float64 {
	if len(r.b) < 8 {
		r.fail(errShort)
		return 0
	}
	v := math.Float64frombits(binary.BigEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

// count reads the length of a list whose items take at least size bytes
// each. A length the remaining bytes cannot hold fails before anything is
// allocated, so a corrupt value cannot ask for a huge slice.
func (r *valueReader) count(size int) int {
	n := r.uvarint()
	if n > uint64(len(r.b)/size) {
		r.fail(fmt.Errorf("list of %d items does not fit the %d bytes left", n, len(r.b)))
		return 0
	}
	return int(n)
}

func (r *valueReader) histogramHead() (histogram.CounterResetHint, int32) {
	if v := r.u8(); r.err == nil && v != histogramV1 {
		r.fail(fmt.Errorf("unknown version %d", v))
	}
	hint := histogram.CounterResetHint(r.u8())
	if r.err == nil && hint > histogram.GaugeType {
		r.fail(fmt.Errorf("unknown counter reset hint %d", hint))
	}
	return hint, r.i32()
}

// spans reads what appendSpans writes; an empty list is nil.
func (r *valueReader) spans() []histogram.Span {
	n := r.count(2)
	if n == 0 {
		return nil
	}
	spans := make([]histogram.Span, n)
	for i := range spans {
		spans[i].Offset = r.i32()
		length := r.uvarint()
		if length > math.MaxUint32 {
			r.fail(fmt.Errorf("span length %d overflows 32 bits", length))
		}
		spans[i].Length = uint32(length)
	}
	return spans
}

// varints reads what appendVarints writes; an empty list is nil.
func (r *valueReader) varints() []int64 {
	n := r.count(1)
	if n == 0 {
		return nil
	}
	vs := make([]int64, n)
	for i := range vs {
		vs[i] = r.varint()
	}
	return vs
}

// floats reads what appendFloats writes; an empty list is nil, which is what
// histogram.Validate asks of the custom values of exponential schemas.
func (r *valueReader) floats() []float64 {
	n := r.count(8)
	if n == 0 {
		return nil
	}
	vs := make([]float64, n)
	for i := range vs {
		vs[i] = r.f64()
	}
	return vs
}
