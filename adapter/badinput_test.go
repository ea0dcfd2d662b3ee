package adapter_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gogo/protobuf/proto"
	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/kairos-remote/kairos-adapter/adapter"
	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// The bad-input corpus lives in testdata/badinput, one YAML file per case;
// testdata/badinput/README.md describes the format. Every case runs against
// the real store on both engines.
const corpusDir = "testdata/badinput"

// badCase is one corpus file.
type badCase struct {
	name string // file name without .yaml

	Method  string            `yaml:"method"` // default POST
	Path    string            `yaml:"path"`
	Headers map[string]string `yaml:"headers"`
	Body    *bodySpec         `yaml:"body"` // nil: no body at all
	Want    wantSpec          `yaml:"want"`
}

// bodySpec says how to build a request body: a payload (protobuf text of a
// message, raw hex, or a named generator, or nothing), then an encoding.
type bodySpec struct {
	Message  string `yaml:"message"`  // message type of Text
	Text     string `yaml:"text"`     // protobuf text format
	Hex      string `yaml:"hex"`      // raw payload bytes; spaces ignored
	Generate string `yaml:"generate"` // name of a generator in generateBody
	Encode   string `yaml:"encode"`   // snappy (default), none, gzip, snappy-framed
	Cut      int    `yaml:"cut"`      // bytes cut off the end after encoding
	Chunked  bool   `yaml:"chunked"`  // send without Content-Length
}

type wantSpec struct {
	Status  int     `yaml:"status"`
	Message string  `yaml:"message"` // substring of the response body
	Written *[3]int `yaml:"written"` // RW2 headers (samples, histograms, exemplars); nil: must be absent
	// Stored lists the samples the request adds, as read back
	// ("{labels} @timestamp value"); empty means it stores nothing.
	Stored []string `yaml:"stored"`
	// ReadResults is, for a 200 SAMPLES read, the series count of each
	// query result.
	ReadResults []int `yaml:"read_results"`
	// MaxAllocMiB bounds what the process allocates while serving the
	// request; 0 means unchecked.
	MaxAllocMiB int `yaml:"max_alloc_mib"`
	// KnownBug says why the expectations above are what happens today but
	// not what should happen; fixing the bug must update the case.
	KnownBug string `yaml:"known_bug"`
}

func loadCorpus(t *testing.T) []badCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.yaml"))
	require.NoError(t, err)
	cases := make([]badCase, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var c badCase
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true) // a typo must not silently drop an expectation
		require.NoError(t, dec.Decode(&c), f)
		c.name = strings.TrimSuffix(filepath.Base(f), ".yaml")
		if c.Method == "" {
			c.Method = http.MethodPost
		}
		require.NotZero(t, c.Want.Status, "%s: want.status is required", f)
		if c.Want.Status >= 400 {
			require.NotEmpty(t, c.Want.Message, "%s: an error needs want.message", f)
		}
		cases = append(cases, c)
	}
	return cases
}

// payload builds the body before encoding.
func (b *bodySpec) payload(t *testing.T) []byte {
	t.Helper()
	switch {
	case b.Text != "":
		var m interface {
			proto.Message
			Marshal() ([]byte, error)
		}
		switch b.Message {
		case "prometheus.WriteRequest":
			m = &prompb.WriteRequest{}
		case "io.prometheus.write.v2.Request":
			m = &writev2.Request{}
		case "prometheus.ReadRequest":
			m = &prompb.ReadRequest{}
		default:
			t.Fatalf("unknown body.message %q", b.Message)
		}
		require.NoError(t, proto.UnmarshalText(b.Text, m))
		out, err := m.Marshal()
		require.NoError(t, err)
		return out
	case b.Hex != "":
		out, err := hex.DecodeString(strings.Join(strings.Fields(b.Hex), ""))
		require.NoError(t, err)
		return out
	case b.Generate != "":
		return generateBody(t, b.Generate)
	}
	return nil
}

// encoded builds the body as sent.
func (b *bodySpec) encoded(t *testing.T) []byte {
	t.Helper()
	p := b.payload(t)
	switch b.Encode {
	case "", "snappy":
		p = snappy.Encode(nil, p)
	case "none":
	case "gzip":
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, err := zw.Write(p)
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		p = buf.Bytes()
	case "snappy-framed":
		var buf bytes.Buffer
		sw := snappy.NewBufferedWriter(&buf)
		_, err := sw.Write(p)
		require.NoError(t, err)
		require.NoError(t, sw.Close())
		p = buf.Bytes()
	default:
		t.Fatalf("unknown body.encode %q", b.Encode)
	}
	require.LessOrEqual(t, b.Cut, len(p), "body.cut")
	return p[:len(p)-b.Cut]
}

