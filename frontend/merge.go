package frontend

import (
	"cmp"
	stdjson "encoding/json"
	"errors"
	"net/http"
	"slices"

	jsoniter "github.com/json-iterator/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/util/jsonutil"

	"github.com/kairos-remote/kairos-adapter/queryapi"
)

// json is the query API's own configuration of jsoniter, so that what the
// frontend writes is what the query API would have written.
var json = jsoniter.ConfigCompatibleWithStandardLibrary

// point is one point of an answer: its time, and its value as the query
// API wrote it (a quoted float or a histogram object), passed on untouched.
type point struct {
	t int64
	v []byte
}

// series is one series of a matrix answer.
type series struct {
	metric []byte // the labels as the query API wrote them
	labels labels.Labels
	floats []point
	hists  []point
}

// matrix is a range query's answer.
type matrix struct {
	series   []*series // in the engine's order: by labels
	warnings []string
	infos    []string
}

// fromEngine is a part's answer as the engine gave it (m, valid only
// during the call: queryapi.RangeHandler.EvalRange), in the form the
// frontend merges, caches and writes: each series' labels and values as
// the query API writes them, the values of a series in one array exactly
// as long as they are, so that a cached extent holds that array and the
// points, not one small allocation per point (cache.go's sizeOf counts
// it so).
func fromEngine(m promql.Matrix) any {
	out := &matrix{series: make([]*series, 0, len(m))}
	s := json.BorrowStream(nil)
	defer json.ReturnStream(s)
	for _, ps := range m {
		s.Reset(nil)
		queryapi.WriteLabels(s, ps.Metric)
		sr := &series{metric: slices.Clone(s.Buffer()), labels: ps.Metric}
		s.Reset(nil)
		ends := make([]int, 0, len(ps.Floats)+len(ps.Histograms))
		for _, p := range ps.Floats {
			jsonutil.MarshalFloat(p.F, s)
			ends = append(ends, len(s.Buffer()))
		}
		for _, p := range ps.Histograms {
			jsonutil.MarshalHistogram(p.H, s)
			ends = append(ends, len(s.Buffer()))
		}
		arena := slices.Clone(s.Buffer())
		at := func(i int) []byte {
			from := 0
			if i > 0 {
				from = ends[i-1]
			}
			return arena[from:ends[i]:ends[i]]
		}
		if len(ps.Floats) > 0 {
			sr.floats = make([]point, len(ps.Floats))
			for i, p := range ps.Floats {
				sr.floats[i] = point{t: p.T, v: at(i)}
			}
		}
		if len(ps.Histograms) > 0 {
			sr.hists = make([]point, len(ps.Histograms))
			for i, p := range ps.Histograms {
				sr.hists[i] = point{t: p.T, v: at(len(ps.Floats) + i)}
			}
		}
		out.series = append(out.series, sr)
	}
	return out
}

// concat merges the answers of consecutive parts: series by labels, their
// points in the parts' order, annotations once each.
func concat(parts []*matrix) *matrix {
	if len(parts) == 1 {
		return parts[0]
	}
	out := &matrix{}
	// Two passes: the first finds each series' points in all parts, so
	// that the second copies them into arrays of their final length.
	// Appended part by part, a year's 15 parts copied every point about
	// twice more, a tenth of a year panel's allocations.
	byKey := map[string]int{}
	var nFloats, nHists []int
	joins := make([][]int, len(parts)) // each part's series: the index of the series they join
	var buf []byte
	for pi, p := range parts {
		if p == nil {
			continue
		}
		out.warnings = appendNew(out.warnings, p.warnings)
		out.infos = appendNew(out.infos, p.infos)
		joins[pi] = make([]int, len(p.series))
		for i, s := range p.series {
			buf = s.labels.Bytes(buf)
			j, ok := byKey[string(buf)]
			if !ok {
				j = len(out.series)
				byKey[string(buf)] = j
				out.series = append(out.series, &series{metric: s.metric, labels: s.labels})
				nFloats, nHists = append(nFloats, 0), append(nHists, 0)
			}
			nFloats[j] += len(s.floats)
			nHists[j] += len(s.hists)
			joins[pi][i] = j
		}
	}
	for j, s := range out.series {
		if nFloats[j] > 0 {
			s.floats = make([]point, 0, nFloats[j])
		}
		if nHists[j] > 0 {
			s.hists = make([]point, 0, nHists[j])
		}
	}
	for pi, p := range parts {
		if p == nil {
			continue
		}
		for i, s := range p.series {
			have := out.series[joins[pi][i]]
			have.floats = append(have.floats, s.floats...)
			have.hists = append(have.hists, s.hists...)
		}
	}
	sortSeries(out.series)
	return out
}

