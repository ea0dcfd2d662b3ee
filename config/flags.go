package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/model"

	"github.com/kairos-remote/kairos-adapter/rollup"
)

// flag is one command-line flag. Its default is a string parsed by v.set, so
// the same text is both what --help shows and what Default() applies; v.check
// is its range, applied to the value whichever source (default, YAML file,
// command line) it came from.
type flag struct {
	name, help, def string
	v               value
}

// value sets one field of Config from a flag's text, checks its range and
// writes it back as a flag's text.
type value struct {
	set    func(c *Config, s string) error
	check  func(c *Config) error
	format func(c *Config) string
}

// flags is the command-line contract; operators and the project's checks use
// these names, so they only ever gain entries. Help texts say what a flag
// means; the figures behind a default are README's.
var flags = []flag{
	{"config.file", "Path to a YAML configuration file; flags given on the command line override it.", "", value{}},
	{"web.config.file", "Path to an exporter-toolkit web configuration file enabling TLS and/or basic authentication; empty means plain HTTP without authentication.", "", field(str, func(c *Config) *string { return &c.Web.ConfigFile })},
	{"web.listen-address", "Address to listen on for remote write, remote read, /metrics and health checks.", ":9201", field(str, func(c *Config) *string { return &c.Web.ListenAddress }, notEmpty)},
	// No limit would let a client hold a connection forever by trickling
	// its headers or body.
	{"web.read-timeout", "Maximum time to read a whole request, headers and body.", "1m", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Web.ReadTimeout }, positive)},
	{"web.max-request-bytes", "Maximum size of a request body, compressed and decompressed; larger requests get 413.", "32MiB", field(ParseBytes, func(c *Config) *Bytes { return &c.Web.MaxRequestBytes }, positive)},
	{"web.enable-admin-api", "Serve POST /api/v1/admin/tsdb/delete_series and /api/v1/admin/tsdb/snapshot, as Prometheus's --web.enable-admin-api does, and POST /api/v1/admin/rollups/recompute.", "false", field(strconv.ParseBool, func(c *Config) *bool { return &c.Web.EnableAdminAPI })},
	{"web.max-concurrent-writes", "Remote-write requests served at once; more get 503 and Prometheus retries.", "32", field(strconv.Atoi, func(c *Config) *int { return &c.Web.MaxConcurrentWrites }, positive)},
	{"web.max-write-bytes-in-flight", "Estimated memory of the remote-write requests in flight together, a multiple of each decoded body; a request that does not fit gets 503 and Prometheus retries it, and one larger than the budget is served when nothing else is in flight.", "1GiB", field(ParseBytes, func(c *Config) *Bytes { return &c.Web.MaxWriteBytesInFlight }, positive)},
	{"web.max-concurrent-reads", "Remote-read requests served at once; more get 503.", "8", field(strconv.Atoi, func(c *Config) *int { return &c.Web.MaxConcurrentReads }, positive)},
	{"web.write-series-cache-size", "Series whose store reference the remote-write handler remembers per cache generation, so that their labels are decoded and translated once.", "200000", field(strconv.Atoi, func(c *Config) *int { return &c.Web.WriteSeriesCacheSize }, positive, atMost(maxCacheEntries))},
	{"web.write-series-cache-ttl", "How long the remote-write handler keeps a series' store reference before it translates the series' labels again.", "5m", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Web.WriteSeriesCacheTTL }, positive)},
	{"storage", "Storage engine: embedded (Pebble in --storage.path, no database needed) or cassandra.", "embedded", field(str, func(c *Config) *string { return &c.Storage.Type }, oneOf("embedded", "cassandra"))},
	{"storage.path", "Directory of the embedded store.", "./data", field(str, func(c *Config) *string { return &c.Storage.Path })},
	{"storage.embedded-cache-bytes", "Block cache of the embedded store: the uncompressed blocks it keeps in memory, so that a query over data read recently decompresses nothing again.", "64MiB", field(ParseBytes, func(c *Config) *Bytes { return &c.Storage.EmbeddedCacheBytes }, positive)},
	{"storage.embedded-commitlog-sync", "When the embedded store answers a write, as Cassandra's commitlog_sync: batch (after its logs are synced to disk; nothing acknowledged is lost in a crash) or periodic (once its logs are written to the operating system, which keeps them if the adapter is killed; synced every --storage.embedded-commitlog-sync-period, so an OS crash or power loss can lose that much).", "batch", field(str, func(c *Config) *string { return &c.Storage.EmbeddedCommitlogSync }, oneOf("batch", "periodic"))},
	// A longer period only widens what an OS crash loses: the head log is
	// synced on its rotation every 2 minutes anyway.
	{"storage.embedded-commitlog-sync-period", "How often --storage.embedded-commitlog-sync=periodic syncs the embedded store's logs to disk.", "10s", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Storage.EmbeddedCommitlogSyncPeriod }, positive, atMost(model.Duration(10*time.Minute)))},
	{"cassandra.hosts", "Comma-separated Cassandra contact points, host[:port].", "127.0.0.1:9042", field(list, func(c *Config) *[]string { return &c.Cassandra.Hosts }, hosts)},
	{"cassandra.keyspace", "Keyspace holding the KairosDB tables.", "kairosdb", field(str, func(c *Config) *string { return &c.Cassandra.Keyspace }, keyspace)},
	{"cassandra.replication", "Replication map used when the keyspace is created.", "{'class': 'SimpleStrategy', 'replication_factor': 1}", field(str, func(c *Config) *string { return &c.Cassandra.Replication }, cqlMap)},
	{"cassandra.write-consistency", "Consistency level of writes.", "QUORUM", field(str, func(c *Config) *string { return &c.Cassandra.WriteConsistency }, consistency)},
	{"cassandra.read-consistency", "Consistency level of reads, deletes and schema statements (as in KairosDB).", "ONE", field(str, func(c *Config) *string { return &c.Cassandra.ReadConsistency }, consistency)},
	{"cassandra.local-dc", "Local datacenter for DC-aware routing; empty means round robin over all hosts.", "", field(str, func(c *Config) *string { return &c.Cassandra.LocalDC })},
	{"cassandra.username", "Username for PasswordAuthenticator; empty means no authentication.", "", field(str, func(c *Config) *string { return &c.Cassandra.Username })},
	{"cassandra.password-file", "File holding the Cassandra password (never passed on the command line).", "", field(str, func(c *Config) *string { return &c.Cassandra.PasswordFile })},
	{"cassandra.tls.ca-file", "CA certificate to verify Cassandra nodes; setting any TLS file enables TLS.", "", field(str, func(c *Config) *string { return &c.Cassandra.TLS.CAFile })},
	{"cassandra.tls.cert-file", "Client certificate for TLS to Cassandra.", "", field(str, func(c *Config) *string { return &c.Cassandra.TLS.CertFile })},
	{"cassandra.tls.key-file", "Client key for TLS to Cassandra.", "", field(str, func(c *Config) *string { return &c.Cassandra.TLS.KeyFile })},
	{"cassandra.timeout", "Timeout of one Cassandra request.", "10s", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Cassandra.Timeout }, positive)},
	{"cassandra.connect-timeout", "Timeout of establishing a connection to a Cassandra node.", "5s", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Cassandra.ConnectTimeout }, positive)},
	{"cassandra.max-in-flight-requests", "Cassandra requests (statements or batches) the process has outstanding at once, all writes, deletes and remote-write requests together: the ceiling of an adaptive limit that overload lowers.", "128", field(strconv.Atoi, func(c *Config) *int { return &c.Cassandra.MaxInFlightRequests }, positive)},
	{"cassandra.slow-request", "A Cassandra request slower than this, like one failing with a timeout or overload error, halves the adaptive in-flight limit; 0 means only errors do.", "1s", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Cassandra.SlowRequest }, notNegative)},
	{"cassandra.queue-timeout", "How long a Cassandra request waits for a slot under the in-flight limit before its remote write is answered 503.", "5s", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Cassandra.QueueTimeout }, positive)},
	{"cassandra.reconnect-interval", "How often the driver tries again to connect to a Cassandra node it marked down.", "1s", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Cassandra.ReconnectInterval }, positive)},
	// The upper bound depends on the row width: Validate.
	{"kairosdb.datapoint-ttl", "Time to live of stored samples (KairosDB datapoint_ttl); 0 keeps them forever.", "0s", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.KairosDB.DatapointTTL }, notNegative)},
	{"kairosdb.tag-indexed-metrics", "Comma-separated KairosDB metric names (with --kairosdb.metric-prefix) whose rows also go to tag_indexed_row_keys, as KairosDB's tag_indexed_row_key_lookup_metrics; * for all.", "", field(list, func(c *Config) *[]string { return &c.KairosDB.TagIndexedMetrics }, noEmptyName)},
	// Checked with the row time unit: Validate.
	{"kairosdb.row-width", "Row width of a new keyspace; must match an existing keyspace's spec table, or the adapter refuses to start.", "3w", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.KairosDB.RowWidth })},
	{"kairosdb.row-time-unit", "Column time unit of a new keyspace, MILLISECONDS or SECONDS; must match an existing keyspace's spec table (LEGACY keyspaces count as MILLISECONDS).", "MILLISECONDS", field(str, func(c *Config) *string { return &c.KairosDB.RowTimeUnit })},
	{"kairosdb.metric-prefix", "Prefix added to every KairosDB metric name written, and required of every name read.", "", field(str, func(c *Config) *string { return &c.KairosDB.MetricPrefix })},
	{"kairosdb.index-cache-size", "Series, series rows and metric rows the store remembers per cache generation, so that index rows are written once per --kairosdb.index-cache-ttl.", "200000", field(strconv.Atoi, func(c *Config) *int { return &c.KairosDB.IndexCacheSize }, positive, atMost(maxCacheEntries))},
	{"kairosdb.index-cache-ttl", "How long the store trusts that an index row it wrote still exists (not a Cassandra TTL): an index entry another writer deleted is written again at most this long after, with the series' next sample.", "5m", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.KairosDB.IndexCacheTTL }, positive)},
	{"kairosdb.row-keys-cache-bytes", "Memory for row_keys listings kept in memory, so that a selective query on a metric with many series does not list them all again (candidates are checked against row_keys before use); 0 keeps none.", "512MiB", field(ParseBytes, func(c *Config) *Bytes { return &c.KairosDB.RowKeysCacheBytes }, notNegative)},
	{"kairosdb.row-keys-cache-ttl", "How long a kept row_keys listing is used after it was read: series another writer adds are seen at most this long after.", "5m", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.KairosDB.RowKeysCacheTTL }, positive)},
	{"query.max-metrics", "Most metric names one query may touch, and the metrics the web explorer counts without metric= (truncated beyond, with a warning); 0 means no limit.", "1000", field(strconv.Atoi, func(c *Config) *int { return &c.Query.MaxMetrics }, notNegative)},
	{"query.max-series", "Most series one remote-read query may return; 0 means no limit.", "0", field(strconv.Atoi, func(c *Config) *int { return &c.Query.MaxSeries }, notNegative)},
	{"query.max-samples", "Most samples one query may load from the store, counted by the store as it reads: a remote-read query (400 beyond), or the selectors of a PromQL query of the query API all together, and what its engine holds at once, as Prometheus's flag (422 execution beyond either, Prometheus's answer); 0 means no limit.", "50000000", field(strconv.Atoi, func(c *Config) *int { return &c.Query.MaxSamples }, notNegative)},
	{"query.timeout", "Maximum time one PromQL query of the query API may take (503 timeout beyond).", "2m", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Query.Timeout }, positive)},
	{"query.lookback-delta", "How far back PromQL looks for the latest sample of a series at an evaluation time.", "5m", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Query.LookbackDelta }, positive)},
	{"query.max-source-resolution", "Default of the query API's max_source_resolution parameter: auto reads rollups at a resolution of at most a fifth of the step, or coarser where their buckets fit every window the query evaluates; a resolution (5m, 1h, 6h) reads at most that one; raw (or 0) never.", "auto", field(str, func(c *Config) *string { return &c.Query.MaxSourceResolution }, sourceResolution)},
	{"query.max-concurrency", "PromQL queries of the query API evaluated at once; more wait for a slot.", "20", field(strconv.Atoi, func(c *Config) *int { return &c.Query.MaxConcurrency }, positive)},
	{"query.max-length", "Longest PromQL expression the query API accepts, in bytes (400 bad_data beyond).", "131072", field(strconv.Atoi, func(c *Config) *int { return &c.Query.MaxLength }, positive)},
	{"query.max-depth", "Deepest a PromQL expression may nest: brackets, and operators and function calls in its syntax tree (400 bad_data beyond).", "200", field(strconv.Atoi, func(c *Config) *int { return &c.Query.MaxDepth }, positive)},
	{"query.max-subquery-steps", "Most steps the subqueries of one PromQL query may evaluate together (400 bad_data beyond): the engine allocates per step, whatever the data.", "1000000", field(strconv.Atoi, func(c *Config) *int { return &c.Query.MaxSubquerySteps }, positive)},
	{"query.split-interval", "A range query of the query API is split into parts at the multiples of this since the Unix epoch (a day: UTC midnights), evaluated at once; 0 turns splitting off.", "24h", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Query.SplitInterval }, notNegative)},
	{"query.parallelism", "Parts and shards of one range query evaluated at once; 0 means the cores available (GOMAXPROCS).", "0", field(strconv.Atoi, func(c *Config) *int { return &c.Query.Parallelism }, notNegative)},
	{"query.shards", "Shards by series of a sum, min, max, count or avg over per-series functions, per part of a range query; 0 means as many as fill the cores (--query.parallelism) that a query's parts leave idle, none once its parts are as many; 1 turns sharding off.", "0", field(strconv.Atoi, func(c *Config) *int { return &c.Query.Shards }, notNegative, atMost(maxShards))},
	{"query.results-cache-bytes", "Memory of the results cache of range queries (extents per query and part, invalidated by every write and delete through the adapter); 0 turns it off.", "128MiB", field(ParseBytes, func(c *Config) *Bytes { return &c.Query.ResultsCacheBytes }, notNegative)},
	{"query.results-cache-freshness", "Evaluation times more recent than this are never cached: their samples may still be arriving; 0 caches up to now.", "10m", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Query.ResultsCacheFreshness }, notNegative)},
	{"query.results-cache-ttl", "How long a cached extent is trusted: writes and deletes through this adapter invalidate at once, this bounds how long changes by other writers (KairosDB, a second adapter) can go unseen.", "1h", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Query.ResultsCacheTTL }, positive)},
	{"query.align-steps", "Move the start and end of range queries to multiples of their step, so that more of them share cached extents; changes answers, as Mimir's step alignment does.", "false", field(strconv.ParseBool, func(c *Config) *bool { return &c.Query.AlignSteps })},
	{"rollup.resolutions", "Comma-separated resolutions the rollup job writes (each a whole number of minutes dividing a day and the largest); empty turns the job off.", "5m,1h,6h", field(list, func(c *Config) *[]string { return &c.Rollup.Resolutions }, resolutions)},
	{"rollup.delay", "How long after a unit of the largest resolution ends the rollup job waits for late samples before rolling it up; samples later still make it roll the unit up again.", "10m", field(model.ParseDuration, func(c *Config) *model.Duration { return &c.Rollup.Delay }, notNegative)},
	{"rollup.retention", "Comma-separated <resolution>=<TTL> of rollup cells, counted from each bucket's end; 0 or a resolution not named keeps them forever. Each must be 0 or at least --kairosdb.datapoint-ttl.", "", field(list, func(c *Config) *[]string { return &c.Rollup.Retention }, retention)},
	{"rollup.duty-cycle", "Share of time the rollup job works while it has work (backfill, catching up): after a unit that took w it pauses w*(1-d)/d, leaving the rest to ingest.", "0.25", field(parseFloat, func(c *Config) *float64 { return &c.Rollup.DutyCycle }, dutyCycle)},
	{"log.level", "Only log messages at this level or above: debug, info, warn, error.", "info", field(str, func(c *Config) *string { return &c.Log.Level }, oneOf("debug", "info", "warn", "error"))},
	{"log.format", "Log format: logfmt or json.", "logfmt", field(str, func(c *Config) *string { return &c.Log.Format }, oneOf("logfmt", "json"))},
}

