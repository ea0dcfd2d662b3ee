package e2e

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
)

// TestHTTPSurface is a property test over every route the adapter serves,
// run as a hostile client would: each parameter of each route takes in turn
// every value of a vocabulary of hostile values (the others valid), then
// routes and values are combined at random. For every request it requires
// an answer within its deadline and a small slack, no 5xx but the documented
// 503s, the process alive and its peak RSS within a bound over where it
// started, and, for every destructive call refused or accepted, the store's
// samples to be exactly what the call may leave (unchanged, or less what
// its parameters name). Both engines, with and without the query frontend.
//
// The run is reproducible from its seed, which every failure prints:
//
//	KAIROS_SURFACE_SEED=<seed>       replay a run (default: the clock)
//	KAIROS_SURFACE_REQUESTS=<n>      random requests per adapter (default 300)
//	KAIROS_SURFACE_BUDGET=<duration> time for the random requests per engine (default 90s)
//
// The random requests stop at whichever of the two comes first, so a CI run
// on a slow machine sends a prefix of the same sequence.
func TestHTTPSurface(t *testing.T) {
	cfg := surfaceSettings(t)
	t.Run("embedded", func(t *testing.T) {
		dir := t.TempDir()
		runSurface(t, cfg, embeddedStorage(dir))
	})
	t.Run("cassandra", func(t *testing.T) {
		addr, keyspace := cassandratest.Keyspace(t)
		runSurface(t, cfg, cassandraStorage(addr, keyspace))
	})
}

const (
	// surfaceQueryTimeout is --query.timeout: the deadline of every query
	// API route, shortened by a query's timeout parameter.
	surfaceQueryTimeout = 4 * time.Second
	// surfaceOtherTimeout bounds the routes without a deadline of their
	// own (remote write and read, health, the UI, /metrics).
	surfaceOtherTimeout = 10 * time.Second
	// surfaceSlack is what an answer may come after its deadline: the
	// handler notices the deadline at its next step, and the machine is
	// shared.
	surfaceSlack = 2 * time.Second
	// surfaceRSSBound is how far the peak RSS may rise over the RSS after
	// the data is written (the bound).
	surfaceRSSBound = 256 << 20
	// surfaceKillAt is where the watchdog kills the adapter, so that a
	// request that allocates without bound fails the test instead of
	// taking the machine.
	surfaceKillAt = 1 << 30
	// surfaceMaxFailures stops a run: every failure after a restart is
	// likely the same one again.
	surfaceMaxFailures = 8
)

type surfaceConfig struct {
	seed     uint64
	requests int
	budget   time.Duration
}

func surfaceSettings(t *testing.T) surfaceConfig {
	cfg := surfaceConfig{seed: uint64(time.Now().UnixNano()), requests: 300, budget: 90 * time.Second}
	if v := os.Getenv("KAIROS_SURFACE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("KAIROS_SURFACE_SEED=%q: %v", v, err)
		}
		cfg.seed = n
	}
	if v := os.Getenv("KAIROS_SURFACE_REQUESTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("KAIROS_SURFACE_REQUESTS=%q: %v", v, err)
		}
		cfg.requests = n
	}
	if v := os.Getenv("KAIROS_SURFACE_BUDGET"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("KAIROS_SURFACE_BUDGET=%q: %v", v, err)
		}
		cfg.budget = d
	}
	t.Logf("seed %d (replay with KAIROS_SURFACE_SEED=%d), %d random requests per adapter, budget %v",
		cfg.seed, cfg.seed, cfg.requests, cfg.budget)
	return cfg
}

// Prometheus's minimum and maximum times, as its API prints them.
const (
	surfMinTimeText = "-292273086-05-16T16:47:06Z"
	surfMaxTimeText = "292277025-08-18T07:12:54.999999999Z"
)

var (
	surfMinTimeMs = time.Unix(math.MinInt64/1000+62135596801, 0).UnixMilli()
	surfMaxTimeMs = time.Unix(math.MaxInt64/1000-62135596801, 999999999).UnixMilli()
)

// The hostile vocabulary. repeatFirst and repeatLast stand for the
// parameter given twice, the hostile value first or last; megabyte for a
// value of 1 MiB.
const (
	repeatFirst = "\x00repeat-first"
	repeatLast  = "\x00repeat-last"
	megabyte    = "\x00megabyte"
)

var hostileVocabulary = []string{
	"NaN", "+Inf", "-Inf", "1e300", "-1e300", "-0",
	surfMinTimeText, surfMaxTimeText,
	"0.001", "1ms", // a step of 1 ms
	"9467280000", "300y", "-300y", // 300 years
	"864000", // 10 days: with the widest range, the point count of a saturated time.Duration
	"0", "0s", "-1", "-1ms",
	"9223372036854775807", "-9223372036854775808",
	"",
	repeatFirst, repeatLast, megabyte,
	"\xff\xfe\xfd", `{__name__="\xff"}`,
}

