package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type queryFlags struct {
	url, query, start            *string
	queryRange, step             *time.Duration
	duration, timeout            *time.Duration
	instant                      *bool
	concurrency, queries, warmup *int
	prometheusPID                *int
	noCache                      *bool
	panels                       *[]string
	params                       *[]string
}

// runQuery sends PromQL queries to a Prometheus HTTP API (the adapter's own,
// or a Prometheus that reads from the adapter) and decodes every answer
// fully, so the latency is what a dashboard would wait for.
func runQuery(ctx context.Context, f queryFlags, ws []watched, logger *slog.Logger) error {
	if *f.concurrency < 1 || *f.queries < 1 || *f.warmup < 0 {
		return errors.New("--concurrency and --queries must be positive, --warmup not negative")
	}
	endpoint, params, err := queryRequest(f)
	if err != nil {
		return err
	}
	extra, _ := paramList(ptrOr(f.params)) // checked by queryRequest
	if *f.prometheusPID > 0 {
		ws = append(ws, watched{name: "prometheus", pid: *f.prometheusPID, peak: true})
	}
	client := &http.Client{Timeout: *f.timeout}
	var series, wireBytes atomic.Int64
	var firstErr atomic.Pointer[error]
	send := func(ctx context.Context, _ int) outcome {
		return sendQuery(ctx, client, endpoint, params, *f.noCache, &series, &wireBytes, &firstErr)
	}
	concurrency := *f.concurrency
	if f.panels != nil && len(*f.panels) > 0 {
		send = func(ctx context.Context, _ int) outcome {
			return refresh(ctx, f, extra, func(endpoint, params string) outcome {
				return sendQuery(ctx, client, endpoint, params, *f.noCache, &series, &wireBytes, &firstErr)
			})
		}
		concurrency = 1 // the panels of one refresh run at once
	}
	return runQueries(ctx, f, ws, logger, send, concurrency, &series, &wireBytes, &firstErr)
}

// refresh sends every panel of a dashboard over the range ending now, with
// start and end on multiples of the step (as Grafana sends them, so that
// successive refreshes share their evaluation times), --concurrency at a
// time; it succeeds when every panel does.
func refresh(ctx context.Context, f queryFlags, extra url.Values, send func(endpoint, params string) outcome) outcome {
	step := f.step.Milliseconds()
	end := time.Now().UnixMilli() / step * step
	from := (end - f.queryRange.Milliseconds()) / step * step
	sem := make(chan struct{}, max(*f.concurrency, 1))
	outs := make([]outcome, len(*f.panels))
	var wg sync.WaitGroup
	for i, q := range *f.panels {
		endpoint, params, err := rangeRequest(*f.url, q, from, end, *f.step)
		if err != nil {
			return outcome{kind: "bad_url"}
		}
		params = withParams(params, extra)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			outs[i] = send(endpoint, params)
		})
	}
	wg.Wait()
	total := outcome{ok: true, kind: "200"}
	for _, o := range outs {
		if !o.ok {
			return o
		}
		total.samples += o.samples
	}
	return total
}

// sendQuery sends one query and decodes its answer.
func sendQuery(ctx context.Context, client *http.Client, endpoint, params string, noCache bool, series, wireBytes *atomic.Int64, firstErr *atomic.Pointer[error]) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(params))
	if err != nil {
		return outcome{kind: "bad_url"}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "kairosload")
	if noCache {
		req.Header.Set("Cache-Control", "no-store")
	}
	resp, err := client.Do(req)
	if err != nil {
		return outcome{kind: errKind(err)}
	}
	defer resp.Body.Close()
	cr := &countingReader{r: resp.Body}
	st, err := decodeQueryAnswer(cr)
	wireBytes.Add(cr.n)
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("status %d: %v", resp.StatusCode, err)
		firstErr.CompareAndSwap(nil, &err)
		return outcome{kind: strconv.Itoa(resp.StatusCode)}
	}
	if err != nil {
		firstErr.CompareAndSwap(nil, &err)
		return outcome{kind: "decode_error"}
	}
	series.Add(int64(st.series))
	return outcome{ok: true, kind: "200", samples: st.samples}
}

func runQueries(ctx context.Context, f queryFlags, ws []watched, logger *slog.Logger, send func(context.Context, int) outcome, concurrency int, series, wireBytes *atomic.Int64, firstErr *atomic.Pointer[error]) error {
	// The warm-up fills caches (and, for Prometheus, its remote-read
	// client's connections) before anything is measured.
	if *f.warmup > 0 {
		w := drive(ctx, *f.warmup, 1, *f.duration, send)
		logger.Info("Warm-up done", "queries", w.requests, "outcomes", w.kindList())
		series.Store(0)
		wireBytes.Store(0)
	}
	if err := startWatch(ws); err != nil {
		return err
	}
	load0, cpu0 := loadAvg(), selfCPU()
	res := drive(ctx, *f.queries, concurrency, *f.duration, send)
	if e := firstErr.Load(); e != nil {
		logger.Warn("Some queries failed", "first_err", *e)
	}
	perQuery := int64(0)
	if res.requests > 0 {
		perQuery = series.Load() / int64(res.requests)
	}
	extra := []any{
		"series_per_query", perQuery, "KiB_received", wireBytes.Load() >> 10,
		"concurrency", *f.concurrency, "panels", len(ptrOr(f.panels)), "load1_start", load0, "load1_end", loadAvg(),
		"kairosload_cpu_s", fmt.Sprintf("%.1f", (selfCPU() - cpu0).Seconds()),
	}
	res.report("query", false, logger, append(extra, finishWatch(ws, 0)...)...)
	return nil
}

