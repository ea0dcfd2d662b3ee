package frontend

import (
	"bytes"
	"fmt"
	"strconv"

	jsoniter "github.com/json-iterator/go"
	"github.com/prometheus/prometheus/model/labels"
)

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