// hostile expands a vocabulary entry into the values of the parameter.
func hostile(rng *rand.Rand, token string, valid []string) []string {
	other := func() string {
		for {
			if v := hostileVocabulary[rng.IntN(len(hostileVocabulary))]; !strings.HasPrefix(v, "\x00") {
				return v
			}
		}
	}
	switch token {
	case repeatFirst:
		return []string{other(), pick(rng, valid)}
	case repeatLast:
		return []string{pick(rng, valid), other()}
	case megabyte:
		return []string{strings.Repeat("9", 1<<20)}
	}
	return []string{token}
}

func pick(rng *rand.Rand, vs []string) string { return vs[rng.IntN(len(vs))] }

// param is a parameter of a route and its valid values ("" leaves it out).
type param struct {
	name  string
	valid []string
}

type routeKind int

const (
	formRoute   routeKind = iota // query string or url-encoded body
	writeRoute                   // remote write: params build the body and headers
	readRoute                    // remote read
	plainRoute                   // GET without the query API's envelope
	deleteRoute                  // delete_series
	recomputeRoute
)

type route struct {
	name    string
	kind    routeKind
	methods []string
	path    string // {name} is the path parameter "name"
	params  []param
	// queryAPI routes answer in the envelope, within --query.timeout.
	queryAPI bool
}

// surfaceData is what the store holds before the requests: series with
// NaN, ±Inf and stale markers among their samples.
func surfaceData(end time.Time) []series {
	var out []series
	stale := uint64(value.StaleNaN)
	for i := range 4 {
		s := series{Labels: labels.FromStrings("__name__", "surf_a", "i", strconv.Itoa(i), "job", "surface")}
		from := end.Add(-6 * time.Hour).UnixMilli()
		for k := range 360 {
			v := math.Float64bits(float64(k * (i + 1)))
			switch k % 97 {
			case 13:
				v = math.Float64bits(math.NaN())
			case 29:
				v = math.Float64bits(math.Inf(1 - 2*(i%2)))
			case 96:
				v = stale
			}
			s.Samples = append(s.Samples, sample{from + int64(k)*60_000, v})
		}
		out = append(out, s)
	}
	b := series{Labels: labels.FromStrings("__name__", "surf_b", "job", "surface")}
	for k := range 48 {
		b.Samples = append(b.Samples, sample{end.Add(-48*time.Hour).UnixMilli() + int64(k)*3_600_000, math.Float64bits(-float64(k) / 3)})
	}
	b.Samples = append(b.Samples, sample{end.UnixMilli(), stale})
	return append(out, b)
}

