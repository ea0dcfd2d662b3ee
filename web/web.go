// Package web serves the adapter's browser UI: the query page (/ and
// /graph), the metrics explorer (/explore) and the status page (/status),
// their assets (/static/, embedded from ui/static, built from ui/src by
// scripts/ui.sh), and the two JSON endpoints behind the explorer and the
// status page. The pages query the adapter's own /api/v1; nothing is loaded
// from elsewhere. TLS and basic auth are the HTTP server's (exporter-toolkit),
// which wraps every route.
package web

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/metadata"
	"golang.org/x/sync/errgroup"
	"gopkg.in/yaml.v3"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/internal/storeerr"
	"github.com/kairos-remote/kairos-adapter/internal/timeparam"
)

//go:embed ui/static
var assets embed.FS

// Store is what the explorer reads: the indexes and the metadata, never
// the samples.
type Store interface {
	MetricNames(ctx context.Context) ([]string, error)
	SeriesCounts(ctx context.Context, metric string, start, end int64, fn func(rowTime int64, dataType string, entries int, cached bool)) error
	TagIndexed(metric string) bool
	Metadata(ctx context.Context, metric string, limit int) (map[string][]metadata.Metadata, error)
	// IndexEntries calls fn with the index entries reads looked at and
	// selected, by metric, for every metric read since the process started.
	IndexEntries(fn func(metric string, scanned, selected float64))
}

// Status is what the status page shows besides the build information and
// the configuration: each running part's own status value, serialized as
// the part defines it; a part that is not running (the store while it
// starts, the rollup job when off) is nil.
type Status struct {
	Runtime  any `json:"runtime"`
	Engine   any `json:"engine"`
	Store    any `json:"store"`
	Adapter  any `json:"adapter"`
	Frontend any `json:"frontend"`
	Rollups  any `json:"rollups"`
}

// Options wire the UI to the rest of the process.
type Options struct {
	// Store returns nil while the store is starting.
	Store func() Store
	// Config is the effective configuration, shown as YAML. It must hold
	// no secret (the Cassandra password is a file name in it).
	Config any
	// Status reads the running parts' status for the status page.
	Status func() Status
	// Now is the clock of the explorer's default range; nil is time.Now.
	Now func() time.Time
	// API serves the JSON endpoints (/api/v1/status/...) in the envelope,
	// error types and statuses of the rest of /api/v1/: main.go passes the
	// query API's JSON method, so that every /api/v1/ path answers one way.
	// Required.
	// f's errors marked storeerr.ErrInvalid answer 400 bad_data,
	// ErrUnavailable 503 unavailable; its warnings are the envelope's.
	API func(name string, f func(*http.Request) (data any, warnings []string, err error)) http.Handler
	// MaxMetrics bounds the metrics the explorer counts when no metric is
	// named (--query.max-metrics): past it the answer holds the first
	// MaxMetrics names in byte order, marked truncated, with a warning, as
	// Prometheus's limit parameter truncates. 0 means no limit.
	MaxMetrics int
	// Logger gets the stacks of panics recovered while the explorer counts
	// metrics on goroutines of its own; nil logs nothing.
	Logger *slog.Logger
}

// UI is the web UI's handlers.
type UI struct {
	opts Options
}

// New returns the UI.
func New(opts Options) *UI {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &UI{opts: opts}
}

