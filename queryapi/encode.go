package queryapi

import (
	"encoding/json"

	jsoniter "github.com/json-iterator/go"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/jsonutil"
	"github.com/prometheus/prometheus/util/stats"
)

// The answers are written as Prometheus's API writes them, byte for byte:
// the envelope by jsoniter's standard-library configuration, and the values
// by the same jsonutil functions Prometheus's codec calls (floats as 1e+300,
// not 301 digits; empty results as []; label values not HTML-escaped). The
// codec itself lives in web/api/v1, which this package does not import (see
// the package doc), and registers its encoders globally. The standard
// library's configuration, except that a json.RawMessage is written as it
// is: every one this package writes comes from the encoders below, and the
// standard configuration parses each again to validate it, which cost more
// than compressing a range query's answer (BenchmarkRespond).
var jsonAPI = jsoniter.Config{EscapeHTML: true, SortMapKeys: true}.Froze()

// encodeResult writes the data of a query answer, with the query's
// statistics when qs is not nil (Prometheus's stats parameter).
func encodeResult(v parser.Value, qs stats.QueryStats) (json.RawMessage, error) {
	s := jsonAPI.BorrowStream(nil)
	defer jsonAPI.ReturnStream(s)
	s.WriteObjectStart()
	s.WriteObjectField("resultType")
	s.WriteString(string(v.Type()))
	s.WriteMore()
	s.WriteObjectField("result")
	switch v := v.(type) {
	case promql.Matrix:
		writeArray(s, v, writeSeries)
	case promql.Vector:
		writeArray(s, v, writeSample)
	default:
		// Scalars and strings: Prometheus writes them with their own
		// MarshalJSON.
		s.WriteVal(v)
	}
	if qs != nil {
		s.WriteMore()
		s.WriteObjectField("stats")
		s.WriteVal(qs)
	}
	s.WriteObjectEnd()
	return finish(s)
}

// encodeSeries writes the label sets of a /series answer.
func encodeSeries(sets []labels.Labels) (json.RawMessage, error) {
	s := jsonAPI.BorrowStream(nil)
	defer jsonAPI.ReturnStream(s)
	writeArray(s, sets, writeLabels)
	return finish(s)
}

// encodeExemplars writes a /query_exemplars answer.
func encodeExemplars(res []exemplar.QueryResult) (json.RawMessage, error) {
	s := jsonAPI.BorrowStream(nil)
	defer jsonAPI.ReturnStream(s)
	writeArray(s, res, func(s *jsoniter.Stream, r exemplar.QueryResult) {
		s.WriteObjectStart()
		s.WriteObjectField("seriesLabels")
		writeLabels(s, r.SeriesLabels)
		s.WriteMore()
		s.WriteObjectField("exemplars")
		writeArray(s, r.Exemplars, func(s *jsoniter.Stream, e exemplar.Exemplar) {
			s.WriteObjectStart()
			s.WriteObjectField("labels")
			writeLabels(s, e.Labels)
			s.WriteMore()
			s.WriteObjectField("value")
			jsonutil.MarshalFloat(e.Value, s)
			s.WriteMore()
			s.WriteObjectField("timestamp")
			jsonutil.MarshalTimestamp(e.Ts, s)
			s.WriteObjectEnd()
		})
		s.WriteObjectEnd()
	})
	return finish(s)
}

func finish(s *jsoniter.Stream) (json.RawMessage, error) {
	if s.Error != nil {
		return nil, s.Error
	}
	return append(json.RawMessage(nil), s.Buffer()...), nil
}

func writeArray[T any](s *jsoniter.Stream, items []T, f func(*jsoniter.Stream, T)) {
	s.WriteArrayStart()
	for i, it := range items {
		if i > 0 {
			s.WriteMore()
		}
		f(s, it)
	}
	s.WriteArrayEnd()
}

// WriteLabels writes ls as the query API writes a series' labels, for the
// frontend's answers.
func WriteLabels(s *jsoniter.Stream, ls labels.Labels) { writeLabels(s, ls) }

func writeLabels(s *jsoniter.Stream, ls labels.Labels) {
	s.WriteObjectStart()
	i := 0
	ls.Range(func(l labels.Label) {
		if i > 0 {
			s.WriteMore()
		}
		i++
		s.WriteString(l.Name)
		s.WriteRaw(":")
		s.WriteString(l.Value)
	})
	s.WriteObjectEnd()
}

func writeSeries(s *jsoniter.Stream, series promql.Series) {
	s.WriteObjectStart()
	s.WriteObjectField("metric")
	writeLabels(s, series.Metric)
	if len(series.Floats) > 0 {
		s.WriteMore()
		s.WriteObjectField("values")
		writeArray(s, series.Floats, func(s *jsoniter.Stream, p promql.FPoint) {
			s.WriteArrayStart()
			jsonutil.MarshalTimestamp(p.T, s)
			s.WriteMore()
			jsonutil.MarshalFloat(p.F, s)
			s.WriteArrayEnd()
		})
	}
	if len(series.Histograms) > 0 {
		s.WriteMore()
		s.WriteObjectField("histograms")
		writeArray(s, series.Histograms, func(s *jsoniter.Stream, p promql.HPoint) {
			s.WriteArrayStart()
			jsonutil.MarshalTimestamp(p.T, s)
			s.WriteMore()
			jsonutil.MarshalHistogram(p.H, s)
			s.WriteArrayEnd()
		})
	}
	s.WriteObjectEnd()
}

func writeSample(s *jsoniter.Stream, sample promql.Sample) {
	s.WriteObjectStart()
	s.WriteObjectField("metric")
	writeLabels(s, sample.Metric)
	s.WriteMore()
	if sample.H == nil {
		s.WriteObjectField("value")
	} else {
		s.WriteObjectField("histogram")
	}
	s.WriteArrayStart()
	jsonutil.MarshalTimestamp(sample.T, s)
	s.WriteMore()
	if sample.H == nil {
		jsonutil.MarshalFloat(sample.F, s)
	} else {
		jsonutil.MarshalHistogram(sample.H, s)
	}
	s.WriteArrayEnd()
	s.WriteObjectEnd()
}