// Default returns the configuration with every flag at its default.
func Default() *Config {
	c := &Config{}
	for _, f := range flags {
		if f.v.set != nil {
			if err := f.v.set(c, f.def); err != nil {
				panic(fmt.Sprintf("BUG: default of --%s: %v", f.name, err))
			}
		}
	}
	return c
}

// Parse builds the configuration from command-line arguments: defaults, then
// the --config.file YAML, then the flags the user gave. The caller prints
// the error and exits with status 2.
func Parse(app *kingpin.Application, args []string) (*Config, error) {
	c, _, err := ParseCommand(app, args)
	return c, err
}

// ParseCommand is Parse for an app with subcommands: it also returns the
// full name of the command selected ("" when the app has none), whose own
// flags and arguments kingpin has filled in.
func ParseCommand(app *kingpin.Application, args []string) (*Config, string, error) {
	values := make([]*string, len(flags))
	given := make([]bool, len(flags))
	bools := map[int]*bool{}
	for i, f := range flags {
		fc := app.Flag(f.name, f.help).Default(f.def).IsSetByUser(&given[i])
		if f.def == "false" {
			// A switch: --name and --no-name, no value.
			bools[i] = fc.Bool()
			values[i] = new(string)
			continue
		}
		values[i] = fc.String()
	}
	cmd, err := app.Parse(args)
	if err != nil {
		return nil, "", err
	}
	for i, b := range bools {
		*values[i] = strconv.FormatBool(*b)
	}
	c := Default()
	if *values[0] != "" {
		if err := LoadFile(c, *values[0]); err != nil {
			return nil, "", err
		}
	}
	for i, f := range flags {
		if given[i] && f.v.set != nil {
			if err := f.v.set(c, *values[i]); err != nil {
				return nil, "", fmt.Errorf("invalid --%s %q: %w", f.name, *values[i], err)
			}
		}
	}
	if err := c.Validate(); err != nil {
		return nil, "", err
	}
	return c, cmd, nil
}