// generateBody builds the payloads too big or too repetitive to write out in
// a corpus file. Each is deterministic.
func generateBody(t *testing.T, name string) []byte {
	t.Helper()
	switch name {
	case "v1-label-value-1MiB":
		return marshalV1(t, labels.FromStrings("__name__", "big_value", "big", strings.Repeat("v", 1<<20)))
	case "v1-series-key-70KiB":
		// 100 labels of 700 bytes: no single label is large, the key is.
		b := labels.NewScratchBuilder(101)
		b.Add("__name__", "long_key")
		for i := range 100 {
			b.Add(fmt.Sprintf("l%03d", i), strings.Repeat("v", 700))
		}
		b.Sort()
		return marshalV1(t, b.Labels())
	case "v1-100k-labels":
		return marshalV1(t, manyLabels(100_000))
	case "v2-100k-labels":
		st := writev2.NewSymbolTable()
		req := writev2.Request{Timeseries: []writev2.TimeSeries{{
			LabelsRefs: st.SymbolizeLabels(manyLabels(100_000), nil),
			Samples:    []writev2.Sample{{Value: 1, Timestamp: 1}},
		}}}
		req.Symbols = st.Symbols()
		out, err := req.Marshal()
		require.NoError(t, err)
		return out
	case "v1-nested-groups-100k":
		// A valid series with an unknown field 15 holding 100k nested
		// groups (start tags, then as many end tags): unknown fields are
		// skipped, without recursion, so the series is stored.
		ts, err := (&prompb.TimeSeries{
			Labels:  []prompb.Label{{Name: "__name__", Value: "nested_groups"}},
			Samples: []prompb.Sample{{Value: 1, Timestamp: 1000}},
		}).Marshal()
		require.NoError(t, err)
		const n = 100_000
		ts = append(ts, bytes.Repeat([]byte{15<<3 | 3}, n)...)
		ts = append(ts, bytes.Repeat([]byte{15<<3 | 4}, n)...)
		return protowire(1, ts)
	case "zeros-33MiB":
		// More than the default 32 MiB body limit.
		return make([]byte, 33<<20)
	}
	t.Fatalf("unknown body.generate %q", name)
	return nil
}

// manyLabels is __name__="many_labels" and n labels l000000="v"...
func manyLabels(n int) labels.Labels {
	b := labels.NewScratchBuilder(n + 1)
	b.Add("__name__", "many_labels")
	for i := range n {
		b.Add(fmt.Sprintf("l%06d", i), "v")
	}
	b.Sort()
	return b.Labels()
}

// marshalV1 is a 1.0 request with one sample of ls at t=1000.
func marshalV1(t *testing.T, ls labels.Labels) []byte {
	t.Helper()
	req := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  prompb.FromLabels(ls, nil),
		Samples: []prompb.Sample{{Value: 1, Timestamp: 1000}},
	}}}
	out, err := req.Marshal()
	require.NoError(t, err)
	return out
}

// protowire encodes one length-delimited field.
func protowire(field int, payload []byte) []byte {
	out := binary.AppendUvarint(nil, uint64(field)<<3|2)
	out = binary.AppendUvarint(out, uint64(len(payload)))
	return append(out, payload...)
}

// kairosStore adapts *kairosstore.Store to adapter.Store, as main.go's
// lazyStore does: the store's NewAppender returns its concrete type.
type kairosStore struct{ *kairosstore.Store }

func (s kairosStore) NewAppender() adapter.Appender { return s.Store.NewAppender() }

func openPebbleStore(t *testing.T) *kairosstore.Store {
	t.Helper()
	return openStore(t, openPebbleEngine(t))
}

func openCassandraStore(t *testing.T) *kairosstore.Store {
	t.Helper()
	return openStore(t, openCassandraEngine(t))
}

func openPebbleEngine(t *testing.T) engine.Engine {
	t.Helper()
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	return eng
}

