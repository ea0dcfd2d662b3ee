package frontend

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	jsoniter "github.com/json-iterator/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/util/jsonutil"
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

// parseAnswer reads the query API's answer to a range query.
func parseAnswer(b []byte) (*matrix, error) {
	var env struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric     jsoniter.RawMessage   `json:"metric"`
				Values     []jsoniter.RawMessage `json:"values"`
				Histograms []jsoniter.RawMessage `json:"histograms"`
			} `json:"result"`
		} `json:"data"`
		Warnings []string `json:"warnings"`
		Infos    []string `json:"infos"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("reading a part's answer: %w", err)
	}
	if env.Status != "success" || env.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("a part answered %q of type %q, not a matrix", env.Status, env.Data.ResultType)
	}
	m := &matrix{series: make([]*series, 0, len(env.Data.Result)), warnings: env.Warnings, infos: env.Infos}
	for _, r := range env.Data.Result {
		var lm map[string]string
		if err := json.Unmarshal(r.Metric, &lm); err != nil {
			return nil, fmt.Errorf("reading a part's labels: %w", err)
		}
		s := &series{metric: r.Metric, labels: labels.FromMap(lm)}
		var err error
		if s.floats, err = parsePoints(r.Values); err != nil {
			return nil, err
		}
		if s.hists, err = parsePoints(r.Histograms); err != nil {
			return nil, err
		}
		m.series = append(m.series, s)
	}
	return m, nil
}

// parsePoints splits each [time, value] of an answer.
func parsePoints(raw []jsoniter.RawMessage) ([]point, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	out := make([]point, 0, len(raw))
	size := 0
	for _, p := range raw {
		p = bytes.TrimSpace(p)
		comma := bytes.IndexByte(p, ',')
		if len(p) < 2 || p[0] != '[' || p[len(p)-1] != ']' || comma < 0 {
			return nil, fmt.Errorf("a part's point %q is not [time, value]", p)
		}
		t, err := parseTimestamp(bytes.TrimSpace(p[1:comma]))
		if err != nil {
			return nil, err
		}
		v := bytes.TrimSpace(p[comma+1 : len(p)-1])
		size += len(v)
		out = append(out, point{t: t, v: v})
	}
	// The values are copied into one array per series, exactly as long as
	// they are, so that what a cached extent holds is that array and the
	// points, not the answer's text nor one small allocation per point
	// (cache.go's sizeOf counts it so).
	arena := make([]byte, 0, size)
	for i := range out {
		start := len(arena)
		arena = append(arena, out[i].v...)
		out[i].v = arena[start:len(arena):len(arena)]
	}
	return out, nil
}

// parseTimestamp reads the seconds jsonutil.MarshalTimestamp writes, to
// the exact millisecond.
func parseTimestamp(b []byte) (int64, error) {
	s := string(b)
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	whole, frac, _ := cutByte(s, '.')
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || len(frac) > 3 {
		return 0, fmt.Errorf("a part's time %q", b)
	}
	var ms int64
	if frac != "" {
		f, err := strconv.ParseInt((frac + "00")[:3], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("a part's time %q", b)
		}
		ms = f
	}
	t := sec*1000 + ms
	if neg {
		t = -t
	}
	return t, nil
}

func cutByte(s string, c byte) (string, string, bool) {
	if i := bytes.IndexByte([]byte(s), c); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// concat merges the answers of consecutive parts: series by labels, their
// points in the parts' order, annotations once each.
func concat(parts []*matrix) *matrix {
	if len(parts) == 1 {
		return parts[0]
	}
	out := &matrix{}
	byKey := map[string]*series{}
	for _, p := range parts {
		if p == nil {
			continue
		}
		out.warnings = appendNew(out.warnings, p.warnings)
		out.infos = appendNew(out.infos, p.infos)
		for _, s := range p.series {
			k := string(s.labels.Bytes(nil))
			have, ok := byKey[k]
			if !ok {
				have = &series{metric: s.metric, labels: s.labels}
				byKey[k] = have
				out.series = append(out.series, have)
			}
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

// encode writes m as the query API's success envelope.
func (m *matrix) encode() ([]byte, error) {
	s := json.BorrowStream(nil)
	defer json.ReturnStream(s)
	s.WriteRaw(`{"status":"success","data":{"resultType":"matrix","result":[`)
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
	for _, a := range []struct {
		name string
		list []string
	}{{"warnings", m.warnings}, {"infos", m.infos}} {
		if len(a.list) > 0 {
			s.WriteMore()
			s.WriteObjectField(a.name)
			s.WriteVal(a.list)
		}
	}
	s.WriteObjectEnd()
	if s.Error != nil {
		return nil, s.Error
	}
	return slices.Clone(s.Buffer()), nil
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

func writeMatrix(w http.ResponseWriter, gz bool, m *matrix) {
	b, err := m.encode()
	if err != nil {
		writeError(w, gz, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	writeBody(w, gz, http.StatusOK, b)
}

var errNotFloat = errors.New("not a float")

func sortPoints(ps []point) {
	slices.SortFunc(ps, func(a, b point) int { return cmp.Compare(a.t, b.t) })
}