func surfaceRoutes(end time.Time) []route {
	unix := func(d time.Duration) string { return strconv.FormatInt(end.Add(d).Unix(), 10) }
	times := []string{unix(-3 * time.Hour), unix(0), end.Add(-time.Hour).Format(time.RFC3339), unix(-48 * time.Hour), surfMinTimeText, surfMaxTimeText, unix(time.Hour)}
	optTimes := append([]string{""}, times...)
	// Times of the delete_series and recompute calls: a stored sample's
	// own time (the bounds are inclusive), between samples, and the ends.
	adminTimes := []string{"", unix(-2 * time.Hour), strconv.FormatInt(end.Add(-6*time.Hour).Unix()+120, 10), fmt.Sprintf("%d.5", end.Add(-time.Hour).Unix()), surfMinTimeText, surfMaxTimeText, end.Add(-30 * time.Minute).Format(time.RFC3339Nano)}
	queries := []string{`surf_a`, `surf_a{i="1"}`, `rate(surf_a[5m])`, `sum by (i) (rate(surf_a[5m]))`, `count_over_time(surf_a[1y])`,
		`max_over_time(surf_a[10m:1m])`, `vector(1)`, `{__name__=~"surf_.+"}`, `surf_a[5m]`, `avg(surf_b)`, `surf_a @ end()`}
	selectors := []string{`surf_a`, `surf_a{i="1"}`, `{__name__=~"surf_.+"}`, `surf_b`, `{job="surface"}`}
	limit := param{"limit", []string{"", "0", "2"}}
	timeout := param{"timeout", []string{"", "", "1s", "3s"}}
	both := []string{http.MethodGet, http.MethodPost}
	get := []string{http.MethodGet}
	return []route{
		{name: "query", methods: both, path: "/api/v1/query", queryAPI: true, params: []param{
			{"query", queries}, {"time", optTimes}, timeout, limit, {"stats", []string{"", "all"}},
			{"lookback_delta", []string{"", "5m", "1h"}}, {"max_source_resolution", []string{"", "auto", "0", "5m", "1h"}}}},
		{name: "query_range", methods: both, path: "/api/v1/query_range", queryAPI: true, params: []param{
			{"query", queries}, {"start", times}, {"end", times}, {"step", []string{"15", "60s", "1h", "864000"}}, timeout, limit,
			{"stats", []string{"", "", "all"}}, {"lookback_delta", []string{"", "5m", "1h"}},
			{"max_source_resolution", []string{"", "auto", "0", "5m", "1h"}}, {"nocache", []string{"", "1"}}}},
		{name: "series", methods: both, path: "/api/v1/series", queryAPI: true, params: []param{{"match[]", selectors}, {"start", optTimes}, {"end", optTimes}, limit}},
		{name: "labels", methods: both, path: "/api/v1/labels", queryAPI: true, params: []param{{"match[]", append([]string{""}, selectors...)}, {"start", optTimes}, {"end", optTimes}, limit}},
		{name: "label_values", methods: get, path: "/api/v1/label/{name}/values", queryAPI: true, params: []param{
			{"name", []string{"__name__", "i", "job", "U__i"}}, {"match[]", append([]string{""}, selectors...)}, {"start", optTimes}, {"end", optTimes}, limit}},
		{name: "query_exemplars", methods: both, path: "/api/v1/query_exemplars", queryAPI: true, params: []param{{"query", queries}, {"start", times}, {"end", times}}},
		{name: "format_query", methods: both, path: "/api/v1/format_query", queryAPI: true, params: []param{{"query", queries}}},
		{name: "parse_query", methods: both, path: "/api/v1/parse_query", queryAPI: true, params: []param{{"query", queries}}},
		{name: "buildinfo", methods: get, path: "/api/v1/status/buildinfo", queryAPI: true},
		{name: "runtimeinfo", methods: get, path: "/api/v1/status/runtimeinfo", queryAPI: true},
		{name: "flags", methods: get, path: "/api/v1/status/flags", queryAPI: true},
		{name: "metadata", methods: get, path: "/api/v1/metadata", queryAPI: true, params: []param{
			{"metric", []string{"", "surf_a", "surfw_a"}}, {"limit", []string{"", "1", "-1"}}, {"limit_per_metric", []string{"", "1"}}}},
		{name: "delete_series", kind: deleteRoute, methods: []string{http.MethodPost, http.MethodPut}, path: "/api/v1/admin/tsdb/delete_series", queryAPI: true, params: []param{
			{"match[]", []string{`surf_a{i="1"}`, `surf_b`, `{__name__="surf_a",i=~"[23]"}`, `nothing_here`}}, {"start", adminTimes}, {"end", adminTimes}}},
		{name: "rollups_recompute", kind: recomputeRoute, methods: []string{http.MethodPost}, path: "/api/v1/admin/rollups/recompute", queryAPI: true, params: []param{
			{"match[]", []string{"", "surf_a", `surf_b{job="surface"}`}}, {"start", adminTimes}, {"end", adminTimes}}},
		// Each accepted call writes a snapshot into the store's
		// directory; the oracle requires the samples unchanged.
		{name: "snapshot", methods: []string{http.MethodPost, http.MethodPut}, path: "/api/v1/admin/tsdb/snapshot", queryAPI: true, params: []param{
			{"skip_head", []string{"", "true", "false", "1"}}}},
		{name: "status_metrics", methods: get, path: "/api/v1/status/metrics", queryAPI: true, params: []param{
			{"start", optTimes}, {"end", optTimes}, {"metric", []string{"", "surf_a", "surf_b"}}, {"limit", []string{"", "1", "10"}}}},
		{name: "status_adapter", methods: get, path: "/api/v1/status/adapter", queryAPI: true},
		{name: "remote_write", kind: writeRoute, methods: []string{http.MethodPost}, path: "/api/v1/write", params: []param{
			{"metric", []string{"surfw_a", "surfw_b"}}, {"label", []string{"x", "y"}}, {"labelname", []string{"l"}},
			{"t", []string{unix(-time.Hour), unix(0)}}, {"v", []string{"1", "2.5", "stale"}},
			{"content-type", []string{"application/x-protobuf", "application/x-protobuf;proto=io.prometheus.write.v2.Request"}},
			{"content-encoding", []string{"snappy"}}, {"version", []string{"0.1.0", "2.0.0"}}}},
		{name: "remote_write_short", kind: writeRoute, methods: []string{http.MethodPost}, path: "/write", params: []param{
			{"metric", []string{"surfw_c"}}, {"t", []string{unix(0)}}, {"v", []string{"3"}}}},
		{name: "remote_read", kind: readRoute, methods: []string{http.MethodPost}, path: "/api/v1/read", params: []param{
			{"start", append(times, unix(-7*time.Hour))}, {"end", times}, {"name", []string{"surf_a", "surf_b"}}, {"regex", []string{"", "surf_.*", ".+"}},
			{"type", []string{"0", "1"}}, {"content-encoding", []string{"snappy"}}}},
		{name: "remote_read_short", kind: readRoute, methods: []string{http.MethodPost}, path: "/read", params: []param{
			{"start", times}, {"end", times}, {"name", []string{"surf_a"}}}},
		{name: "healthy", kind: plainRoute, methods: get, path: "/-/healthy"},
		{name: "ready", kind: plainRoute, methods: get, path: "/-/ready"},
		{name: "metrics", kind: plainRoute, methods: get, path: "/metrics"},
		{name: "ui", kind: plainRoute, methods: get, path: "/", params: []param{{"g0.expr", []string{"", "surf_a"}}}},
		{name: "ui_graph", kind: plainRoute, methods: get, path: "/graph"},
		{name: "ui_explore", kind: plainRoute, methods: get, path: "/explore"},
		{name: "ui_status", kind: plainRoute, methods: get, path: "/status"},
		{name: "ui_static", kind: plainRoute, methods: get, path: "/static/{file}", params: []param{{"file", []string{"app.js", "app.css", "missing.js"}}}},
		// The profile and trace handlers answer after the seconds asked
		// (30 by default), by design: left out.
		{name: "pprof", kind: plainRoute, methods: get, path: "/debug/pprof/{profile}", params: []param{
			{"profile", []string{"", "heap", "goroutine", "cmdline", "symbol", "allocs"}}, {"debug", []string{"", "1"}}, {"gc", []string{"", "1"}}}},
	}
}

