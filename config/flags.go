package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/model"
)

// flag is one command-line flag. Its default is a string parsed by set, so
// the same text is both what --help shows and what Default() applies.
type flag struct {
	name, help, def string
	set             func(c *Config, s string) error
}

// flags is the command-line contract; operators and the project's checks use
// these names, so they only ever gain entries.
var flags = []flag{
	{"config.file", "Path to a YAML configuration file; flags given on the command line override it.", "", nil},
	{"web.listen-address", "Address to listen on for remote write, remote read, /metrics and health checks.", ":9201", str(func(c *Config) *string { return &c.Web.ListenAddress })},
	{"web.config.file", "Path to an exporter-toolkit web configuration file enabling TLS and/or basic authentication; empty means plain HTTP without authentication.", "", str(func(c *Config) *string { return &c.Web.ConfigFile })},
	{"web.read-timeout", "Maximum time to read a whole request, body included.", "1m", dur(func(c *Config) *model.Duration { return &c.Web.ReadTimeout })},
	{"web.max-request-bytes", "Maximum size of a request body, compressed and decompressed; larger requests get 413.", "33554432", i64(func(c *Config) *int64 { return &c.Web.MaxRequestBytes })},
	{"web.enable-admin-api", "Serve POST /api/v1/admin/tsdb/delete_series and /api/v1/admin/tsdb/snapshot, as Prometheus's --web.enable-admin-api does, and POST /api/v1/admin/rollups/recompute.", "false", boolean(func(c *Config) *bool { return &c.Web.EnableAdminAPI })},
	{"web.max-concurrent-writes", "Remote-write requests served at once; more get 503 and Prometheus retries.", "32", integer(func(c *Config) *int { return &c.Web.MaxConcurrentWrites })},
	{"web.max-write-bytes-in-flight", "Estimated memory of the remote-write requests in flight together (20 bytes per byte of decoded body: 16 measured on Cassandra, and a margin); a request that does not fit gets 503 and Prometheus retries it, and one larger than the budget is served when nothing else is in flight. The default, 1 GiB, takes 32 concurrent requests of Prometheus's 2,000 samples (~8 MB each) without refusing any, and serves a burst of maximum-size requests (32 MiB decoded, ~640 MiB each) one at a time.", "1073741824", i64(func(c *Config) *int64 { return &c.Web.MaxWriteBytesInFlight })},
	{"web.max-concurrent-reads", "Remote-read requests served at once; more get 503.", "8", integer(func(c *Config) *int { return &c.Web.MaxConcurrentReads })},
	{"storage", "Storage engine: embedded (Pebble in --storage.path, no database needed) or cassandra.", "embedded", str(func(c *Config) *string { return &c.Storage.Type })},
	{"storage.path", "Directory of the embedded store.", "./data", str(func(c *Config) *string { return &c.Storage.Path })},
	{"storage.embedded-cache-bytes", "Block cache of the embedded store: the uncompressed blocks it keeps in memory, so that a query over data read recently decompresses nothing again.", "67108864", i64(func(c *Config) *int64 { return &c.Storage.EmbeddedCacheBytes })},
	{"cassandra.hosts", "Comma-separated Cassandra contact points, host[:port].", "127.0.0.1:9042", list(func(c *Config) *[]string { return &c.Cassandra.Hosts })},
	{"cassandra.keyspace", "Keyspace holding the KairosDB tables.", "kairosdb", str(func(c *Config) *string { return &c.Cassandra.Keyspace })},
	{"cassandra.replication", "Replication map used when the keyspace is created.", "{'class': 'SimpleStrategy', 'replication_factor': 1}", str(func(c *Config) *string { return &c.Cassandra.Replication })},
	{"cassandra.write-consistency", "Consistency level of writes.", "QUORUM", str(func(c *Config) *string { return &c.Cassandra.WriteConsistency })},
	{"cassandra.read-consistency", "Consistency level of reads, deletes and schema statements (as in KairosDB).", "ONE", str(func(c *Config) *string { return &c.Cassandra.ReadConsistency })},
	{"cassandra.local-dc", "Local datacenter for DC-aware routing; empty means round robin over all hosts.", "", str(func(c *Config) *string { return &c.Cassandra.LocalDC })},
	{"cassandra.username", "Username for PasswordAuthenticator; empty means no authentication.", "", str(func(c *Config) *string { return &c.Cassandra.Username })},
	{"cassandra.password-file", "File holding the Cassandra password (never passed on the command line).", "", str(func(c *Config) *string { return &c.Cassandra.PasswordFile })},
	{"cassandra.tls.ca-file", "CA certificate to verify Cassandra nodes; setting any TLS file enables TLS.", "", str(func(c *Config) *string { return &c.Cassandra.TLS.CAFile })},
	{"cassandra.tls.cert-file", "Client certificate for TLS to Cassandra.", "", str(func(c *Config) *string { return &c.Cassandra.TLS.CertFile })},
	{"cassandra.tls.key-file", "Client key for TLS to Cassandra.", "", str(func(c *Config) *string { return &c.Cassandra.TLS.KeyFile })},
	{"cassandra.timeout", "Timeout of one Cassandra request.", "10s", dur(func(c *Config) *model.Duration { return &c.Cassandra.Timeout })},
	{"cassandra.connect-timeout", "Timeout of establishing a connection to a Cassandra node.", "5s", dur(func(c *Config) *model.Duration { return &c.Cassandra.ConnectTimeout })},
	{"cassandra.max-in-flight-requests", "Cassandra requests (statements or batches) the process has outstanding at once, all writes, deletes and remote-write requests together: the ceiling of an adaptive limit that overload lowers.", "128", integer(func(c *Config) *int { return &c.Cassandra.MaxInFlightRequests })},
	{"cassandra.slow-request", "A Cassandra request slower than this, like one failing with a timeout or overload error, halves the adaptive in-flight limit; 0 means only errors do.", "1s", dur(func(c *Config) *model.Duration { return &c.Cassandra.SlowRequest })},
	{"cassandra.queue-timeout", "How long a Cassandra request waits for a slot under the in-flight limit before its remote write is answered 503.", "5s", dur(func(c *Config) *model.Duration { return &c.Cassandra.QueueTimeout })},
	{"cassandra.reconnect-interval", "How often the driver tries again to connect to a Cassandra node it marked down.", "1s", dur(func(c *Config) *model.Duration { return &c.Cassandra.ReconnectInterval })},
	{"kairosdb.datapoint-ttl", "Time to live of stored samples (KairosDB datapoint_ttl); 0 keeps them forever.", "0s", dur(func(c *Config) *model.Duration { return &c.KairosDB.DatapointTTL })},
	{"kairosdb.tag-indexed-metrics", "Comma-separated KairosDB metric names (with --kairosdb.metric-prefix) whose rows also go to tag_indexed_row_keys, as KairosDB's tag_indexed_row_key_lookup_metrics; * for all.", "", list(func(c *Config) *[]string { return &c.KairosDB.TagIndexedMetrics })},
	{"kairosdb.row-width", "Row width of a new keyspace; must match an existing keyspace's spec table, or the adapter refuses to start.", "3w", dur(func(c *Config) *model.Duration { return &c.KairosDB.RowWidth })},
	{"kairosdb.row-time-unit", "Column time unit of a new keyspace, MILLISECONDS or SECONDS; must match an existing keyspace's spec table (LEGACY keyspaces count as MILLISECONDS).", "MILLISECONDS", str(func(c *Config) *string { return &c.KairosDB.RowTimeUnit })},
	{"kairosdb.metric-prefix", "Prefix added to every KairosDB metric name written, and required of every name read.", "", str(func(c *Config) *string { return &c.KairosDB.MetricPrefix })},
	{"kairosdb.index-cache-size", "Series, series rows and metric rows remembered per cache, so labels are translated and index rows written once per process.", "50000", integer(func(c *Config) *int { return &c.KairosDB.IndexCacheSize })},
	{"kairosdb.index-cache-ttl", "How long the adapter trusts that an index row it wrote still exists (not a Cassandra TTL): an index entry another writer deleted is written again at most this long after, with the series' next sample. Every cache entry expires this long after it was added.", "5m", dur(func(c *Config) *model.Duration { return &c.KairosDB.IndexCacheTTL })},
	{"kairosdb.row-keys-cache-bytes", "Memory for row_keys listings kept in memory, so that a selective query on a metric with many series does not list them all again (each listing expires after --kairosdb.index-cache-ttl; candidates are checked against row_keys before use); 0 keeps none.", "536870912", i64(func(c *Config) *int64 { return &c.KairosDB.RowKeysCacheBytes })},
	{"query.max-metrics", "Most metric names one query may touch, and the metrics the web explorer counts without metric= (truncated beyond, with a warning); 0 means no limit.", "1000", integer(func(c *Config) *int { return &c.Query.MaxMetrics })},
	{"query.max-series", "Most series one remote-read query may return; 0 means no limit.", "0", integer(func(c *Config) *int { return &c.Query.MaxSeries })},
	{"query.max-samples", "Most samples one query may load from the store, counted by the store as it reads: a remote-read query (400 beyond), or the selectors of a PromQL query of the query API all together, and what its engine holds at once, as Prometheus's flag (422 execution beyond either, Prometheus's answer); 0 means no limit.", "50000000", integer(func(c *Config) *int { return &c.Query.MaxSamples })},
	{"query.timeout", "Maximum time one PromQL query of the query API may take (503 timeout beyond).", "2m", dur(func(c *Config) *model.Duration { return &c.Query.Timeout })},
	{"query.lookback-delta", "How far back PromQL looks for the latest sample of a series at an evaluation time.", "5m", dur(func(c *Config) *model.Duration { return &c.Query.LookbackDelta })},
	{"query.max-source-resolution", "Default of the query API's max_source_resolution parameter: auto reads rollups at a resolution of at most a fifth of the step, or coarser where their buckets fit every window the query evaluates; a resolution (5m, 1h, 6h) reads at most that one; raw (or 0) never.", "auto", str(func(c *Config) *string { return &c.Query.MaxSourceResolution })},
	{"query.max-concurrency", "PromQL queries of the query API evaluated at once; more wait for a slot.", "20", integer(func(c *Config) *int { return &c.Query.MaxConcurrency })},
	{"query.max-length", "Longest PromQL expression the query API accepts, in bytes (400 bad_data beyond).", "131072", integer(func(c *Config) *int { return &c.Query.MaxLength })},
	{"query.max-depth", "Deepest a PromQL expression may nest: brackets, and operators and function calls in its syntax tree (400 bad_data beyond).", "200", integer(func(c *Config) *int { return &c.Query.MaxDepth })},
	{"query.max-subquery-steps", "Most steps the subqueries of one PromQL query may evaluate together (400 bad_data beyond): the engine allocates per step, whatever the data.", "1000000", integer(func(c *Config) *int { return &c.Query.MaxSubquerySteps })},
	{"query.split-interval", "A range query of the query API is split into parts at the multiples of this since the Unix epoch (24h: UTC midnights), evaluated at once; 0 turns splitting off.", "24h", dur(func(c *Config) *model.Duration { return &c.Query.SplitInterval })},
	{"query.parallelism", "Parts and shards of one range query evaluated at once; 0 means the cores available (GOMAXPROCS).", "0", integer(func(c *Config) *int { return &c.Query.Parallelism })},
	{"query.shards", "Shards by series of a sum, min, max, count or avg over per-series functions, per part of a range query; 0 means as many as fill the cores (--query.parallelism) that a query's parts leave idle, none once its parts are as many; 1 turns sharding off.", "0", integer(func(c *Config) *int { return &c.Query.Shards })},
	{"query.results-cache-bytes", "Memory of the results cache of range queries (extents per query and part, invalidated by every write and delete through the adapter); 0 turns it off.", "134217728", i64(func(c *Config) *int64 { return &c.Query.ResultsCacheBytes })},
	{"query.results-cache-freshness", "Evaluation times more recent than this are never cached: their samples may still be arriving.", "10m", dur(func(c *Config) *model.Duration { return &c.Query.ResultsCacheFreshness })},
	{"query.results-cache-ttl", "How long a cached extent is trusted: writes and deletes through this adapter invalidate at once, this bounds how long changes by other writers (KairosDB, a second adapter) can go unseen.", "1h", dur(func(c *Config) *model.Duration { return &c.Query.ResultsCacheTTL })},
	{"query.align-steps", "Move the start and end of range queries to multiples of their step, so that more of them share cached extents; changes answers, as Mimir's step alignment does.", "false", boolean(func(c *Config) *bool { return &c.Query.AlignSteps })},
	{"rollup.resolutions", "Comma-separated resolutions the rollup job writes (each a whole number of minutes dividing 24h and the largest); empty turns the job off.", "5m,1h,6h", list(func(c *Config) *[]string { return &c.Rollup.Resolutions })},
	{"rollup.delay", "How long after a unit of the largest resolution ends the rollup job waits for late samples before rolling it up; samples later still make it roll the unit up again.", "10m", dur(func(c *Config) *model.Duration { return &c.Rollup.Delay })},
	{"rollup.retention", "Comma-separated <resolution>=<TTL> of rollup cells, counted from each bucket's end (e.g. 5m=8760h,1h=0); 0 or a resolution not named keeps them forever. Each must be 0 or at least --kairosdb.datapoint-ttl.", "", list(func(c *Config) *[]string { return &c.Rollup.Retention })},
	{"rollup.duty-cycle", "Share of time the rollup job works while it has work (backfill, catching up): after a unit that took w it pauses w*(1-d)/d, leaving the rest to ingest.", "0.25", f64(func(c *Config) *float64 { return &c.Rollup.DutyCycle })},
	{"log.level", "Only log messages at this level or above: debug, info, warn, error.", "info", str(func(c *Config) *string { return &c.Log.Level })},
	{"log.format", "Log format: logfmt or json.", "logfmt", str(func(c *Config) *string { return &c.Log.Format })},
}

