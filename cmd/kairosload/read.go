package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/kairos-remote/kairos-adapter/internal/frames"
)

type readFlags struct {
	url, response, selector, start *string
	queryRange, duration, timeout  *time.Duration
	concurrency, queries           *int
}

// streamedPrefix is the Content-Type of a STREAMED_XOR_CHUNKS answer.
const streamedPrefix = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse"

// maxFrame bounds one chunked-read frame, as Prometheus's client does
// (storage.remote.read-max-bytes-in-frame, 1 MiB by default, is the
// server's target; 50 MiB is its client's hard limit).
const maxFrame = 50 << 20

func runRead(ctx context.Context, f readFlags, ws []watched, logger *slog.Logger) error {
	if *f.concurrency < 1 || *f.queries < 1 {
		return errors.New("--concurrency and --queries must be positive")
	}
	body, err := readRequest(*f.selector, *f.start, *f.queryRange, *f.response)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: *f.timeout, Transport: &http.Transport{DisableCompression: true}}
	var series, wireBytes atomic.Int64
	var firstErr atomic.Pointer[error]
	send := func(ctx context.Context, _ int) outcome {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, *f.url, bytes.NewReader(body))
		if err != nil {
			return outcome{kind: "bad_url"}
		}
		req.Header.Set("Content-Type", "application/x-protobuf")
		req.Header.Set("Content-Encoding", "snappy")
		req.Header.Set("X-Prometheus-Remote-Read-Version", "0.1.0")
		req.Header.Set("User-Agent", "kairosload")
		resp, err := client.Do(req)
		if err != nil {
			return outcome{kind: errKind(err)}
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			err := fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
			firstErr.CompareAndSwap(nil, &err)
			return outcome{kind: strconv.Itoa(resp.StatusCode)}
		}
		cr := &countingReader{r: resp.Body}
		var st decodeStats
		if strings.HasPrefix(resp.Header.Get("Content-Type"), streamedPrefix) {
			st, err = decodeChunked(cr)
		} else {
			st, err = decodeSamples(cr)
		}
		wireBytes.Add(cr.n)
		if err != nil {
			firstErr.CompareAndSwap(nil, &err)
			return outcome{kind: "decode_error"}
		}
		series.Add(int64(st.series))
		return outcome{ok: true, kind: "200", samples: st.samples}
	}

	if err := startWatch(ws); err != nil {
		return err
	}
	load0, cpu0 := loadAvg(), selfCPU()
	res := drive(ctx, *f.queries, *f.concurrency, *f.duration, send)
	if e := firstErr.Load(); e != nil {
		logger.Warn("Some queries failed", "first_err", *e)
	}
	extra := []any{
		"response", *f.response, "series", series.Load(), "MiB_received", wireBytes.Load() >> 20,
		"concurrency", *f.concurrency, "load1_start", load0, "load1_end", loadAvg(),
		"kairosload_cpu_s", fmt.Sprintf("%.1f", (selfCPU() - cpu0).Seconds()),
	}
	res.report("read", false, logger, append(extra, finishWatch(ws, res.samples)...)...)
	return nil
}

// readRequest builds the snappy-compressed ReadRequest of one query.
func readRequest(selector, start string, rng time.Duration, response string) ([]byte, error) {
	ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("--selector: %w", err)
	}
	from, err := parseTime(start)
	if err != nil {
		return nil, fmt.Errorf("--start: %w", err)
	}
	if from == 0 {
		from = time.Now().Add(-rng).UnixMilli()
	}
	q := prompb.Query{StartTimestampMs: from, EndTimestampMs: from + rng.Milliseconds()}
	for _, m := range ms {
		q.Matchers = append(q.Matchers, &prompb.LabelMatcher{Type: matchType(m.Type), Name: m.Name, Value: m.Value})
	}
	rt := prompb.ReadRequest_SAMPLES
	if response == "chunks" {
		rt = prompb.ReadRequest_STREAMED_XOR_CHUNKS
	}
	raw, err := (&prompb.ReadRequest{Queries: []*prompb.Query{&q}, AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{rt}}).Marshal()
	if err != nil {
		return nil, err
	}
	return snappy.Encode(nil, raw), nil
}

func matchType(t labels.MatchType) prompb.LabelMatcher_Type {
	switch t {
	case labels.MatchNotEqual:
		return prompb.LabelMatcher_NEQ
	case labels.MatchRegexp:
		return prompb.LabelMatcher_RE
	case labels.MatchNotRegexp:
		return prompb.LabelMatcher_NRE
	}
	return prompb.LabelMatcher_EQ
}

type decodeStats struct {
	series, samples int
}

// decodeSamples reads a SAMPLES answer: one snappy-compressed ReadResponse.
func decodeSamples(r io.Reader) (decodeStats, error) {
	var st decodeStats
	compressed, err := io.ReadAll(r)
	if err != nil {
		return st, err
	}
	raw, err := snappy.Decode(nil, compressed)
	if err != nil {
		return st, fmt.Errorf("snappy: %w", err)
	}
	var resp prompb.ReadResponse
	if err := resp.Unmarshal(raw); err != nil {
		return st, fmt.Errorf("ReadResponse: %w", err)
	}
	for _, qr := range resp.Results {
		for _, ts := range qr.Timeseries {
			st.series++
			st.samples += len(ts.Samples)
		}
	}
	return st, nil
}

// decodeChunked reads a STREAMED_XOR_CHUNKS answer frame by frame and
// iterates every sample of every chunk, so the count is what a client
// really decoded.
func decodeChunked(r io.Reader) (decodeStats, error) {
	var st decodeStats
	fr := frames.NewReader(r, maxFrame)
	var it chunkenc.Iterator
	for {
		msg, err := fr.Next()
		if err == io.EOF {
			return st, nil
		}
		if err != nil {
			return st, err
		}
		var resp prompb.ChunkedReadResponse
		if err := resp.Unmarshal(msg); err != nil {
			return st, fmt.Errorf("ChunkedReadResponse: %w", err)
		}
		for _, cs := range resp.ChunkedSeries {
			st.series++
			for _, c := range cs.Chunks {
				if c.Type != prompb.Chunk_XOR {
					return st, fmt.Errorf("chunk encoding %v, want XOR", c.Type)
				}
				chk, err := chunkenc.FromData(chunkenc.EncXOR, c.Data)
				if err != nil {
					return st, err
				}
				it = chk.Iterator(it)
				prev := int64(-1 << 63)
				for it.Next() == chunkenc.ValFloat {
					t, _ := it.At()
					if t < prev || t < c.MinTimeMs || t > c.MaxTimeMs {
						return st, fmt.Errorf("sample at %d outside chunk [%d, %d] or out of order", t, c.MinTimeMs, c.MaxTimeMs)
					}
					prev = t
					st.samples++
				}
				if err := it.Err(); err != nil {
					return st, err
				}
			}
		}
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
