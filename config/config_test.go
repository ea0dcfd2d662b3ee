package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/stretchr/testify/require"
)

func parse(t *testing.T, args ...string) (*Config, error) {
	t.Helper()
	app := kingpin.New("test", "")
	app.Terminate(nil)
	return Parse(app, args)
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestDefaults(t *testing.T) {
	c, err := parse(t)
	require.NoError(t, err)
	require.Equal(t, ":9201", c.Web.ListenAddress)
	require.Equal(t, "embedded", c.Storage.Type)
	require.Equal(t, "./data", c.Storage.Path)
	require.Equal(t, Bytes(64<<20), c.Storage.EmbeddedCacheBytes)
	require.Equal(t, []string{"127.0.0.1:9042"}, c.Cassandra.Hosts)
	require.Equal(t, "kairosdb", c.Cassandra.Keyspace)
	require.Equal(t, "{'class': 'SimpleStrategy', 'replication_factor': 1}", c.Cassandra.Replication)
	require.Equal(t, "QUORUM", c.Cassandra.WriteConsistency)
	require.Equal(t, "ONE", c.Cassandra.ReadConsistency)
	require.Equal(t, 1814400000*time.Millisecond, time.Duration(c.KairosDB.RowWidth))
	require.Equal(t, "MILLISECONDS", c.KairosDB.RowTimeUnit)
	require.Zero(t, c.KairosDB.DatapointTTL)
	require.Equal(t, 5*time.Minute, time.Duration(c.KairosDB.IndexCacheTTL))
	require.Equal(t, Bytes(32<<20), c.Web.MaxRequestBytes)
	require.Equal(t, 2*time.Minute, time.Duration(c.Query.Timeout))
	require.Equal(t, 5*time.Minute, time.Duration(c.Query.LookbackDelta))
	require.Equal(t, 20, c.Query.MaxConcurrency)
	require.Equal(t, 50_000_000, c.Query.MaxSamples)
	require.Equal(t, 24*time.Hour, time.Duration(c.Query.SplitInterval))
	require.Equal(t, Bytes(128<<20), c.Query.ResultsCacheBytes)
	require.Equal(t, 10*time.Minute, time.Duration(c.Query.ResultsCacheFreshness))
	require.Equal(t, time.Hour, time.Duration(c.Query.ResultsCacheTTL))
	require.False(t, c.Query.AlignSteps)
}

func TestQueryFlags(t *testing.T) {
	p := writeFile(t, "query:\n  timeout: 30s\n  lookback_delta: 1m\n  max_concurrency: 4\n")
	c, err := parse(t, "--config.file", p, "--query.max-concurrency=8")
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, time.Duration(c.Query.Timeout))
	require.Equal(t, time.Minute, time.Duration(c.Query.LookbackDelta))
	require.Equal(t, 8, c.Query.MaxConcurrency, "the flag wins over the file")
}

func TestFileThenFlags(t *testing.T) {
	p := writeFile(t, `
web:
  listen_address: ":1234"
storage:
  type: cassandra
cassandra:
  hosts: [a:9042, b]
  keyspace: metrics
  read_consistency: LOCAL_ONE
kairosdb:
  datapoint_ttl: 30d
  tag_indexed_metrics: [cpu, mem]
  index_cache_ttl: 90s
`)
	c, err := parse(t, "--config.file", p, "--cassandra.keyspace=other", "--kairosdb.tag-indexed-metrics=x, y")
	require.NoError(t, err)
	require.Equal(t, ":1234", c.Web.ListenAddress)
	require.Equal(t, "cassandra", c.Storage.Type)
	require.Equal(t, []string{"a:9042", "b"}, c.Cassandra.Hosts)
	require.Equal(t, "other", c.Cassandra.Keyspace, "a flag given on the command line wins over the file")
	require.Equal(t, "LOCAL_ONE", c.Cassandra.ReadConsistency)
	require.Equal(t, 30*24*time.Hour, time.Duration(c.KairosDB.DatapointTTL))
	require.Equal(t, []string{"x", "y"}, c.KairosDB.TagIndexedMetrics)
	require.Equal(t, 90*time.Second, time.Duration(c.KairosDB.IndexCacheTTL))
	require.Equal(t, "QUORUM", c.Cassandra.WriteConsistency, "keys absent from the file keep their defaults")
}

func TestErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		args []string
		want string
	}{
		{name: "unknown yaml key", file: "web:\n  listen_adress: x\n", want: "field listen_adress not found"},
		{name: "unknown section", file: "cassandar: {}\n", want: "field cassandar not found"},
		{name: "bad yaml type", file: "web:\n  max_request_bytes: lots\n", want: "cannot unmarshal"},
		{name: "bad storage", args: []string{"--storage=mysql"}, want: `invalid --storage (storage.type): must be embedded or cassandra, got "mysql"`},
		{name: "bad consistency", args: []string{"--cassandra.write-consistency=SOME"}, want: "invalid --cassandra.write-consistency (cassandra.write_consistency)"},
		{name: "bad consistency in file", file: "cassandra:\n  read_consistency: MANY\n", want: "invalid --cassandra.read-consistency (cassandra.read_consistency)"},
		{name: "bad duration", args: []string{"--kairosdb.datapoint-ttl=soon"}, want: "invalid --kairosdb.datapoint-ttl"},
		{name: "ttl beyond cassandra", args: []string{"--kairosdb.datapoint-ttl=21y"}, want: "Cassandra's 20y TTL limit less the row width"},
		{name: "ttl plus row width beyond cassandra", args: []string{"--kairosdb.datapoint-ttl=7290d"}, want: "between 0 and 7279d"},
		{name: "index cache off", args: []string{"--kairosdb.index-cache-size=0"}, want: "invalid --kairosdb.index-cache-size"},
		{name: "index cache never trusted", args: []string{"--kairosdb.index-cache-ttl=0s"}, want: "invalid --kairosdb.index-cache-ttl (kairosdb.index_cache_ttl): must be positive"},
		{name: "index cache ttl in file", file: "kairosdb:\n  index_cache_ttl: 0s\n", want: "invalid --kairosdb.index-cache-ttl (kairosdb.index_cache_ttl)"},
		{name: "row width too large", args: []string{"--kairosdb.row-width=25d"}, want: "invalid --kairosdb.row-width"},
		{name: "bad unit", args: []string{"--kairosdb.row-time-unit=HOURS"}, want: "must be MILLISECONDS or SECONDS"},
		{name: "bad keyspace", args: []string{"--cassandra.keyspace=a-b"}, want: "invalid --cassandra.keyspace"},
		{name: "bad log level", args: []string{"--log.level=loud"}, want: "invalid --log.level"},
		{name: "read timeout off", args: []string{"--web.read-timeout=0s"}, want: "invalid --web.read-timeout (web.read_timeout): must be positive"},
		{name: "bad int", args: []string{"--web.max-concurrent-writes=many"}, want: "invalid --web.max-concurrent-writes"},
		{name: "unknown flag", args: []string{"--web.listen"}, want: "unknown long flag '--web.listen'"},
		{name: "query timeout off", args: []string{"--query.timeout=0s"}, want: "invalid --query.timeout (query.timeout): must be positive"},
		{name: "lookback off", file: "query:\n  lookback_delta: 0s\n", want: "invalid --query.lookback-delta (query.lookback_delta): must be positive"},
		{name: "bad source resolution", file: "query:\n  max_source_resolution: 7m\n", want: "invalid --query.max-source-resolution (query.max_source_resolution): want auto, raw (or 0), or a rollup resolution"},
		{name: "no query concurrency", args: []string{"--query.max-concurrency=0"}, want: "invalid --query.max-concurrency (query.max_concurrency): must be positive"},
		{name: "no block cache", file: "storage:\n  embedded_cache_bytes: 0\n", want: "invalid --storage.embedded-cache-bytes (storage.embedded_cache_bytes): must be positive"},
		{name: "bad commit log sync", args: []string{"--storage.embedded-commitlog-sync=fsync"}, want: `invalid --storage.embedded-commitlog-sync (storage.embedded_commitlog_sync): must be batch or periodic, got "fsync"`},
		{name: "commit log sync period off", args: []string{"--storage.embedded-commitlog-sync-period=0s"}, want: "invalid --storage.embedded-commitlog-sync-period (storage.embedded_commitlog_sync_period): must be positive"},
		{name: "negative commit log sync period", file: "storage:\n  embedded_commitlog_sync_period: -1s\n", want: `not a valid duration string: "-1s"`},
		{name: "commit log sync period past the bound", args: []string{"--storage.embedded-commitlog-sync-period=11m"}, want: "invalid --storage.embedded-commitlog-sync-period (storage.embedded_commitlog_sync_period): must be at most 10m, got 11m"},
		{name: "commit log sync period of 300 years", args: []string{"--storage.embedded-commitlog-sync-period=300y"}, want: "invalid --storage.embedded-commitlog-sync-period"},
		{name: "commit log sync period of 1e300", args: []string{"--storage.embedded-commitlog-sync-period=1e300s"}, want: "invalid --storage.embedded-commitlog-sync-period"},
		{name: "rollup retention past Cassandra's TTL limit", args: []string{"--rollup.retention=1h=100y"}, want: "invalid --rollup.retention (rollup.retention): 1h rollups kept 100y: must be at most 7279d"},
		{name: "rollup retention past the limit less the row width", args: []string{"--rollup.retention=1h=20y"}, want: "invalid --rollup.retention (rollup.retention): 1h rollups kept 20y: must be at most"},
		{name: "password without user", args: []string{"--cassandra.password-file=/x"}, want: "needs --cassandra.username"},
		{name: "bad rollup resolution", args: []string{"--rollup.resolutions=5m,7m"}, want: "invalid --rollup.resolutions (rollup.resolutions): rollup resolution \"7m\": want a whole number of minutes that divides 24h"},
		{name: "rollup resolution not dividing the largest", file: "rollup:\n  resolutions: [45m, 1h]\n", want: "invalid --rollup.resolutions (rollup.resolutions): rollup resolution 45m does not divide the largest, 1h"},
		{name: "bad rollup retention", args: []string{"--rollup.retention=5m:1y"}, want: "invalid --rollup.retention (rollup.retention)"},
		{name: "rollup duty cycle", args: []string{"--rollup.duty-cycle=0"}, want: "invalid --rollup.duty-cycle (rollup.duty_cycle): must be in (0, 1]"},
		{name: "negative rollup delay", args: []string{"--rollup.delay=-1m"}, want: "invalid --rollup.delay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config.file", writeFile(t, tc.file)}, args...)
			}
			_, err := parse(t, args...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestAdminAPISwitch(t *testing.T) {
	c, err := parse(t)
	require.NoError(t, err)
	require.False(t, c.Web.EnableAdminAPI)
	c, err = parse(t, "--web.enable-admin-api")
	require.NoError(t, err)
	require.True(t, c.Web.EnableAdminAPI)
	c, err = parse(t, "--config.file", writeFile(t, "web:\n  enable_admin_api: true\n"), "--no-web.enable-admin-api")
	require.NoError(t, err)
	require.False(t, c.Web.EnableAdminAPI, "the command line wins over the file")
	c, err = parse(t, "--config.file", writeFile(t, "web:\n  enable_admin_api: true\n"))
	require.NoError(t, err)
	require.True(t, c.Web.EnableAdminAPI)
}

func TestEmptyFileIsNoSettings(t *testing.T) {
	c, err := parse(t, "--config.file", writeFile(t, ""))
	require.NoError(t, err)
	require.Equal(t, Default(), c)
}

func TestPasswordFromFile(t *testing.T) {
	p := writeFile(t, "s3cret\n")
	c, err := parse(t, "--cassandra.username=u", "--cassandra.password-file", p)
	require.NoError(t, err)
	pw, err := c.CassandraPassword()
	require.NoError(t, err)
	require.Equal(t, "s3cret", pw)
}

// TestWebConfigFile checks --web.config.file and its YAML key web.config_file:
// empty by default, which means plain HTTP without authentication.
func TestWebConfigFile(t *testing.T) {
	c, err := parse(t)
	require.NoError(t, err)
	require.Empty(t, c.Web.ConfigFile)

	p := writeFile(t, "web:\n  config_file: /etc/kairos/web.yml\n")
	c, err = parse(t, "--config.file", p)
	require.NoError(t, err)
	require.Equal(t, "/etc/kairos/web.yml", c.Web.ConfigFile)

	c, err = parse(t, "--config.file", p, "--web.config.file=other.yml")
	require.NoError(t, err)
	require.Equal(t, "other.yml", c.Web.ConfigFile)
}

// TestRowTimeUnitAnyCase: validation accepts the unit in any case, so the
// store must get it as the spec table spells it, or "seconds" would run as
// MILLISECONDS.
func TestRowTimeUnitAnyCase(t *testing.T) {
	for _, in := range []string{"seconds", "Seconds", "SECONDS"} {
		c, err := parse(t, "--kairosdb.row-time-unit="+in, "--kairosdb.row-width=1h")
		require.NoError(t, err)
		require.Equal(t, "SECONDS", c.KairosDB.RowTimeUnit, in)
	}
	c, err := parse(t, "--config.file", writeFile(t, "kairosdb:\n  row_time_unit: milliseconds\n"))
	require.NoError(t, err)
	require.Equal(t, "MILLISECONDS", c.KairosDB.RowTimeUnit)
}