func openCassandraEngine(t *testing.T) engine.Engine {
	t.Helper()
	addr, keyspace := cassandratest.Keyspace(t)
	eng, err := cql.Open(t.Context(), cql.Config{
		Hosts: []string{addr}, Keyspace: keyspace,
		WriteConsistency: "ONE", ReadConsistency: "ONE",
		// The test node is shared and slow on a busy machine.
		Timeout: 30 * time.Second, ConnectTimeout: 15 * time.Second,
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Close()) })
	return eng
}

func openStore(t *testing.T, eng engine.Engine) *kairosstore.Store {
	t.Helper()
	require.NoError(t, eng.Setup(t.Context()))
	s, err := kairosstore.Open(t.Context(), eng, kairosstore.Options{}, nil, nil)
	require.NoError(t, err)
	return s
}

// TestBadInputCorpus sends every corpus case to the adapter over the real
// store, on Pebble and (when the test node is there) on Cassandra.
func TestBadInputCorpus(t *testing.T) {
	cases := loadCorpus(t)
	require.GreaterOrEqual(t, len(cases), 40, "corpus cases")
	t.Run("pebble", func(t *testing.T) { runCorpus(t, openPebbleStore(t), cases) })
	t.Run("cassandra", func(t *testing.T) { runCorpus(t, openCassandraStore(t), cases) })
}

// TestFuzzSeedsFromCorpus keeps the bodies of the corpus's write and read
// cases in testdata/fuzz, as seeds of FuzzWriteV2 and FuzzRead (fuzz_test.go,
// which cannot call this package's corpus loader). Generated bodies are left
// out: they are too big for seeds. After changing the corpus, rewrite the
// seeds with
//
//	UPDATE_FUZZ_SEEDS=1 go test -run TestFuzzSeedsFromCorpus ./adapter
func TestFuzzSeedsFromCorpus(t *testing.T) {
	update := os.Getenv("UPDATE_FUZZ_SEEDS") != ""
	for _, c := range loadCorpus(t) {
		var target string
		switch {
		case c.Body == nil || c.Body.Generate != "":
			continue
		case c.Path == "/api/v1/write":
			target = "FuzzWriteV2"
		case c.Path == "/api/v1/read":
			target = "FuzzRead"
		default:
			continue
		}
		// The fuzz targets snappy-encode the body unless raw is set.
		raw := c.Body.Encode != "" && c.Body.Encode != "snappy" || c.Body.Cut > 0
		data := c.Body.payload(t)
		if raw {
			data = c.Body.encoded(t)
		}
		seed := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%t)\n", data, raw)
		path := filepath.Join("testdata", "fuzz", target, "corpus-"+c.name)
		if update {
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(seed), 0o644))
			continue
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err, "missing fuzz seed; run UPDATE_FUZZ_SEEDS=1 go test -run TestFuzzSeedsFromCorpus ./adapter")
		require.Equal(t, seed, string(got), "stale fuzz seed %s; run UPDATE_FUZZ_SEEDS=1 go test -run TestFuzzSeedsFromCorpus ./adapter", path)
	}
}

func runCorpus(t *testing.T, store *kairosstore.Store, cases []badCase) {
	var adapterLog, serverLog syncBuffer
	h := adapter.New(kairosStore{store}, adapter.Options{}, slog.New(slog.NewTextHandler(&adapterLog, nil)), prometheus.NewRegistry())
	srv := httptest.NewUnstartedServer(h)
	// net/http reports handler panics here (all but http.ErrAbortHandler),
	// and misuses of the ResponseWriter such as a superfluous WriteHeader.
	srv.Config.ErrorLog = log.New(&serverLog, "", 0)
	srv.Start()
	defer srv.Close()
	client := srv.Client()
	defer func() {
		if t.Failed() {
			t.Logf("adapter log:\n%s", adapterLog.String())
		}
	}()

	stored := readStored(t, client, srv.URL)
	require.Empty(t, stored, "the store starts empty")
	// Measured once the engine is warm (the first read opened its
	// connections) and the HTTP connection is gone, so only the engine's
	// and the test server's own goroutines count.
	client.CloseIdleConnections()
	baseline := settledGoroutines()

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.Want.KnownBug != "" {
				t.Logf("known bug: %s", c.Want.KnownBug)
			}
			resp, body := send(t, client, srv.URL, c)
			// Read back before asserting, so one failing case does not
			// fail the next ones too.
			before := stored
			stored = readStored(t, client, srv.URL)
			var added []string
			for _, s := range stored {
				if !slices.Contains(before, s) {
					added = append(added, s)
				}
			}

			require.Equal(t, c.Want.Status, resp.StatusCode, "status; body: %s", body)
			require.Contains(t, body, c.Want.Message)
			checkWrittenHeaders(t, resp.Header, c.Want.Written)
			if c.Want.ReadResults != nil {
				require.Equal(t, c.Want.ReadResults, readResultSizes(t, resp, body))
			}
			for _, s := range before {
				require.Contains(t, stored, s, "a stored sample disappeared")
			}
			if resp.StatusCode >= 300 && resp.StatusCode != http.StatusBadRequest {
				// A 400 stores the valid part (a partial write), which
				// Stored lists.
				require.Empty(t, added, "a rejected request stored samples")
			}
			require.ElementsMatch(t, c.Want.Stored, added, "samples stored by the request")
		})
	}

	client.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline {
		var dump strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
		t.Fatalf("goroutine leak: %d goroutines after the corpus, %d before:\n%s", n, baseline, dump.String())
	}
	require.Empty(t, serverLog.String(), "the HTTP server logged errors")
	t.Logf("goroutines: %d before the corpus, %d after", baseline, runtime.NumGoroutine())
}

