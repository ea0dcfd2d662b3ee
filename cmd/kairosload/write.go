package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

type writeFlags struct {
	url, protocol *string
	timeout       *time.Duration
	// retries is how often a request answered 5xx or 429 is sent again,
	// with Prometheus's backoff (30 ms doubling up to 5 s), before its
	// answer counts; 0 counts the first answer, as before.
	retries *int
}

// Prometheus's remote-write queue defaults (min_backoff, max_backoff).
const (
	minBackoff = 30 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Content types and version headers as Prometheus sends them.
const (
	contentTypeV1 = "application/x-protobuf;proto=prometheus.WriteRequest"
	contentTypeV2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
)

func runWrite(ctx context.Context, sh shape, f writeFlags, ws []watched, logger *slog.Logger) error {
	logger.Info("Building requests", "requests", sh.requests, "series", sh.series, "protocol", *f.protocol)
	t0 := time.Now()
	ls := sh.allLabels()
	bodies := make([][]byte, sh.requests)
	samples := make([]int, sh.requests)
	var bytesTotal int64
	parallel(sh.requests, func(i int) {
		if *f.protocol == "2.0" {
			bodies[i], samples[i] = sh.buildV2(ls, i)
		} else {
			bodies[i], samples[i] = sh.buildV1(ls, i)
		}
	})
	for _, b := range bodies {
		bytesTotal += int64(len(b))
	}
	logger.Info("Requests built", "took", time.Since(t0).Round(time.Millisecond), "MiB", bytesTotal>>20)

	ct, version := contentTypeV1, "0.1.0"
	if *f.protocol == "2.0" {
		ct, version = contentTypeV2, "2.0.0"
	}
	client := &http.Client{
		Timeout: *f.timeout,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: sh.concurrency,
			// Snappy bodies are already compressed.
			DisableCompression: true,
		},
	}
	var (
		retried  atomic.Int64
		sendOnce func(ctx context.Context, i int) outcome
	)
	send := func(ctx context.Context, i int) outcome {
		o := sendOnce(ctx, i)
		for try, backoff := 0, minBackoff; try < *f.retries && retryable(o.kind); try++ {
			select {
			case <-ctx.Done():
				return o
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			retried.Add(1)
			o = sendOnce(ctx, i)
		}
		return o
	}
	sendOnce = func(ctx context.Context, i int) outcome {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, *f.url, bytes.NewReader(bodies[i]))
		if err != nil {
			return outcome{kind: "bad_url"}
		}
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Content-Encoding", "snappy")
		req.Header.Set("User-Agent", "kairosload")
		req.Header.Set("X-Prometheus-Remote-Write-Version", version)
		resp, err := client.Do(req)
		if err != nil {
			return outcome{kind: errKind(err)}
		}
		// Drain the body so the connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		o := outcome{kind: strconv.Itoa(resp.StatusCode)}
		if resp.StatusCode/100 == 2 {
			o.ok, o.samples = true, samples[i]
			// 2.0 says what was stored; a short count is a partial write.
			if version == "2.0.0" && resp.Header.Get("X-Prometheus-Remote-Write-Samples-Written") != strconv.Itoa(samples[i]) {
				o.ok, o.kind = false, o.kind+"_partial"
			}
		}
		return o
	}

	if err := startWatch(ws); err != nil {
		return err
	}
	load0, cpu0 := loadAvg(), selfCPU()
	res := drive(ctx, sh.requests, sh.concurrency, sh.duration, send)
	extra := []any{
		"protocol", *f.protocol, "series", sh.series, "samples_per_request", sh.seriesPerRequest * sh.samplesPerSeries,
		"concurrency", sh.concurrency, "load1_start", load0, "load1_end", loadAvg(),
		"kairosload_cpu_s", fmt.Sprintf("%.1f", (selfCPU() - cpu0).Seconds()),
		"retried", retried.Load(),
	}
	res.report("write", sh.prebuiltOnly, logger, append(extra, finishWatch(ws, res.samples)...)...)
	return nil
}

// retryable is what Prometheus sends again: 5xx, 429, and a request that
// got no answer.
func retryable(kind string) bool {
	return kind == "429" || kind == "timeout" || kind == "transport_error" || (len(kind) == 3 && kind[0] == '5')
}

// errKind names a transport error class for the outcome counts.
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	default:
		return "transport_error"
	}
}