func ptrOr(p *[]string) []string {
	if p == nil {
		return nil
	}
	return *p
}

// queryRequest is the endpoint and form body of the query the flags ask
// for: an instant query at the end of the range, or a range query.
func queryRequest(f queryFlags) (string, string, error) {
	base, err := url.Parse(*f.url)
	if err != nil || base.Scheme == "" || base.Host == "" {
		return "", "", fmt.Errorf("--url %q: want the API's base URL, e.g. http://127.0.0.1:9201", *f.url)
	}
	if *f.query == "" {
		return "", "", errors.New("--query is empty")
	}
	extra, err := paramList(ptrOr(f.params))
	if err != nil {
		return "", "", fmt.Errorf("--param: %w", err)
	}
	from, err := parseTime(*f.start)
	if err != nil {
		return "", "", fmt.Errorf("--start: %w", err)
	}
	if from == 0 {
		from = time.Now().Add(-*f.queryRange).UnixMilli()
	}
	end := from + f.queryRange.Milliseconds()
	if *f.instant {
		v := url.Values{"query": {*f.query}, "time": {secs(end)}}
		return strings.TrimSuffix(base.String(), "/") + "/api/v1/query", withParams(v.Encode(), extra), nil
	}
	endpoint, params, err := rangeRequest(*f.url, *f.query, from, end, *f.step)
	return endpoint, withParams(params, extra), err
}

// withParams adds the --param pairs to a form body.
func withParams(body string, extra url.Values) string {
	if len(extra) == 0 {
		return body
	}
	return body + "&" + extra.Encode()
}

func secs(ms int64) string { return strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64) }

// rangeRequest is the endpoint and form body of a range query.
func rangeRequest(baseURL, query string, from, end int64, step time.Duration) (string, string, error) {
	if step <= 0 {
		return "", "", errors.New("--step must be positive")
	}
	v := url.Values{"query": {query}, "start": {secs(from)}, "end": {secs(end)}, "step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	return strings.TrimSuffix(baseURL, "/") + "/api/v1/query_range", v.Encode(), nil
}

// queryAnswer is the Prometheus API's JSON envelope. Values stay raw until
// decodeQueryAnswer parses every one of them.
type queryAnswer struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

// decodeQueryAnswer decodes an answer completely: every series' labels and
// every point's timestamp and value (native histograms as their objects).
// samples counts points.
func decodeQueryAnswer(r io.Reader) (decodeStats, error) {
	var st decodeStats
	var a queryAnswer
	if err := json.NewDecoder(r).Decode(&a); err != nil {
		return st, fmt.Errorf("JSON: %w", err)
	}
	if a.Status != "success" {
		return st, fmt.Errorf("%s: %s", a.ErrorType, a.Error)
	}
	switch a.Data.ResultType {
	case "scalar", "string":
		var p []json.RawMessage
		if err := json.Unmarshal(a.Data.Result, &p); err != nil {
			return st, err
		}
		st.samples = 1
		return st, nil
	case "vector", "matrix":
	default:
		return st, fmt.Errorf("result type %q", a.Data.ResultType)
	}
	var rs []struct {
		Metric     map[string]string   `json:"metric"`
		Value      []json.RawMessage   `json:"value"`
		Values     [][]json.RawMessage `json:"values"`
		Histogram  []json.RawMessage   `json:"histogram"`
		Histograms [][]json.RawMessage `json:"histograms"`
	}
	if err := json.Unmarshal(a.Data.Result, &rs); err != nil {
		return st, err
	}
	for _, s := range rs {
		st.series++
		points := s.Values
		if s.Value != nil {
			points = append(points, s.Value)
		}
		for _, p := range points {
			if err := checkPoint(p); err != nil {
				return st, err
			}
		}
		st.samples += len(points) + len(s.Histograms)
		if s.Histogram != nil {
			st.samples++
		}
	}
	return st, nil
}

// checkPoint parses a float point [unix_seconds, "value"].
func checkPoint(p []json.RawMessage) error {
	if len(p) != 2 {
		return fmt.Errorf("point of %d elements", len(p))
	}
	var ts float64
	var v string
	if err := json.Unmarshal(p[0], &ts); err != nil {
		return fmt.Errorf("point time: %w", err)
	}
	if err := json.Unmarshal(p[1], &v); err != nil {
		return fmt.Errorf("point value: %w", err)
	}
	if _, err := strconv.ParseFloat(v, 64); err != nil {
		return fmt.Errorf("point value: %w", err)
	}
	return nil
}
