// Package config holds the adapter's configuration: one Config struct, filled
// from defaults, then an optional YAML file, then command-line flags (a flag
// given on the command line wins over the file).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/kairos-remote/kairos-adapter/rollup"
)

// Config is everything the adapter can be told. YAML keys mirror the flag
// names: flag --a.b-c is key b_c under section a.
type Config struct {
	Web       Web       `yaml:"web"`
	Storage   Storage   `yaml:"storage"`
	Cassandra Cassandra `yaml:"cassandra"`
	KairosDB  KairosDB  `yaml:"kairosdb"`
	Query     Query     `yaml:"query"`
	Rollup    Rollup    `yaml:"rollup"`
	Log       Log       `yaml:"log"`
}

// Web configures the HTTP side.
type Web struct {
	ListenAddress       string         `yaml:"listen_address"`
	ConfigFile          string         `yaml:"config_file"` // exporter-toolkit web config: TLS, basic auth
	EnableAdminAPI      bool           `yaml:"enable_admin_api"`
	ReadTimeout         model.Duration `yaml:"read_timeout"`
	MaxRequestBytes     int64          `yaml:"max_request_bytes"`
	MaxConcurrentWrites int            `yaml:"max_concurrent_writes"`
	MaxConcurrentReads  int            `yaml:"max_concurrent_reads"`
	// MaxWriteBytesInFlight is the byte budget of the writes in flight.
	MaxWriteBytesInFlight int64 `yaml:"max_write_bytes_in_flight"`
}

// Storage picks the engine under the KairosDB layout.
type Storage struct {
	Type string `yaml:"type"` // embedded or cassandra
	Path string `yaml:"path"` // embedded store directory
	// EmbeddedCacheBytes is the embedded store's block cache.
	EmbeddedCacheBytes int64 `yaml:"embedded_cache_bytes"`
}

// Cassandra configures the connection to a Cassandra cluster.
type Cassandra struct {
	Hosts            []string       `yaml:"hosts"`
	Keyspace         string         `yaml:"keyspace"`
	Replication      string         `yaml:"replication"`
	WriteConsistency string         `yaml:"write_consistency"`
	ReadConsistency  string         `yaml:"read_consistency"`
	LocalDC          string         `yaml:"local_dc"`
	Username         string         `yaml:"username"`
	PasswordFile     string         `yaml:"password_file"`
	TLS              TLS            `yaml:"tls"`
	Timeout          model.Duration `yaml:"timeout"`
	ConnectTimeout   model.Duration `yaml:"connect_timeout"`
	// MaxInFlightRequests is one limit for the whole process: the ceiling
	// of the adaptive limit that SlowRequest and overload errors lower.
	MaxInFlightRequests int            `yaml:"max_in_flight_requests"`
	SlowRequest         model.Duration `yaml:"slow_request"`
	QueueTimeout        model.Duration `yaml:"queue_timeout"`
	ReconnectInterval   model.Duration `yaml:"reconnect_interval"`
}

// TLS names the files for TLS to Cassandra; all empty means no TLS.
type TLS struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// KairosDB configures the layout: what KairosDB itself reads from its own
// configuration file.
type KairosDB struct {
	DatapointTTL      model.Duration `yaml:"datapoint_ttl"`
	TagIndexedMetrics []string       `yaml:"tag_indexed_metrics"`
	RowWidth          model.Duration `yaml:"row_width"`
	RowTimeUnit       string         `yaml:"row_time_unit"`
	MetricPrefix      string         `yaml:"metric_prefix"`
	IndexCacheSize    int            `yaml:"index_cache_size"`
	IndexCacheTTL     model.Duration `yaml:"index_cache_ttl"`
	RowKeysCacheBytes int64          `yaml:"row_keys_cache_bytes"`
}

// Query bounds what one remote-read or PromQL query may cost.
type Query struct {
	MaxMetrics     int            `yaml:"max_metrics"`
	MaxSeries      int            `yaml:"max_series"`
	MaxSamples     int            `yaml:"max_samples"`
	Timeout        model.Duration `yaml:"timeout"`
	LookbackDelta  model.Duration `yaml:"lookback_delta"`
	MaxConcurrency int            `yaml:"max_concurrency"`
	// MaxSourceResolution is the default of the query API's
	// max_source_resolution: auto, raw (or 0), or a rollup resolution.
	MaxSourceResolution string `yaml:"max_source_resolution"`
	// What a PromQL expression may be, checked before it is evaluated.
	MaxLength        int `yaml:"max_length"`
	MaxDepth         int `yaml:"max_depth"`
	MaxSubquerySteps int `yaml:"max_subquery_steps"`
	// How range queries are split, sharded and cached (package frontend).
	SplitInterval         model.Duration `yaml:"split_interval"`
	Parallelism           int            `yaml:"parallelism"`
	Shards                int            `yaml:"shards"`
	ResultsCacheBytes     int64          `yaml:"results_cache_bytes"`
	ResultsCacheFreshness model.Duration `yaml:"results_cache_freshness"`
	ResultsCacheTTL       model.Duration `yaml:"results_cache_ttl"`
	AlignSteps            bool           `yaml:"align_steps"`
}