// Register adds the UI's routes through handle (adapter.Options.Routes).
func (u *UI) Register(handle func(pattern, name string, h http.Handler)) {
	static, err := fs.Sub(assets, "ui/static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	// Embedded files carry no modification time, so the ETag (the content's
	// hash) is what lets a browser revalidate them instead of reloading;
	// the bundles are also kept gzipped (a third of their size), for the
	// browsers that accept it.
	etags, gzipped := map[string]string{}, map[string][]byte{}
	_ = fs.WalkDir(static, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := fs.ReadFile(static, name)
		if err != nil {
			return nil
		}
		etags[name] = fmt.Sprintf(`"%x"`, sha256.Sum256(b))
		if path.Ext(name) == ".js" || path.Ext(name) == ".css" {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			_, _ = zw.Write(b)
			if zw.Close() == nil {
				gzipped[name] = buf.Bytes()
			}
		}
		return nil
	})
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("ETag", etags["index.html"])
		http.ServeFileFS(w, r, static, "index.html")
	})
	for _, p := range []string{"GET /{$}", "GET /graph", "GET /explore", "GET /status"} {
		handle(p, "ui", page)
	}
	files := http.FileServerFS(static)
	handle("GET /static/", "ui", http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Path
		// Go's file server answers 500 to a name fs.FS refuses (invalid
		// UTF-8): no file has it. The empty name is the folder itself,
		// where /static/index.html is redirected.
		if name != "" && !fs.ValidPath(name) {
			http.NotFound(w, r)
			return
		}
		etag, known := etags[name]
		if known {
			w.Header().Set("Cache-Control", "no-cache")
			w.Header().Set("ETag", etag)
		}
		gz, zipped := gzipped[name]
		if zipped {
			w.Header().Set("Vary", "Accept-Encoding")
		}
		if !zipped || !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			files.ServeHTTP(w, r)
			return
		}
		w.Header().Set("ETag", strings.TrimSuffix(etag, `"`)+`-gzip"`)
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", mime.TypeByExtension(path.Ext(name)))
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(gz))
	})))
	handle("GET /api/v1/status/metrics", "status_metrics", u.opts.API("status_metrics", u.metrics))
	handle("GET /api/v1/status/adapter", "status_adapter", u.opts.API("status_adapter", u.status))
}

// WindowSeries is one row window of a metric in /api/v1/status/metrics.
type WindowSeries struct {
	Start     int64          `json:"start"` // the row time, ms
	Series    int            `json:"series"`
	DataTypes map[string]int `json:"dataTypes"`
	Cached    bool           `json:"cached"` // counted from a kept row_keys listing
}

// MetricInfo is one metric of /api/v1/status/metrics.
type MetricInfo struct {
	Name       string         `json:"name"`
	Series     int            `json:"series"` // in its largest window
	Windows    []WindowSeries `json:"windows"`
	DataTypes  []string       `json:"dataTypes"`
	Type       string         `json:"type"`
	Help       string         `json:"help"`
	Unit       string         `json:"unit"`
	TagIndexed bool           `json:"tagIndexed"`
	Scanned    float64        `json:"indexEntriesScanned"`
	Selected   float64        `json:"indexEntriesSelected"`
}