// yamlKey is the YAML key of a flag: --section.some-name is some_name under
// section, and --storage, a section of its own, is storage.type.
func yamlKey(flag string) string {
	if flag == "storage" {
		return "storage.type"
	}
	if flag == "web.config.file" {
		return "web.config_file"
	}
	return strings.ReplaceAll(flag, "-", "_")
}

// field is the value of one flag: parse reads its text (the command line's
// or the default), get finds its field in Config, checks are its range.
func field[T any](parse func(string) (T, error), get func(*Config) *T, checks ...func(T) error) value {
	return value{
		set: func(c *Config, s string) error {
			v, err := parse(s)
			if err != nil {
				return err
			}
			*get(c) = v
			return nil
		},
		check: func(c *Config) error {
			for _, ch := range checks {
				if err := ch(*get(c)); err != nil {
					return err
				}
			}
			return nil
		},
		format: func(c *Config) string {
			if l, ok := any(*get(c)).([]string); ok {
				return strings.Join(l, ",")
			}
			return fmt.Sprint(*get(c))
		},
	}
}

// Flags is the value in effect of every flag (from the command line, the
// file, or its default) as the command line would give it, by flag name,
// as Prometheus's /api/v1/status/flags answers. --config.file is not
// kept.
func (c *Config) Flags() map[string]string {
	out := make(map[string]string, len(flags))
	for _, f := range flags {
		if f.v.format != nil {
			out[f.name] = f.v.format(c)
		}
	}
	return out
}