// send sends one case and returns the response with its body read.
func send(t *testing.T, client *http.Client, url string, c badCase) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	var encoded []byte
	if c.Body != nil {
		encoded = c.Body.encoded(t)
		body = bytes.NewReader(encoded)
		if c.Body.Chunked {
			// Hide the length: the client then sends no Content-Length.
			body = struct{ io.Reader }{body}
		}
	}
	req, err := http.NewRequestWithContext(t.Context(), c.Method, url+c.Path, body)
	require.NoError(t, err)
	for k, v := range c.Headers {
		req.Header.Set(k, v)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := client.Do(req)
	require.NoError(t, err, "no answer (a panic closes the connection)")
	defer resp.Body.Close()
	runtime.ReadMemStats(&after)
	if c.Want.MaxAllocMiB > 0 {
		require.LessOrEqual(t, after.TotalAlloc-before.TotalAlloc, uint64(c.Want.MaxAllocMiB)<<20, "bytes allocated while serving a %d-byte body", len(encoded))
	}
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

var writtenHeaders = [3]string{
	"X-Prometheus-Remote-Write-Samples-Written",
	"X-Prometheus-Remote-Write-Histograms-Written",
	"X-Prometheus-Remote-Write-Exemplars-Written",
}

func checkWrittenHeaders(t *testing.T, h http.Header, want *[3]int) {
	t.Helper()
	for i, name := range writtenHeaders {
		if want == nil {
			require.Empty(t, h.Values(name), "%s on a response that is not a 2.0 write", name)
			continue
		}
		require.Equal(t, strconv.Itoa(want[i]), h.Get(name), name)
	}
}

func readResultSizes(t *testing.T, resp *http.Response, body string) []int {
	t.Helper()
	require.Equal(t, "application/x-protobuf", resp.Header.Get("Content-Type"), "a SAMPLES response")
	dec, err := snappy.Decode(nil, []byte(body))
	require.NoError(t, err)
	var rr prompb.ReadResponse
	require.NoError(t, rr.Unmarshal(dec))
	sizes := []int{}
	for _, r := range rr.Results {
		sizes = append(sizes, len(r.Timeseries))
	}
	return sizes
}

// readStored reads back every sample of every metric, over the whole int64
// time range, through the adapter's own remote read, as
// "{labels} @timestamp value".
func readStored(t *testing.T, client *http.Client, url string) []string {
	t.Helper()
	series := remoteRead(t, client, url, math.MinInt64, math.MaxInt64, &prompb.LabelMatcher{Type: prompb.LabelMatcher_RE, Name: "__name__", Value: ".+"})
	var out []string
	for _, ts := range series {
		lset := labelsOf(ts.Labels)
		for _, s := range ts.Samples {
			out = append(out, fmt.Sprintf("%s @%d %g", lset, s.Timestamp, s.Value))
		}
		require.Empty(t, ts.Histograms, "no histograms are stored by the corpus")
	}
	return out
}

func labelsOf(pls []prompb.Label) labels.Labels {
	b := labels.NewScratchBuilder(len(pls))
	for _, l := range pls {
		b.Add(l.Name, l.Value)
	}
	return b.Labels()
}

// settledGoroutines waits until the goroutine count stops changing (for
// 200ms, at most 5s) and returns it.
func settledGoroutines() int {
	n, same := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(5 * time.Second); same < 10 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
