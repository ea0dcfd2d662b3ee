package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// Shape of TestOverload.
const (
	// overloadWriters is the adapter's --web.max-concurrent-writes.
	overloadWriters = 4
	// overloadClients send at once, overloadFor long, each request
	// overloadSeries × overloadSamples samples (about 7 MB decoded).
	overloadClients = 64
	overloadFor     = 5 * time.Second
	overloadSeries  = 2000
	overloadSamples = 200
	// overloadMaxRequests bounds one client's loop whatever the timing.
	overloadMaxRequests = 2000
	// overloadBackoff is the pause after a 503, Prometheus's default
	// min_backoff: a client hammering without one only measures the CPU.
	overloadBackoff = 30 * time.Millisecond
	// overloadFactor bounds the memory one admitted request may take, as a
	// multiple of its decoded size (see TestOverload).
	overloadFactor = 80
)

// TestOverload sends many more large concurrent writes than the adapter
// admits and requires that the excess is answered 503 at once (Prometheus
// retries it), that nothing else fails, that memory stays bounded by the
// admitted requests, and that the adapter serves normally afterwards.
//
// The memory bound is idle RSS + overloadWriters × decoded request size ×
// overloadFactor. One admitted request is far bigger in memory than on the
// wire: a heap profile of one 7.3 MB request (400,000 samples, embedded
// engine) shows about 340 MB allocated and up to 250 MB live, mostly the
// store's per-sample cells (kairosstore Appender.addCell), the Pebble batch
// and its keys (pebblekv putIf), and the decoded series, about 30 decoded
// sizes; Go's GC lets the heap grow to twice the live data (GOGC=100). One
// request alone peaked at 430 MB RSS, 59 decoded sizes; overloadFactor = 80
// leaves a third for timing (four requests may peak together) and a busier
// GC. Four requests peaked at 830–1,020 MB. Without the limit the 64 clients
// would all be admitted at once: 16 times the bound.
func TestOverload(t *testing.T) {
	if runtime.GOOS != "linux" {
		cassandratest.SkipUnlessCI(t, "reads the adapter's peak RSS from /proc")
	}
	ad := startAdapter(t, "", append(embeddedStorage(t.TempDir()),
		"--web.max-concurrent-writes="+strconv.Itoa(overloadWriters)))

	// One request body for everyone: the test measures the adapter, so
	// the clients should spend no CPU on encoding.
	big := overloadRequest()
	decoded := len(encodeWriteV1(big))
	body := snappy.Encode(nil, encodeWriteV1(big))
	// A first write checks the request is valid and warms the store up.
	mustWrite(t, ad, false, big[:10])
	baseline := procStatusKB(t, ad.cmd.Process.Pid, "VmRSS")

	client := &http.Client{
		Timeout:   2 * time.Minute,
		Transport: &http.Transport{MaxIdleConnsPerHost: overloadClients},
	}
	defer client.CloseIdleConnections()
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		errs     = map[string]int{}
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(overloadFor)
	for range overloadClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range overloadMaxRequests {
				if time.Now().After(deadline) {
					return
				}
				status, err := postWrite(client, ad, body)
				mu.Lock()
				if err != nil {
					// Without the addresses, which differ on every connection.
					errs[errorKind(err)]++
				} else {
					statuses[status]++
				}
				mu.Unlock()
				if status == http.StatusServiceUnavailable || err != nil {
					time.Sleep(overloadBackoff)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(deadline.Add(-overloadFor))
	peak := procStatusKB(t, ad.cmd.Process.Pid, "VmHWM")

	total := 0
	for _, n := range statuses {
		total += n
	}
	// The adapter answers 503 before reading the body; Go's server then
	// closes the connection, and a client still sending its megabytes may
	// get the reset before the answer. Prometheus retries those too.
	resets := 0
	for err, n := range errs {
		require.True(t, strings.Contains(err, "broken pipe") || strings.Contains(err, "connection reset by peer"),
			"%d requests failed with %s (answers: %v)", n, err, statuses)
		resets += n
	}
	for status, n := range statuses {
		require.Contains(t, []int{http.StatusNoContent, http.StatusServiceUnavailable}, status,
			"%d requests answered %d; want only 204 and 503 (answers: %v)", n, status, statuses)
	}
	require.Positive(t, statuses[http.StatusNoContent], "no request was admitted: %v", statuses)
	require.Positive(t, statuses[http.StatusServiceUnavailable], "the limit never answered 503: %v", statuses)
	// A reset request was rejected too: only those leave the body unread.
	require.Equal(t, float64(statuses[http.StatusServiceUnavailable]+resets),
		promMetric(t, ad.url(""), "kairos_adapter_concurrency_limit_rejections_total", `handler="write"`),
		"every 503 (and reset) was the concurrency limit")

	bound := baseline + int64(overloadWriters*decoded*overloadFactor)/1024
	t.Logf("%d clients for %v: %d requests of %.1f MB decoded (%.1f MB compressed); %d answered 204, %d answered 503 (%.1f%%), %d reset before the answer",
		overloadClients, took.Round(time.Millisecond), total+resets, float64(decoded)/1e6, float64(len(body))/1e6,
		statuses[http.StatusNoContent], statuses[http.StatusServiceUnavailable], 100*float64(statuses[http.StatusServiceUnavailable])/float64(total+resets), resets)
	t.Logf("adapter RSS: %d MB idle, peak %d MB; bound %d MB = idle + %d writes × %.1f MB × %d",
		baseline/1024, peak/1024, bound/1024, overloadWriters, float64(decoded)/1e6, overloadFactor)
	require.Less(t, peak, bound, "peak RSS (VmHWM) in kB over the bound")

	// After the storm the adapter serves as usual.
	mustWrite(t, ad, false, overloadRequest()[:3])
	status, text, err := httpGet(ad.url("/-/ready"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, text)
}

// overloadRequest returns overloadSeries series of overloadSamples samples.
func overloadRequest() []series {
	out := make([]series, overloadSeries)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for i := range out {
		out[i].Labels = labels.FromStrings("__name__", "e2e_overload", "job", "e2e", "series", strconv.Itoa(i))
		for j := range overloadSamples {
			out[i].Samples = append(out[i].Samples, sample{T: t0 + int64(j)*15000, Bits: math.Float64bits(float64(i*j) + 0.5)})
		}
	}
	return out
}

// postWrite posts a snappy-compressed 1.0 write request and returns the
// status; the body is read so the connection can be reused.
func postWrite(client *http.Client, ad *adapter, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ad.url("/api/v1/write"), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// procStatusKB reads a field of /proc/PID/status, in kB.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err, line)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// errorKind is the last part of a client error, e.g. "write: broken pipe".
func errorKind(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		if j := strings.LastIndex(msg[:i], ": "); j >= 0 {
			return msg[j+2:]
		}
	}
	return msg
}