func str(s string) (string, error) { return s, nil }

func list(s string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out, nil
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

// number is what the range checks compare: counts, sizes and durations.
type number interface {
	~int | ~int64 | ~float64
}

func positive[T number](v T) error {
	if v <= 0 {
		return fmt.Errorf("must be positive, got %v", v)
	}
	return nil
}

func notNegative[T number](v T) error {
	if v < 0 {
		return fmt.Errorf("must not be negative, got %v", v)
	}
	return nil
}

// maxCacheEntries bounds the entry-counted caches: the store allocates a
// table of two slots per entry when it opens (kairosstore's refTable), and
// the write handler sizes its symbol table at eight per entry, so a size
// without bound would overflow or fail the allocation at start.
const maxCacheEntries = 1 << 26

// maxShards bounds --query.shards: the frontend writes one query text per
// shard of every part it shards, before any is evaluated.
const maxShards = 1024

func atMost[T number](limit T) func(T) error {
	return func(v T) error {
		if v > limit {
			return fmt.Errorf("must be at most %v, got %v", limit, v)
		}
		return nil
	}
}

func notEmpty(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	return nil
}

func oneOf(vals ...string) func(string) error {
	return func(s string) error {
		if !contains(vals, s) {
			return fmt.Errorf("must be %s, got %q", strings.Join(vals, " or "), s)
		}
		return nil
	}
}

func dutyCycle(v float64) error {
	if !(v > 0 && v <= 1) {
		return fmt.Errorf("must be in (0, 1], got %g", v)
	}
	return nil
}

func hosts(hs []string) error {
	if len(hs) == 0 {
		return errors.New("must name at least one host")
	}
	for _, h := range hs {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " /") {
			return fmt.Errorf("%q is not host[:port]", h)
		}
	}
	return nil
}