func sortSeries(ss []*series) {
	slices.SortFunc(ss, func(a, b *series) int { return labels.Compare(a.labels, b.labels) })
}

// appendNew appends the strings of add that dst does not hold yet.
func appendNew(dst, add []string) []string {
	for _, s := range add {
		if !slices.Contains(dst, s) {
			dst = append(dst, s)
		}
	}
	return dst
}

// slice is the points of s evaluated in [from, to].
func (s *series) slice(from, to int64) *series {
	cut := func(ps []point) []point {
		i, _ := slices.BinarySearchFunc(ps, from, func(p point, t int64) int { return cmp.Compare(p.t, t) })
		j, _ := slices.BinarySearchFunc(ps, to+1, func(p point, t int64) int { return cmp.Compare(p.t, t) })
		return ps[i:j]
	}
	return &series{metric: s.metric, labels: s.labels, floats: cut(s.floats), hists: cut(s.hists)}
}

func (s *series) empty() bool { return len(s.floats) == 0 && len(s.hists) == 0 }

// slice is the points of m evaluated in [from, to]; series without any
// are left out, as the engine leaves them out.
func (m *matrix) slice(from, to int64) *matrix {
	out := &matrix{warnings: m.warnings, infos: m.infos}
	for _, s := range m.series {
		if c := s.slice(from, to); !c.empty() {
			out.series = append(out.series, c)
		}
	}
	return out
}

// respond writes m as the query API writes a success, its data encoded
// here, from the points as the query API wrote them.
func (f *Frontend) respond(w http.ResponseWriter, r *http.Request, m *matrix) {
	// A stream of the answer's size, not a pooled one grown to it by
	// doubling: a year panel's answer is close to a megabyte, and the
	// buffer goes on to the answer as it is.
	s := jsoniter.NewStream(json, nil, answerSize(m))
	s.WriteRaw(`{"resultType":"matrix","result":[`)
	for i, sr := range m.series {
		if i > 0 {
			s.WriteMore()
		}
		s.WriteRaw(`{"metric":`)
		s.WriteRaw(string(sr.metric))
		writePoints(s, "values", sr.floats)
		writePoints(s, "histograms", sr.hists)
		s.WriteObjectEnd()
	}
	s.WriteRaw(`]}`)
	// The stream only appends to its buffer, which sets no error.
	f.gzip.Respond(w, r, f.logger, queryapi.RangeAnswer{Data: stdjson.RawMessage(s.Buffer()), Warnings: m.warnings, Infos: m.infos})
}

// answerSize is about the length of m's data as respond writes it: each
// point's value as it is, its time at most 21 bytes ("-9223372036854775.808"
// and the array's punctuation), each series' labels and fields.
func answerSize(m *matrix) int {
	n := 64
	for _, sr := range m.series {
		n += len(sr.metric) + 48
		for _, ps := range [][]point{sr.floats, sr.hists} {
			for _, p := range ps {
				n += len(p.v) + 25
			}
		}
	}
	return n
}

func writePoints(s *jsoniter.Stream, field string, ps []point) {
	if len(ps) == 0 {
		return
	}
	s.WriteMore()
	s.WriteObjectField(field)
	s.WriteArrayStart()
	for i, p := range ps {
		if i > 0 {
			s.WriteMore()
		}
		s.WriteArrayStart()
		jsonutil.MarshalTimestamp(p.t, s)
		s.WriteMore()
		s.WriteRaw(string(p.v))
		s.WriteArrayEnd()
	}
	s.WriteArrayEnd()
}

var errNotFloat = errors.New("not a float")

func sortPoints(ps []point) {
	slices.SortFunc(ps, func(a, b point) int { return cmp.Compare(a.t, b.t) })
}