// metrics serves GET /api/v1/status/metrics?start=&end=&metric=&limit=.
func (u *UI) metrics(r *http.Request) (any, []string, error) {
	s, err := u.store()
	if err != nil {
		return nil, nil, err
	}
	now := u.opts.Now()
	end, err := timeParam(r, "end", now)
	if err != nil {
		return nil, nil, storeerr.Invalid(err)
	}
	start, err := timeParam(r, "start", end.Add(-time.Hour))
	if err != nil {
		return nil, nil, storeerr.Invalid(err)
	}
	if start.After(end) {
		return nil, nil, storeerr.Invalid(errors.New("end timestamp must not be before start time"))
	}
	limit := 0
	if v := r.FormValue("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 0 {
			return nil, nil, storeerr.Invalid(errors.New("limit must be a non-negative number"))
		}
	}
	names := []string{r.FormValue("metric")}
	var warnings []string
	total := 1
	if names[0] == "" {
		if names, err = s.MetricNames(r.Context()); err != nil {
			return nil, nil, storeerr.Unavailable(err)
		}
		// Each metric counted is a listing of its row_keys per window: a
		// keyspace of many metrics would cost as many listings.
		if total = len(names); u.opts.MaxMetrics > 0 && total > u.opts.MaxMetrics {
			names = names[:u.opts.MaxMetrics]
			warnings = append(warnings, fmt.Sprintf("results truncated: %d of %d metrics counted (--query.max-metrics); name one with metric= to count it", len(names), total))
		}
	}
	meta, err := s.Metadata(r.Context(), "", 0)
	if err != nil {
		return nil, nil, storeerr.Unavailable(err)
	}
	type counts struct{ scanned, selected float64 }
	read := map[string]counts{}
	s.IndexEntries(func(metric string, scanned, selected float64) { read[metric] = counts{scanned, selected} })
	out := make([]MetricInfo, len(names))
	g, ctx := errgroup.WithContext(r.Context())
	g.SetLimit(4)
	for i, name := range names {
		g.Go(func() (err error) {
			defer recovered.Into(&err, u.opts.Logger, "the series count of "+name)
			m := MetricInfo{Name: name, TagIndexed: s.TagIndexed(name), Windows: []WindowSeries{}, DataTypes: []string{},
				Scanned: read[name].scanned, Selected: read[name].selected}
			if md := meta[name]; len(md) > 0 {
				m.Type, m.Help, m.Unit = string(md[0].Type), md[0].Help, md[0].Unit
			}
			err = s.SeriesCounts(ctx, name, start.UnixMilli(), end.UnixMilli(), func(rt int64, dataType string, n int, cached bool) {
				if len(m.Windows) == 0 || m.Windows[len(m.Windows)-1].Start != rt {
					m.Windows = append(m.Windows, WindowSeries{Start: rt, DataTypes: map[string]int{}})
				}
				win := &m.Windows[len(m.Windows)-1]
				win.Series += n
				win.DataTypes[dataType] += n
				win.Cached = win.Cached || cached
				if !slices.Contains(m.DataTypes, dataType) {
					m.DataTypes = append(m.DataTypes, dataType)
				}
			})
			for _, win := range m.Windows {
				m.Series = max(m.Series, win.Series)
			}
			slices.Sort(m.DataTypes)
			out[i] = m
			return err
		})
	}
	if err := g.Wait(); err != nil {
		// A recovered panic stays recovered.ErrPanic inside: the API's
		// mapping answers it 500.
		return nil, nil, storeerr.Unavailable(err)
	}
	slices.SortStableFunc(out, func(a, b MetricInfo) int { return cmp.Or(b.Series-a.Series, cmp.Compare(a.Name, b.Name)) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return map[string]any{"start": start.UnixMilli(), "end": end.UnixMilli(), "metrics": out, "truncated": len(names) < total, "metricsTotal": total}, warnings, nil
}

// status serves GET /api/v1/status/adapter.
func (u *UI) status(*http.Request) (any, []string, error) {
	cfg, err := yaml.Marshal(u.opts.Config)
	if err != nil {
		return nil, nil, err
	}
	answer := struct {
		Config string `json:"config"`
		Ready  bool   `json:"ready"`
		Status
	}{Config: string(cfg), Ready: u.opts.Store != nil && u.opts.Store() != nil}
	if u.opts.Status != nil {
		answer.Status = u.opts.Status()
	}
	return answer, nil, nil
}

func (u *UI) store() (Store, error) {
	if u.opts.Store != nil {
		if s := u.opts.Store(); s != nil {
			return s, nil
		}
	}
	return nil, storeerr.Unavailable(errors.New("the store is still starting (connecting to Cassandra)"))
}

// timeParam reads an optional time with the query API's parser
// (internal/timeparam, one for every endpoint): Unix seconds or RFC 3339,
// finite and within Prometheus's bounds.
func timeParam(r *http.Request, name string, def time.Time) (time.Time, error) {
	v := r.FormValue(name)
	if v == "" {
		return def, nil
	}
	t, err := timeparam.Parse(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid parameter %q: %w", name, err)
	}
	return t, nil
}