// surfaceReq is one request, and how it was made.
type surfaceReq struct {
	route  *route
	method string
	params url.Values // as given, for the message, the oracle and the replay
	// inBody: the params went in a url-encoded body, not the query string.
	inBody bool
}

func (r surfaceReq) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.method, r.route.path)
	if r.inBody {
		b.WriteString(" (form body)")
	}
	names := make([]string, 0, len(r.params))
	for k := range r.params {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range r.params[k] {
			if len(v) > 120 {
				v = fmt.Sprintf("%s... (%d bytes)", v[:40], len(v))
			}
			fmt.Fprintf(&b, " %s=%q", k, v)
		}
	}
	return b.String()
}

// build makes the request: the route's params rendered as its kind wants.
func (r surfaceReq) build(base string) (*http.Request, error) {
	first := func(k string) string {
		if v := r.params[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	path := r.route.path
	for _, p := range []string{"name", "file", "profile"} {
		if strings.Contains(path, "{"+p+"}") {
			path = strings.Replace(path, "{"+p+"}", url.PathEscape(first(p)), 1)
		}
	}
	switch r.route.kind {
	case writeRoute:
		return r.buildWrite(base+path, first)
	case readRoute:
		return r.buildRead(base+path, first)
	}
	form := url.Values{}
	for k, vs := range r.params {
		if k == "name" && strings.Contains(r.route.path, "{name}") || k == "file" || k == "profile" {
			continue
		}
		form[k] = vs
	}
	if r.inBody {
		req, err := http.NewRequest(r.method, base+path, strings.NewReader(form.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		return req, err
	}
	u := base + path
	if len(form) > 0 {
		u += "?" + form.Encode()
	}
	return http.NewRequest(r.method, u, nil)
}

// wireTime turns a time text into the int64 milliseconds of a protobuf
// request: what a client that does no checking would send.
func wireTime(s string) int64 {
	switch s {
	case surfMinTimeText:
		return surfMinTimeMs
	case surfMaxTimeText:
		return surfMaxTimeMs
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && (n > 1e12 || n < -1e12) {
		return n // already beyond seconds: taken as milliseconds
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t.UnixMilli()
		}
		return 0
	}
	switch ms := f * 1000; {
	case math.IsNaN(ms), ms <= math.MinInt64:
		return math.MinInt64
	case ms >= math.MaxInt64:
		return math.MaxInt64
	default:
		return int64(ms)
	}
}

func (r surfaceReq) buildWrite(u string, first func(string) string) (*http.Request, error) {
	v := math.Float64bits(0)
	if s := first("v"); s == "stale" {
		v = value.StaleNaN
	} else if f, err := strconv.ParseFloat(s, 64); err == nil || math.IsInf(f, 0) {
		v = math.Float64bits(f)
	}
	ls := []string{"__name__", first("metric")}
	if r.params.Has("label") {
		ls = append(ls, "l", first("label"))
	}
	if n := first("labelname"); r.params.Has("labelname") && n != "l" {
		ls = append(ls, n, "v")
	}
	ss := []series{{Labels: labels.FromStrings(ls...), Samples: []sample{{wireTime(first("t")), v}}}}
	ctype := first("content-type")
	if !r.params.Has("content-type") {
		ctype = "application/x-protobuf"
	}
	body := encodeWriteV1(ss)
	if strings.Contains(ctype, "write.v2") {
		body = encodeWriteV2(ss)
	}
	req, err := http.NewRequest(r.method, u, bytes.NewReader(snappy.Encode(nil, body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Content-Encoding", "snappy")
	if r.params.Has("content-encoding") {
		req.Header.Set("Content-Encoding", first("content-encoding"))
	}
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	if r.params.Has("version") {
		req.Header.Set("X-Prometheus-Remote-Write-Version", first("version"))
	}
	return req, nil
}

func (r surfaceReq) buildRead(u string, first func(string) string) (*http.Request, error) {
	q := &prompb.Query{StartTimestampMs: wireTime(first("start")), EndTimestampMs: wireTime(first("end"))}
	if r.params.Has("name") {
		q.Matchers = append(q.Matchers, &prompb.LabelMatcher{Type: prompb.LabelMatcher_EQ, Name: "__name__", Value: first("name")})
	}
	if re := first("regex"); re != "" {
		q.Matchers = append(q.Matchers, &prompb.LabelMatcher{Type: prompb.LabelMatcher_RE, Name: "__name__", Value: re})
	}
	rt, err := strconv.Atoi(first("type"))
	if err != nil {
		rt = math.MaxInt32
	}
	rr := &prompb.ReadRequest{Queries: []*prompb.Query{q}, AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_ResponseType(int32(rt))}}
	body, err := rr.Marshal()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(r.method, u, bytes.NewReader(snappy.Encode(nil, body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	if r.params.Has("content-encoding") {
		req.Header.Set("Content-Encoding", first("content-encoding"))
	}
	req.Header.Set("X-Prometheus-Remote-Read-Version", "0.1.0")
	return req, nil
}

// deadline is when the answer is due: the query API's deadline (the
// timeout parameter of a query, if shorter), or the generic bound.
func (r surfaceReq) deadline() time.Duration {
	if !r.route.queryAPI {
		return surfaceOtherTimeout
	}
	d := surfaceQueryTimeout
	if r.route.name == "query" || r.route.name == "query_range" {
		if vs := r.params["timeout"]; len(vs) > 0 {
			if t, ok := promDuration(vs[0]); ok && t > 0 && t < d {
				d = t
			}
		}
	}
	return d
}

func promDuration(s string) (time.Duration, bool) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		ns := f * float64(time.Second)
		if math.IsNaN(ns) || ns > math.MaxInt64 || ns < math.MinInt64 {
			return 0, false
		}
		return time.Duration(ns), true
	}
	if d, err := model.ParseDuration(s); err == nil {
		return time.Duration(d), true
	}
	return 0, false
}

// surface is one engine's run: the adapter, what the store holds, and the
// failures found.
type surface struct {
	t        *testing.T
	cfg      surfaceConfig
	storage  storageArgs
	extra    []string
	a        *adapter
	dog      *watchdog
	want     []series // the store's samples, as the last snapshot read them
	failures []string
	sent     int
	// recent are the last requests sent: a request can leave work behind
	// that kills the process during a later one.
	recent []string
}

func runSurface(t *testing.T, cfg surfaceConfig, storage storageArgs) {
	began := time.Now()
	end := time.Now().Truncate(time.Minute)
	routes := surfaceRoutes(end)
	s := &surface{t: t, cfg: cfg, storage: storage}
	defer s.report()
	s.start()
	mustWrite(t, s.a, false, surfaceData(end))
	s.want = s.snapshot()
	s.baseline()

	// With the frontend (the default), then with a frontend that hands
	// every range query to the query API as it came: nothing to split,
	// shard or cache.
	modes := []struct {
		name  string
		flags []string
		only  string // the routes the mode changes
	}{
		{"frontend", nil, ""},
		{"no-frontend", []string{"--query.split-interval=0", "--query.shards=1", "--query.results-cache-bytes=0"}, "query_range"},
	}
	for mi, m := range modes {
		if mi > 0 {
			s.restart(m.flags)
		}
		var rs []route
		for _, r := range routes {
			if m.only == "" || r.name == m.only {
				rs = append(rs, r)
			}
		}
		// Per mode, so that each mode replays alone.
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(mi)))
		for i, r := range pinnedRequests(rs, end) {
			if !s.send(fmt.Sprintf("%s pinned #%d", m.name, i), r) {
				return
			}
		}
		sweep := 0
		for ri := range rs {
			r := &rs[ri]
			for pi := range r.params {
				for _, token := range hostileVocabulary {
					req := randomRequest(rng, r, 0)
					req.params[r.params[pi].name] = hostile(rng, token, r.params[pi].valid)
					if !s.send(fmt.Sprintf("%s sweep #%d", m.name, sweep), req) {
						return
					}
					sweep++
				}
			}
			if len(r.params) == 0 {
				if !s.send(fmt.Sprintf("%s sweep #%d", m.name, sweep), randomRequest(rng, r, 0)) {
					return
				}
				sweep++
			}
		}
		n := cfg.requests
		if m.only != "" {
			n /= 4
		}
		random := 0
		for ; random < n && time.Since(began) < cfg.budget; random++ {
			r := &rs[rng.IntN(len(rs))]
			if !s.send(fmt.Sprintf("%s random #%d", m.name, random), randomRequest(rng, r, 0.35)) {
				return
			}
		}
		t.Logf("%s: %d sweep and %d random requests", m.name, sweep, random)
	}
	// Nothing but the destructive calls may have changed the store.
	if s.alive("the last request") {
		if got := s.snapshot(); !sameSeries(got, s.want) {
			s.fail("after the run", "the store changed outside the destructive calls:\n%s", diffLines(formatSeries(s.want, prompb.ReadRequest_SAMPLES), formatSeries(got, prompb.ReadRequest_SAMPLES), 20))
		}
	}
	t.Logf("%d requests in %v; peak RSS %d MiB over the baseline", s.sent, time.Since(began).Round(time.Second), s.dog.rise()>>20)
}

// pinnedRequests are requests that once found a bug and that no random
// combination finds reliably (several parameters must take one value
// each): the two of issue #33, and a range query to the year 2270 at a
// 10-day step, which the frontend split into 89,000 daily parts, each
// with a deadline of its own, and answered 200 after 16 s on Cassandra
// with --query.timeout=4s.
func pinnedRequests(rs []route, end time.Time) []surfaceReq {
	var out []surfaceReq
	for i := range rs {
		r := &rs[i]
		switch r.name {
		case "query_range":
			for _, q := range []string{`surf_a`, `count_over_time(surf_a[1y])`} {
				out = append(out, surfaceReq{route: r, method: http.MethodGet, params: url.Values{
					"query": {q}, "start": {surfMinTimeText}, "end": {surfMaxTimeText}, "step": {"864000"}, "timeout": {"3s"}}})
			}
			out = append(out, surfaceReq{route: r, method: http.MethodGet, params: url.Values{
				"query": {"surf_a"}, "start": {strconv.FormatInt(end.Unix(), 10)}, "end": {"9467280000"}, "step": {"864000"}, "nocache": {"1"}}})
		case "delete_series":
			out = append(out, surfaceReq{route: r, method: http.MethodPost, inBody: true, params: url.Values{"match[]": {"surf_b"}, "start": {"NaN"}}})
		case "rollups_recompute":
			out = append(out, surfaceReq{route: r, method: http.MethodPost, inBody: true, params: url.Values{"match[]": {"surf_b"}, "start": {"NaN"}}})
		}
	}
	return out
}

// randomRequest fills every parameter of r: a hostile value with
// probability p, else a valid one ("" leaves it out).
func randomRequest(rng *rand.Rand, r *route, p float64) surfaceReq {
	req := surfaceReq{route: r, method: r.methods[rng.IntN(len(r.methods))], params: url.Values{}}
	req.inBody = req.method != http.MethodGet && (r.kind == formRoute || r.kind == deleteRoute || r.kind == recomputeRoute)
	for _, pm := range r.params {
		if rng.Float64() < p {
			req.params[pm.name] = hostile(rng, pick(rng, hostileVocabulary), pm.valid)
			continue
		}
		if v := pick(rng, pm.valid); v != "" {
			req.params[pm.name] = []string{v}
		}
	}
	return req
}

func (s *surface) start() {
	s.t.Helper()
	p, addr := startServer(s.t, "adapter", adapterBin, "", func(addr string) []string {
		// The rollup job on, as by default: its read plans are part of
		// every query.
		args := []string{"--web.listen-address=" + addr, "--log.level=error", "--web.enable-admin-api",
			"--query.timeout=" + surfaceQueryTimeout.String()}
		return append(append(args, s.storage...), s.extra...)
	}, adapterReadyTimeout)
	s.a = &adapter{process: p, addr: addr}
	s.dog = newWatchdog(p)
	s.t.Cleanup(s.dog.stop)
}

// restart starts the adapter again on the same store, with extra flags.
func (s *surface) restart(extra []string) {
	s.t.Helper()
	s.dog.stop()
	s.a.stop(s.t, syscall.SIGTERM)
	s.extra = extra
	s.start()
	s.baseline()
}

// baseline sets the RSS the bound counts from, after a first query has
// loaded what every query loads.
func (s *surface) baseline() {
	s.t.Helper()
	s.snapshot()
	s.dog.setBaseline()
}

// snapshot reads every sample of every series but the rollups', NaN and
// stale markers included, through remote read.
func (s *surface) snapshot() []series {
	s.t.Helper()
	got := remoteReadSeries(s.t, s.a, prompb.ReadRequest_SAMPLES, readQuery{Start: surfMinTimeMs, End: surfMaxTimeMs, Matchers: []*labels.Matcher{
		labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"),
		labels.MustNewMatcher(labels.MatchNotRegexp, "__name__", ".+_rollup"),
	}})
	return got[0]
}

func sameSeries(a, b []series) bool {
	return slices.Equal(formatSeries(a, prompb.ReadRequest_SAMPLES), formatSeries(b, prompb.ReadRequest_SAMPLES))
}

func (s *surface) fail(where, format string, args ...any) {
	s.failures = append(s.failures, fmt.Sprintf("%s: %s", where, fmt.Sprintf(format, args...)))
}

func (s *surface) report() {
	for _, f := range s.failures {
		s.t.Errorf("%s\nreplay: KAIROS_SURFACE_SEED=%d go test -count=1 -run '%s' ./e2e/", f, s.cfg.seed, s.t.Name())
	}
}

// alive checks the process after a request; a dead one is started again
// (its death is a failure) so that the run goes on.
func (s *surface) alive(where string) bool {
	if !s.a.exited() {
		if code, _, err := httpGet(s.a.url("/-/healthy")); err == nil && code == http.StatusOK {
			return true
		}
		time.Sleep(500 * time.Millisecond) // the watchdog may be killing it
		if !s.a.exited() {
			s.fail(where, "the adapter no longer answers /-/healthy; output:\n%s", tail(s.a.out.String(), 8))
			s.a.stop(s.t, syscall.SIGKILL)
			s.restart(s.extra)
			return false
		}
	}
	why := fmt.Sprintf("exit code %d", s.a.exitCode())
	if rss := s.dog.killed(); rss > 0 {
		why = fmt.Sprintf("killed by the test at %d MiB of RSS, %d MiB over its baseline", rss>>20, (rss-s.dog.base)>>20)
	}
	s.fail(where, "the adapter died (%s); the requests before:\n%s\nits last words:\n%s", why, strings.Join(s.recent, "\n"), tail(s.a.out.String(), 8))
	s.restart(s.extra)
	return true
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// send sends one request and checks its properties; false stops the run.
func (s *surface) send(where string, r surfaceReq) bool {
	s.sent++
	where = fmt.Sprintf("%s: %s", where, r)
	before := len(s.failures)
	req, err := r.build(s.a.url(""))
	if err != nil {
		s.t.Fatalf("%s: building the request: %v", where, err)
	}
	due := r.deadline()
	client := &http.Client{Timeout: due + surfaceSlack + 10*time.Second}
	began := time.Now()
	resp, err := client.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	took := time.Since(began)
	switch {
	case err != nil:
		// The client's error repeats the URL, which may be a megabyte.
		s.fail(where, "no answer after %v: %s", took.Round(time.Millisecond), truncate(err.Error()))
	default:
		s.checkAnswer(where, r, resp, body, took, due)
	}
	ok := s.alive(where)
	if rise := s.dog.rise(); rise > surfaceRSSBound && !slices.ContainsFunc(s.failures, func(f string) bool { return strings.Contains(f, "peak RSS") }) {
		s.fail(where, "peak RSS %d MiB over the baseline, more than %d MiB; the requests before:\n%s", rise>>20, surfaceRSSBound>>20, strings.Join(s.recent, "\n"))
	}
	s.recent = append(s.recent[max(0, len(s.recent)-2):], fmt.Sprintf("  %s: answered %d after %v", where, statusOf(resp, err), took.Round(time.Millisecond)))
	if ok && err == nil {
		s.checkStore(where, r, resp.StatusCode)
	}
	if len(s.failures) > before {
		s.t.Logf("FAIL %s", s.failures[before])
	}
	return len(s.failures) < surfaceMaxFailures
}

func statusOf(resp *http.Response, err error) int {
	if err != nil {
		return 0
	}
	return resp.StatusCode
}

func (s *surface) checkAnswer(where string, r surfaceReq, resp *http.Response, body []byte, took, due time.Duration) {
	excerpt := string(body[:min(len(body), 300)])
	if took > due+surfaceSlack {
		s.fail(where, "answered %d after %v, later than its deadline %v and %v of slack: %s", resp.StatusCode, took.Round(time.Millisecond), due, surfaceSlack, excerpt)
	}
	code := resp.StatusCode
	switch {
	case code < 500:
	case code == http.StatusServiceUnavailable && !r.route.queryAPI:
		// Documented for writes (slots, byte budget, an overloaded
		// store) and reads (slots, an overloaded store).
	case code == http.StatusServiceUnavailable &&
		(strings.Contains(excerpt, `"errorType":"timeout"`) || strings.Contains(excerpt, `"errorType":"unavailable"`)):
	default:
		s.fail(where, "answered %d, not a documented status: %s", code, excerpt)
	}
}

// checkStore holds a destructive call to what it may do: a refused one or
// a recomputation leaves every sample; an accepted delete removes exactly
// the samples its selectors and its (strictly parsed) range name, and a
// delete or recomputation that took a time no strict parser accepts is a
// failure whatever it deleted. An accepted write only moves the baseline.
func (s *surface) checkStore(where string, r surfaceReq, code int) {
	kind := r.route.kind
	if kind != deleteRoute && kind != recomputeRoute && kind != writeRoute {
		return
	}
	got := s.snapshot()
	accepted := code >= 200 && code < 300
	if kind == writeRoute {
		if !accepted && !sameSeries(got, s.want) {
			s.fail(where, "a refused write (%d) changed the store:\n%s", code, diffLines(formatSeries(s.want, prompb.ReadRequest_SAMPLES), formatSeries(got, prompb.ReadRequest_SAMPLES), 20))
		}
		s.want = got
		return
	}
	want := s.want
	if accepted {
		start, end, err := strictRange(r.params)
		if err != nil {
			s.fail(where, "answered %d to a destructive call with %v: a 400 bad_data was due", code, err)
		} else if kind == deleteRoute {
			want = afterDelete(s.want, r.params["match[]"], start, end)
		}
	}
	if !sameSeries(got, want) {
		s.fail(where, "answered %d, and the store holds other samples than it should (- missing, + extra):\n%s", code,
			diffLines(formatSeries(want, prompb.ReadRequest_SAMPLES), formatSeries(got, prompb.ReadRequest_SAMPLES), 20))
	}
	// Put back what was deleted, rightly or not, so that the store holds
	// the same data for every request.
	if restore := missing(s.want, got); len(restore) > 0 {
		mustWrite(s.t, s.a, false, restore)
		if again := s.snapshot(); !sameSeries(again, s.want) {
			s.fail(where, "writing the deleted samples again does not restore them:\n%s",
				diffLines(formatSeries(s.want, prompb.ReadRequest_SAMPLES), formatSeries(again, prompb.ReadRequest_SAMPLES), 20))
			s.want = again
		}
	}
}

// strictRange reads start and end as a destructive call must: absent, or
// a finite Unix time in seconds or an RFC 3339 time within Prometheus's
// minimum and maximum times.
func strictRange(params url.Values) (start, end int64, err error) {
	read := func(name string, def int64) (int64, error) {
		vs := params[name]
		if len(vs) == 0 || vs[0] == "" {
			return def, nil
		}
		v := vs[0]
		switch v {
		case surfMinTimeText:
			return surfMinTimeMs, nil
		case surfMaxTimeText:
			return surfMaxTimeMs, nil
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			if math.IsNaN(f) || math.IsInf(f, 0) || f*1000 < float64(surfMinTimeMs) || f*1000 > float64(surfMaxTimeMs) {
				return 0, fmt.Errorf("%s=%q", name, v)
			}
			sec, frac := math.Modf(f)
			return int64(sec)*1000 + int64(math.Round(frac*1000)), nil
		}
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.UnixMilli(), nil
		}
		return 0, fmt.Errorf("%s=%q", name, truncate(v))
	}
	if start, err = read("start", math.MinInt64); err != nil {
		return 0, 0, err
	}
	if end, err = read("end", math.MaxInt64); err != nil {
		return 0, 0, err
	}
	return start, end, nil
}

func truncate(s string) string {
	if len(s) > 300 {
		return fmt.Sprintf("%s... (%d bytes)", s[:120], len(s))
	}
	return s
}

// afterDelete is ss less the samples in [start, end] of the series that a
// selector of match matches.
func afterDelete(ss []series, match []string, start, end int64) []series {
	var sets [][]*labels.Matcher
	for _, m := range match {
		ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector(m)
		if err != nil {
			return ss // the adapter must have refused it; any deletion shows
		}
		sets = append(sets, ms)
	}
	var out []series
	for _, s := range ss {
		if !slices.ContainsFunc(sets, func(ms []*labels.Matcher) bool { return matchesAll(ms, s.Labels) }) {
			out = append(out, s)
			continue
		}
		kept := series{Labels: s.Labels}
		for _, smp := range s.Samples {
			if smp.T < start || smp.T > end {
				kept.Samples = append(kept.Samples, smp)
			}
		}
		if len(kept.Samples) > 0 {
			out = append(out, kept)
		}
	}
	return out
}

// missing is the samples of want that got lacks.
func missing(want, got []series) []series {
	have := map[string]map[int64]bool{}
	for _, s := range got {
		m := map[int64]bool{}
		for _, smp := range s.Samples {
			m[smp.T] = true
		}
		have[s.Labels.String()] = m
	}
	var out []series
	for _, s := range want {
		lack := series{Labels: s.Labels}
		for _, smp := range s.Samples {
			if !have[s.Labels.String()][smp.T] {
				lack.Samples = append(lack.Samples, smp)
			}
		}
		if len(lack.Samples) > 0 {
			out = append(out, lack)
		}
	}
	return out
}

// watchdog follows a process's RSS: its peak over a baseline, and a kill
// when it passes surfaceKillAt over it.
type watchdog struct {
	p    *process
	mu   sync.Mutex
	base int64 // bytes
	dead int64 // the RSS at which it killed the process, 0 if not
	done chan struct{}
	once sync.Once
}

func newWatchdog(p *process) *watchdog {
	w := &watchdog{p: p, done: make(chan struct{}), base: rssBytes(p.cmd.Process.Pid, "VmRSS")}
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-p.done:
				return
			case <-tick.C:
			}
			rss := rssBytes(p.cmd.Process.Pid, "VmRSS")
			w.mu.Lock()
			over := rss > w.base+surfaceKillAt
			if over {
				w.dead = rss
			}
			w.mu.Unlock()
			if over {
				_ = p.cmd.Process.Kill()
				return
			}
		}
	}()
	return w
}

func (w *watchdog) stop() { w.once.Do(func() { close(w.done) }) }

func (w *watchdog) setBaseline() {
	// Writing 5 to clear_refs resets VmHWM to the current RSS, so that the
	// peak counts from here, not from the start-up.
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", w.p.cmd.Process.Pid), []byte("5"), 0)
	rss := rssBytes(w.p.cmd.Process.Pid, "VmRSS")
	w.mu.Lock()
	defer w.mu.Unlock()
	w.base = rss
}

func (w *watchdog) killed() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dead
}

// rise is how far the peak RSS (the kernel's VmHWM) went over the
// baseline.
func (w *watchdog) rise() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead > 0 {
		return w.dead - w.base
	}
	hwm := rssBytes(w.p.cmd.Process.Pid, "VmHWM")
	if hwm == 0 {
		return 0 // exited: alive says so
	}
	return hwm - w.base
}

// rssBytes reads a field of /proc/PID/status in bytes; 0 when the process
// is gone.
func rssBytes(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}