func keyspace(s string) error {
	if !ValidKeyspace(s) {
		return fmt.Errorf("%q must be 1-48 letters, digits or underscores", s)
	}
	return nil
}

func cqlMap(s string) error {
	if r := strings.TrimSpace(s); !strings.HasPrefix(r, "{") || !strings.HasSuffix(r, "}") {
		return fmt.Errorf("%q is not a CQL map literal such as {'class': 'SimpleStrategy', 'replication_factor': 1}", s)
	}
	return nil
}

func consistency(s string) error {
	if !contains(consistencyLevels, strings.ToUpper(s)) {
		return fmt.Errorf("%q is not one of %s", s, strings.Join(consistencyLevels, ", "))
	}
	return nil
}

func noEmptyName(names []string) error {
	if slices.Contains(names, "") {
		return errors.New("empty metric name")
	}
	return nil
}

func sourceResolution(s string) error {
	switch s {
	case "auto", "raw", "0", "0s":
		return nil
	}
	if _, err := rollup.ParseResolution(s); err != nil {
		return fmt.Errorf("want auto, raw (or 0), or a rollup resolution such as 5m or 1h, got %q", s)
	}
	return nil
}

func resolutions(rs []string) error {
	_, err := rollup.ParseResolutions(strings.Join(rs, ","))
	return err
}

func retention(rs []string) error {
	_, err := rollup.ParseRetention(strings.Join(rs, ","))
	return err
}
