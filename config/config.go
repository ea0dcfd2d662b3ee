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
	MaxRequestBytes     Bytes          `yaml:"max_request_bytes"`
	MaxConcurrentWrites int            `yaml:"max_concurrent_writes"`
	MaxConcurrentReads  int            `yaml:"max_concurrent_reads"`
	// MaxWriteBytesInFlight is the byte budget of the writes in flight.
	MaxWriteBytesInFlight Bytes `yaml:"max_write_bytes_in_flight"`
	// The remote-write handler's cache of series refs (adapter).
	WriteSeriesCacheSize int            `yaml:"write_series_cache_size"`
	WriteSeriesCacheTTL  model.Duration `yaml:"write_series_cache_ttl"`
}

// Storage picks the engine under the KairosDB layout.
type Storage struct {
	Type string `yaml:"type"` // embedded or cassandra
	Path string `yaml:"path"` // embedded store directory
	// EmbeddedCacheBytes is the embedded store's block cache.
	EmbeddedCacheBytes Bytes `yaml:"embedded_cache_bytes"`
	// EmbeddedCommitlogSync is batch or periodic, as Cassandra's
	// commitlog_sync; EmbeddedCommitlogSyncPeriod is periodic's period.
	EmbeddedCommitlogSync       string         `yaml:"embedded_commitlog_sync"`
	EmbeddedCommitlogSyncPeriod model.Duration `yaml:"embedded_commitlog_sync_period"`
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
	// The store's caches of the index rows it wrote (kairosstore).
	IndexCacheSize int            `yaml:"index_cache_size"`
	IndexCacheTTL  model.Duration `yaml:"index_cache_ttl"`
	// The kept row_keys listings (kairosstore/index).
	RowKeysCacheBytes Bytes          `yaml:"row_keys_cache_bytes"`
	RowKeysCacheTTL   model.Duration `yaml:"row_keys_cache_ttl"`
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
	ResultsCacheBytes     Bytes          `yaml:"results_cache_bytes"`
	ResultsCacheFreshness model.Duration `yaml:"results_cache_freshness"`
	ResultsCacheTTL       model.Duration `yaml:"results_cache_ttl"`
	AlignSteps            bool           `yaml:"align_steps"`
}

// Rollup configures the rollup job (rollupjob).
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

// Validate checks every flag's range (the flag table's checks) and then
// the values that depend on each other. Messages name the key as both its
// flag and its YAML form.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("invalid --%s (%s): %s", flag, yamlKey(flag), fmt.Sprintf(format, args...)))
	}
	for _, f := range flags {
		if f.v.check == nil {
			continue
		}
		if err := f.v.check(c); err != nil {
			bad(f.name, "%v", err)
		}
	}
	if c.Storage.Type == "embedded" && c.Storage.Path == "" {
		bad("storage.path", "must not be empty with --storage=embedded")
	}
	if (c.Cassandra.TLS.CertFile == "") != (c.Cassandra.TLS.KeyFile == "") {
		bad("cassandra.tls.cert-file", "a client certificate needs both --cassandra.tls.cert-file and --cassandra.tls.key-file")
	}
	if c.Cassandra.PasswordFile != "" && c.Cassandra.Username == "" {
		bad("cassandra.password-file", "needs --cassandra.username")
	}
	// Index rows live one row width longer than samples (docs/kairosdb-layout.md §5.2), and
	// Cassandra refuses TTLs above 20 years.
	ttl, maxTTL := time.Duration(c.KairosDB.DatapointTTL), 630720000*time.Second-time.Duration(c.KairosDB.RowWidth)
	if ttl < 0 || ttl%time.Second != 0 || ttl > maxTTL {
		bad("kairosdb.datapoint-ttl", "%s must be whole seconds between 0 and %s (Cassandra's 20y TTL limit less the row width)", c.KairosDB.DatapointTTL, model.Duration(maxTTL))
	}
	// Rollup rows get the same index rows, and both engines refuse a
	// longer TTL: the job would fail every write. A malformed list is the
	// flag check's to report.
	if ret, err := rollup.ParseRetention(strings.Join(c.Rollup.Retention, ",")); err == nil {
		for r, ttl := range ret {
			if ttl > maxTTL {
				bad("rollup.retention", "%s rollups kept %s: must be at most %s (Cassandra's 20y TTL limit less the row width), or 0 to keep them forever", r, model.Duration(ttl), model.Duration(maxTTL))
			}
		}
	}
	// Accepted in any case, stored as the spec table spells it: the store
	// reads the unit case-sensitively, as KairosDB reads its spec table.
	c.KairosDB.RowTimeUnit = strings.ToUpper(c.KairosDB.RowTimeUnit)
	switch c.KairosDB.RowTimeUnit {
	case "MILLISECONDS":
		w := time.Duration(c.KairosDB.RowWidth)
		// Columns are signed 32-bit millisecond offsets (docs/kairosdb-layout.md §3.2).
		if w <= 0 || w%time.Millisecond != 0 || w >= (1<<31)*time.Millisecond {
			bad("kairosdb.row-width", "%s must be whole milliseconds, positive and below 24d20h31m23s", c.KairosDB.RowWidth)
		}
	case "SECONDS":
		w := time.Duration(c.KairosDB.RowWidth)
		if w <= 0 || w%time.Second != 0 {
			bad("kairosdb.row-width", "%s must be whole seconds with row time unit SECONDS", c.KairosDB.RowWidth)
		}
	default:
		bad("kairosdb.row-time-unit", "%q must be MILLISECONDS or SECONDS", c.KairosDB.RowTimeUnit)
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