// Default returns the configuration with every flag at its default.
func Default() *Config {
	c := &Config{}
	for _, f := range flags {
		if f.set != nil {
			if err := f.set(c, f.def); err != nil {
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
		if given[i] && f.set != nil {
			if err := f.set(c, *values[i]); err != nil {
				return nil, "", fmt.Errorf("invalid --%s %q: %w", f.name, *values[i], err)
			}
		}
	}
	if err := c.Validate(); err != nil {
		return nil, "", err
	}
	return c, cmd, nil
}

func str(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, s string) error { *field(c) = s; return nil }
}

func list(field func(*Config) *[]string) func(*Config, string) error {
	return func(c *Config, s string) error {
		var out []string
		for _, v := range strings.Split(s, ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
		*field(c) = out
		return nil
	}
}

func dur(field func(*Config) *model.Duration) func(*Config, string) error {
	return func(c *Config, s string) error { return field(c).Set(s) }
}

func integer(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, s string) error {
		v, err := strconv.Atoi(s)
		*field(c) = v
		return err
	}
}

func boolean(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, s string) error {
		v, err := strconv.ParseBool(s)
		*field(c) = v
		return err
	}
}

func f64(field func(*Config) *float64) func(*Config, string) error {
	return func(c *Config, s string) error {
		v, err := strconv.ParseFloat(s, 64)
		*field(c) = v
		return err
	}
}

func i64(field func(*Config) *int64) func(*Config, string) error {
	return func(c *Config, s string) error {
		v, err := strconv.ParseInt(s, 10, 64)
		*field(c) = v
		return err
	}
}