// Rollup configures the rollup job (rollup/job).
type Rollup struct {
	// Resolutions, e.g. ["5m", "1h"]; empty turns the job off.
	Resolutions []string       `yaml:"resolutions"`
	Delay       model.Duration `yaml:"delay"`
	// Retention, e.g. ["5m=8760h", "1h=0"]: each resolution's TTL, 0 or
	// missing keeps its cells forever.
	Retention []string `yaml:"retention"`
	// DutyCycle is the share of time the job works while it has work.
	DutyCycle float64 `yaml:"duty_cycle"`
}

// Log configures log/slog output.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Consistency levels accepted for --cassandra.*-consistency.
var consistencyLevels = []string{"ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE"}

// LoadFile decodes a YAML file over cfg. Unknown keys are errors, so a typo
// cannot silently leave a default in place.
func LoadFile(cfg *Config, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	// An empty file decodes to io.EOF: it means "no settings", not an error.
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

// Validate checks values that the types alone cannot. Messages name the key
// as both its flag and its YAML form.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag, yamlKey, format string, args ...any) {
		errs = append(errs, fmt.Errorf("invalid --%s (%s): %s", flag, yamlKey, fmt.Sprintf(format, args...)))
	}
	if c.Web.ListenAddress == "" {
		bad("web.listen-address", "web.listen_address", "must not be empty")
	}
	if c.Web.ReadTimeout <= 0 {
		// No limit would let a client hold a connection forever by
		// trickling its headers or body.
		bad("web.read-timeout", "web.read_timeout", "must be positive, got %s", c.Web.ReadTimeout)
	}
	if c.Web.MaxRequestBytes <= 0 {
		bad("web.max-request-bytes", "web.max_request_bytes", "must be positive, got %d", c.Web.MaxRequestBytes)
	}
	if c.Web.MaxConcurrentWrites <= 0 {
		bad("web.max-concurrent-writes", "web.max_concurrent_writes", "must be positive, got %d", c.Web.MaxConcurrentWrites)
	}
	if c.Web.MaxConcurrentReads <= 0 {
		bad("web.max-concurrent-reads", "web.max_concurrent_reads", "must be positive, got %d", c.Web.MaxConcurrentReads)
	}
	if c.Web.MaxWriteBytesInFlight <= 0 {
		bad("web.max-write-bytes-in-flight", "web.max_write_bytes_in_flight", "must be positive, got %d", c.Web.MaxWriteBytesInFlight)
	}
	if c.Cassandra.MaxInFlightRequests <= 0 {
		bad("cassandra.max-in-flight-requests", "cassandra.max_in_flight_requests", "must be positive, got %d", c.Cassandra.MaxInFlightRequests)
	}
	if c.Cassandra.QueueTimeout <= 0 {
		bad("cassandra.queue-timeout", "cassandra.queue_timeout", "must be positive, got %v", c.Cassandra.QueueTimeout)
	}
	if c.Cassandra.ReconnectInterval <= 0 {
		bad("cassandra.reconnect-interval", "cassandra.reconnect_interval", "must be positive, got %v", c.Cassandra.ReconnectInterval)
	}
	switch c.Storage.Type {
	case "embedded":
		if c.Storage.Path == "" {
			bad("storage.path", "storage.path", "must not be empty with --storage=embedded")
		}
		if c.Storage.EmbeddedCacheBytes <= 0 {
			bad("storage.embedded-cache-bytes", "storage.embedded_cache_bytes", "must be positive, got %d", c.Storage.EmbeddedCacheBytes)
		}
	case "cassandra":
	default:
		bad("storage", "storage.type", "must be embedded or cassandra, got %q", c.Storage.Type)
	}
	if len(c.Cassandra.Hosts) == 0 {
		bad("cassandra.hosts", "cassandra.hosts", "must name at least one host")
	}
	for _, h := range c.Cassandra.Hosts {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " /") {
			bad("cassandra.hosts", "cassandra.hosts", "%q is not host[:port]", h)
		}
	}
	if !ValidKeyspace(c.Cassandra.Keyspace) {
		bad("cassandra.keyspace", "cassandra.keyspace", "%q must be 1-48 letters, digits or underscores", c.Cassandra.Keyspace)
	}
	if r := strings.TrimSpace(c.Cassandra.Replication); !strings.HasPrefix(r, "{") || !strings.HasSuffix(r, "}") {
		bad("cassandra.replication", "cassandra.replication", "%q is not a CQL map literal such as {'class': 'SimpleStrategy', 'replication_factor': 1}", c.Cassandra.Replication)
	}
	for _, cl := range []struct{ flag, key, v string }{
		{"cassandra.write-consistency", "cassandra.write_consistency", c.Cassandra.WriteConsistency},
		{"cassandra.read-consistency", "cassandra.read_consistency", c.Cassandra.ReadConsistency},
	} {
		if !contains(consistencyLevels, strings.ToUpper(cl.v)) {
			bad(cl.flag, cl.key, "%q is not one of %s", cl.v, strings.Join(consistencyLevels, ", "))
		}
	}
	tlsSet := 0
	for _, f := range []string{c.Cassandra.TLS.CertFile, c.Cassandra.TLS.KeyFile} {
		if f != "" {
			tlsSet++
		}
	}
	if tlsSet == 1 {
		bad("cassandra.tls.cert-file", "cassandra.tls.cert_file", "a client certificate needs both --cassandra.tls.cert-file and --cassandra.tls.key-file")
	}
	if c.Cassandra.Timeout <= 0 {
		bad("cassandra.timeout", "cassandra.timeout", "must be positive")
	}
	if c.Cassandra.ConnectTimeout <= 0 {
		bad("cassandra.connect-timeout", "cassandra.connect_timeout", "must be positive")
	}
	if c.Cassandra.PasswordFile != "" && c.Cassandra.Username == "" {
		bad("cassandra.password-file", "cassandra.password_file", "needs --cassandra.username")
	}
	// Index rows live one row width longer than samples (docs/kairosdb-layout.md §5.2), and
	// Cassandra refuses TTLs above 20 years.
	ttl, maxTTL := time.Duration(c.KairosDB.DatapointTTL), 630720000*time.Second-time.Duration(c.KairosDB.RowWidth)
	if ttl < 0 || ttl%time.Second != 0 || ttl > maxTTL {
		bad("kairosdb.datapoint-ttl", "kairosdb.datapoint_ttl", "%s must be whole seconds between 0 and %s (Cassandra's 20y TTL limit less the row width)", c.KairosDB.DatapointTTL, model.Duration(maxTTL))
	}
	// Accepted in any case, stored as the spec table spells it: the store
	// reads the unit case-sensitively, as KairosDB reads its spec table.
	c.KairosDB.RowTimeUnit = strings.ToUpper(c.KairosDB.RowTimeUnit)
	switch c.KairosDB.RowTimeUnit {
	case "MILLISECONDS":
		w := time.Duration(c.KairosDB.RowWidth)
		// Columns are signed 32-bit millisecond offsets (docs/kairosdb-layout.md §3.2).
		if w <= 0 || w%time.Millisecond != 0 || w >= (1<<31)*time.Millisecond {
			bad("kairosdb.row-width", "kairosdb.row_width", "%s must be whole milliseconds, positive and below 24d20h31m23s", c.KairosDB.RowWidth)
		}
	case "SECONDS":
		w := time.Duration(c.KairosDB.RowWidth)
		if w <= 0 || w%time.Second != 0 {
			bad("kairosdb.row-width", "kairosdb.row_width", "%s must be whole seconds with row time unit SECONDS", c.KairosDB.RowWidth)
		}
	default:
		bad("kairosdb.row-time-unit", "kairosdb.row_time_unit", "%q must be MILLISECONDS or SECONDS", c.KairosDB.RowTimeUnit)
	}
	for _, m := range c.KairosDB.TagIndexedMetrics {
		if m == "" {
			bad("kairosdb.tag-indexed-metrics", "kairosdb.tag_indexed_metrics", "empty metric name")
		}
	}
	if c.KairosDB.IndexCacheSize <= 0 {
		bad("kairosdb.index-cache-size", "kairosdb.index_cache_size", "must be positive, got %d", c.KairosDB.IndexCacheSize)
	}
	if c.KairosDB.RowKeysCacheBytes < 0 {
		bad("kairosdb.row-keys-cache-bytes", "kairosdb.row_keys_cache_bytes", "must not be negative, got %d", c.KairosDB.RowKeysCacheBytes)
	}
	if c.KairosDB.IndexCacheTTL <= 0 {
		bad("kairosdb.index-cache-ttl", "kairosdb.index_cache_ttl", "must be positive, got %s", c.KairosDB.IndexCacheTTL)
	}
	for _, q := range []struct {
		flag, key string
		v         int
	}{{"query.max-metrics", "query.max_metrics", c.Query.MaxMetrics}, {"query.max-series", "query.max_series", c.Query.MaxSeries}, {"query.max-samples", "query.max_samples", c.Query.MaxSamples}} {
		if q.v < 0 {
			bad(q.flag, q.key, "must not be negative (0 means no limit)")
		}
	}
	if c.Query.Timeout <= 0 {
		bad("query.timeout", "query.timeout", "must be positive, got %s", c.Query.Timeout)
	}
	if c.Query.LookbackDelta <= 0 {
		bad("query.lookback-delta", "query.lookback_delta", "must be positive, got %s", c.Query.LookbackDelta)
	}
	switch s := c.Query.MaxSourceResolution; s {
	case "auto", "raw", "0", "0s":
	default:
		if _, err := rollup.ParseResolution(s); err != nil {
			bad("query.max-source-resolution", "query.max_source_resolution", "want auto, raw (or 0), or a rollup resolution such as 5m or 1h, got %q", s)
		}
	}
	for _, q := range []struct {
		flag, key string
		v         int
	}{
		{"query.max-concurrency", "query.max_concurrency", c.Query.MaxConcurrency},
		{"query.max-length", "query.max_length", c.Query.MaxLength},
		{"query.max-depth", "query.max_depth", c.Query.MaxDepth},
		{"query.max-subquery-steps", "query.max_subquery_steps", c.Query.MaxSubquerySteps},
	} {
		if q.v <= 0 {
			bad(q.flag, q.key, "must be positive, got %d", q.v)
		}
	}
	if c.Query.SplitInterval < 0 {
		bad("query.split-interval", "query.split_interval", "must not be negative (0 turns splitting off), got %s", c.Query.SplitInterval)
	}
	for _, q := range []struct {
		flag, key string
		v         int64
	}{
		{"query.parallelism", "query.parallelism", int64(c.Query.Parallelism)},
		{"query.shards", "query.shards", int64(c.Query.Shards)},
		{"query.results-cache-bytes", "query.results_cache_bytes", c.Query.ResultsCacheBytes},
	} {
		if q.v < 0 {
			bad(q.flag, q.key, "must not be negative, got %d", q.v)
		}
	}
	if c.Query.ResultsCacheFreshness < 0 {
		bad("query.results-cache-freshness", "query.results_cache_freshness", "must not be negative, got %s", c.Query.ResultsCacheFreshness)
	}
	if c.Query.ResultsCacheTTL <= 0 {
		bad("query.results-cache-ttl", "query.results_cache_ttl", "must be positive, got %s", c.Query.ResultsCacheTTL)
	}
	if _, err := rollup.ParseResolutions(strings.Join(c.Rollup.Resolutions, ",")); err != nil {
		bad("rollup.resolutions", "rollup.resolutions", "%v", err)
	}
	if _, err := rollup.ParseRetention(strings.Join(c.Rollup.Retention, ",")); err != nil {
		bad("rollup.retention", "rollup.retention", "%v", err)
	}
	if c.Rollup.Delay < 0 {
		bad("rollup.delay", "rollup.delay", "must not be negative, got %s", c.Rollup.Delay)
	}
	if !(c.Rollup.DutyCycle > 0 && c.Rollup.DutyCycle <= 1) {
		bad("rollup.duty-cycle", "rollup.duty_cycle", "must be in (0, 1], got %g", c.Rollup.DutyCycle)
	}
	if !contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		bad("log.level", "log.level", "%q must be debug, info, warn or error", c.Log.Level)
	}
	if !contains([]string{"logfmt", "json"}, c.Log.Format) {
		bad("log.format", "log.format", "%q must be logfmt or json", c.Log.Format)
	}
	return errors.Join(errs...)
}

// CassandraPassword reads the password file, trimming one trailing newline.
// The password only ever comes from a file so it never shows in a process
// listing or a config dump.
func (c *Config) CassandraPassword() (string, error) {
	if c.Cassandra.PasswordFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.Cassandra.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("--cassandra.password-file: %w", err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
}

// ValidKeyspace reports whether s is a keyspace name Cassandra takes unquoted.
func ValidKeyspace(s string) bool {
	if len(s) == 0 || len(s) > 48 {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
