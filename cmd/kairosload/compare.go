package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

type compareFlags struct {
	url              *string
	panels           *[]string
	queryRange, step *time.Duration
	end              *string
	a, b             *[]string
	rel              *float64
	timeout          *time.Duration
}

// maxCompareBytes bounds one answer the comparison holds in memory: two of
// them per panel are decoded whole.
const maxCompareBytes = 1 << 30

// runCompare evaluates every panel twice over the same range, once with
// the --a parameters and once with --b (by default: rollups as the query
// API picks them, and raw samples), bypassing any results cache, and
// reports how the answers differ point by point: what a dashboard shows
// differently when it reads rollups.
func runCompare(ctx context.Context, f compareFlags, logger *slog.Logger) error {
	if len(*f.panels) == 0 {
		return errors.New("--panel: at least one")
	}
	if *f.step <= 0 || *f.queryRange <= 0 {
		return errors.New("--step and --range must be positive")
	}
	if !(*f.rel >= 0) {
		return errors.New("--rel must not be negative")
	}
	pa, err := paramList(*f.a)
	if err != nil {
		return fmt.Errorf("--a: %w", err)
	}
	pb, err := paramList(*f.b)
	if err != nil {
		return fmt.Errorf("--b: %w", err)
	}
	step := f.step.Milliseconds()
	end := time.Now().UnixMilli()
	if *f.end != "" {
		if end, err = parseTime(*f.end); err != nil {
			return fmt.Errorf("--end: %w", err)
		}
	}
	end = end / step * step
	from := (end - f.queryRange.Milliseconds()) / step * step
	client := &http.Client{Timeout: *f.timeout}
	for _, q := range *f.panels {
		get := func(extra url.Values) (answerMatrix, time.Duration, error) {
			endpoint, params, err := rangeRequest(*f.url, q, from, end, *f.step)
			if err != nil {
				return nil, 0, err
			}
			t0 := time.Now()
			m, err := fetchMatrix(ctx, client, endpoint, withParams(params, extra))
			return m, time.Since(t0), err
		}
		ma, da, err := get(pa)
		if err != nil {
			return fmt.Errorf("%s with --a: %w", q, err)
		}
		mb, db, err := get(pb)
		if err != nil {
			return fmt.Errorf("%s with --b: %w", q, err)
		}
		d := compareMatrices(ma, mb, *f.rel)
		logger.Info("Compared", "panel", q, "a_ms", da.Milliseconds(), "b_ms", db.Milliseconds())
		fmt.Printf("COMPARE panel=%q %s\n", q, d)
	}
	return nil
}

// paramList reads key=value pairs.
func paramList(kvs []string) (url.Values, error) {
	v := url.Values{}
	for _, kv := range kvs {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want key=value", kv)
		}
		v.Add(k, val)
	}
	return v, nil
}

// answerMatrix is a matrix answer: series (their labels as canonical JSON)
// to time (ms) to value.
type answerMatrix map[string]map[int64]float64

func fetchMatrix(ctx context.Context, client *http.Client, endpoint, params string) (answerMatrix, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(params))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Cache-Control", "no-store")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCompareBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxCompareBytes {
		return nil, fmt.Errorf("answer over %d bytes", maxCompareBytes)
	}
	return decodeMatrix(resp.StatusCode, body)
}

func decodeMatrix(status int, body []byte) (answerMatrix, error) {
	var a queryAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("status %d, JSON: %w", status, err)
	}
	if status != http.StatusOK || a.Status != "success" {
		return nil, fmt.Errorf("status %d: %s: %s", status, a.ErrorType, a.Error)
	}
	if a.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("result type %q, want matrix", a.Data.ResultType)
	}
	var rs []struct {
		Metric map[string]string   `json:"metric"`
		Values [][]json.RawMessage `json:"values"`
	}
	if err := json.Unmarshal(a.Data.Result, &rs); err != nil {
		return nil, err
	}
	m := answerMatrix{}
	for _, s := range rs {
		k, _ := json.Marshal(s.Metric) // map keys come sorted
		pts := make(map[int64]float64, len(s.Values))
		for _, p := range s.Values {
			if err := checkPoint(p); err != nil {
				return nil, err
			}
			var ts float64
			var v string
			_ = json.Unmarshal(p[0], &ts)
			_ = json.Unmarshal(p[1], &v)
			f, _ := strconv.ParseFloat(v, 64)
			pts[int64(math.Round(ts*1000))] = f
		}
		m[string(k)] = pts
	}
	return m, nil
}

// difference is how two answers to one query differ.
type difference struct {
	compared, equal int
	onlyA, onlyB    int // points one answer has and the other not
	// Points by relative difference: under 1e-6, 1e-3, 1e-2, and more.
	under6, under3, under2, over2 int
	// The largest relative difference, where, and the two values.
	worst          float64
	worstT         int64
	worstSeries    string
	worstA, worstB float64
}

func (d difference) String() string {
	s := fmt.Sprintf("points=%d equal=%d only_a=%d only_b=%d rel_lt_1e-6=%d rel_lt_1e-3=%d rel_lt_1e-2=%d rel_ge_1e-2=%d",
		d.compared, d.equal, d.onlyA, d.onlyB, d.under6, d.under3, d.under2, d.over2)
	if d.equal < d.compared {
		s += fmt.Sprintf(" worst_rel=%.3g at=%s series=%s a=%g b=%g", d.worst,
			time.UnixMilli(d.worstT).UTC().Format(time.RFC3339), d.worstSeries, d.worstA, d.worstB)
	}
	return s
}

// compareMatrices compares a and b point by point. Two values are equal
// when both are NaN, or they differ by at most rel of the larger
// magnitude (equal infinities included).
func compareMatrices(a, b answerMatrix, rel float64) difference {
	var d difference
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		pa, pb := a[k], b[k]
		ts := make([]int64, 0, len(pa))
		for t := range pa {
			ts = append(ts, t)
		}
		slices.Sort(ts)
		for _, t := range ts {
			vb, ok := pb[t]
			if !ok {
				d.onlyA++
				continue
			}
			va := pa[t]
			d.compared++
			r := relDiff(va, vb)
			switch {
			case r <= rel:
				d.equal++
			case r < 1e-6:
				d.under6++
			case r < 1e-3:
				d.under3++
			case r < 1e-2:
				d.under2++
			default:
				d.over2++
			}
			if r > rel && r > d.worst {
				d.worst, d.worstT, d.worstSeries, d.worstA, d.worstB = r, t, k, va, vb
			}
		}
		for t := range pb {
			if _, ok := pa[t]; !ok {
				d.onlyB++
			}
		}
	}
	return d
}

// relDiff is |a-b| over the larger magnitude: 0 for equal values (NaN and
// NaN, equal infinities), +Inf when one side is NaN or infinite and the
// other is not.
func relDiff(a, b float64) float64 {
	switch {
	case math.IsNaN(a) || math.IsNaN(b):
		if math.IsNaN(a) && math.IsNaN(b) {
			return 0
		}
		return math.Inf(1)
	case a == b:
		return 0
	case math.IsInf(a, 0) || math.IsInf(b, 0):
		return math.Inf(1)
	}
	// Scaled first, so that values near float64's end do not overflow.
	m := math.Max(math.Abs(a), math.Abs(b))
	return math.Abs(a/m - b/m)
}
