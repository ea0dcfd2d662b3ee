package config

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// TestByteFlags: the byte flags and their YAML keys take units, a plain
// number still means bytes (the operator contract before units), and what
// no int64 holds is refused with a message naming the flag, never wrapped
// around to a negative size.
func TestByteFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		args    []string
		want    Bytes
		wantErr string
	}{
		{name: "unit", args: []string{"--web.max-request-bytes=16MiB"}, want: 16 << 20},
		{name: "old unit spelling", args: []string{"--web.max-request-bytes=16MB"}, want: 16 << 20},
		{name: "plain number is bytes", args: []string{"--web.max-request-bytes=1000"}, want: 1000},
		{name: "yaml number is bytes", file: "web:\n  max_request_bytes: 2000\n", want: 2000},
		{name: "yaml unit", file: "web:\n  max_request_bytes: 3KiB\n", want: 3 << 10},
		{name: "compound", args: []string{"--web.max-request-bytes=1MiB512KiB"}, want: 1<<20 + 512<<10},
		{name: "largest", args: []string{"--web.max-request-bytes=9223372036854775807"}, want: 1<<63 - 1},
		{name: "zero", args: []string{"--web.max-request-bytes=0"}, wantErr: "invalid --web.max-request-bytes (web.max_request_bytes): must be positive, got 0"},
		{name: "negative", args: []string{"--web.max-request-bytes=-1KiB"}, wantErr: "invalid --web.max-request-bytes (web.max_request_bytes): must be positive, got -1KiB"},
		{name: "wraps a float64", args: []string{"--web.max-request-bytes=8EiB"}, wantErr: `invalid --web.max-request-bytes "8EiB": "8EiB" is larger than 8EiB`},
		{name: "beyond int64", args: []string{"--web.max-request-bytes=16EiB"}, wantErr: "invalid --web.max-request-bytes"},
		{name: "beyond int64, plain", args: []string{"--web.max-request-bytes=9223372036854775808"}, wantErr: "invalid --web.max-request-bytes"},
		{name: "exponent", args: []string{"--web.max-request-bytes=1e300"}, wantErr: `"1e300" is not a size such as 512MiB`},
		{name: "NaN", args: []string{"--web.max-request-bytes=NaN"}, wantErr: "invalid --web.max-request-bytes"},
		{name: "Inf", file: "web:\n  max_request_bytes: .inf\n", wantErr: `cannot unmarshal ".inf" is not a size`},
		{name: "SI unit", args: []string{"--web.max-request-bytes=1kB"}, wantErr: "invalid --web.max-request-bytes"},
		{name: "yaml list", file: "web:\n  max_request_bytes: [1]\n", wantErr: "cannot unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config.file", writeFile(t, tc.file)}, args...)
			}
			c, err := parse(t, args...)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, c.Web.MaxRequestBytes)
		})
	}
}

// TestBytesRoundTrip: the configuration the status page shows as YAML reads
// back as the same configuration.
func TestBytesRoundTrip(t *testing.T) {
	c := Default()
	c.Query.ResultsCacheBytes = 0
	c.Web.MaxRequestBytes = 1<<20 + 1
	out, err := yaml.Marshal(c)
	require.NoError(t, err)
	require.Contains(t, string(out), "max_request_bytes: 1MiB1B")
	require.Contains(t, string(out), "row_keys_cache_bytes: 512MiB")
	got := &Config{}
	require.NoError(t, yaml.Unmarshal(out, got))
	require.Equal(t, c.Web, got.Web)
	require.Equal(t, c.Storage, got.Storage)
	require.Equal(t, c.KairosDB.RowKeysCacheBytes, got.KairosDB.RowKeysCacheBytes)
	require.Equal(t, c.Query, got.Query)
}

// TestCacheFlagsPerOwner: each cache owner has its size and its age, set
// apart from the others'.
func TestCacheFlagsPerOwner(t *testing.T) {
	c, err := parse(t, "--kairosdb.index-cache-size=7", "--kairosdb.index-cache-ttl=1m")
	require.NoError(t, err)
	require.Equal(t, 7, c.KairosDB.IndexCacheSize)
	require.Equal(t, 200000, c.Web.WriteSeriesCacheSize, "the store's cache size leaves the write handler's")
	require.Equal(t, "5m", c.Web.WriteSeriesCacheTTL.String())
	require.Equal(t, "5m", c.KairosDB.RowKeysCacheTTL.String(), "the store's cache age leaves the listings'")

	c, err = parse(t, "--config.file", writeFile(t, "web:\n  write_series_cache_size: 9\n  write_series_cache_ttl: 2m\nkairosdb:\n  row_keys_cache_ttl: 30s\n"))
	require.NoError(t, err)
	require.Equal(t, 9, c.Web.WriteSeriesCacheSize)
	require.Equal(t, "2m", c.Web.WriteSeriesCacheTTL.String())
	require.Equal(t, "30s", c.KairosDB.RowKeysCacheTTL.String())
	require.Equal(t, 200000, c.KairosDB.IndexCacheSize)

	for _, bad := range []string{"--web.write-series-cache-size=0", "--web.write-series-cache-ttl=0s", "--kairosdb.row-keys-cache-ttl=0s"} {
		_, err := parse(t, bad)
		require.ErrorContains(t, err, "must be positive", bad)
	}
	// The store allocates per entry when it opens: a size without bound
	// crashed it there.
	for _, bad := range []string{"--web.write-series-cache-size=9223372036854775807", "--kairosdb.index-cache-size=67108865"} {
		_, err := parse(t, bad)
		require.ErrorContains(t, err, "must be at most 67108864", bad)
	}
	_, err = parse(t, "--kairosdb.index-cache-size=67108864")
	require.NoError(t, err)
	_, err = parse(t, "--query.shards=1000000000")
	require.ErrorContains(t, err, "invalid --query.shards (query.shards): must be at most 1024")
}

// TestFlagsInEffect: every flag's value in effect reads back as its flag
// would give it, the command line's, the file's or the default.
func TestFlagsInEffect(t *testing.T) {
	c, err := parse(t, "--config.file", writeFile(t, "query:\n  results_cache_bytes: 1048576\n"), "--cassandra.hosts=a,b", "--web.enable-admin-api")
	require.NoError(t, err)
	got := c.Flags()
	require.Equal(t, "1MiB", got["query.results-cache-bytes"])
	require.Equal(t, "a,b", got["cassandra.hosts"])
	require.Equal(t, "true", got["web.enable-admin-api"])
	require.Equal(t, "5m", got["kairosdb.index-cache-ttl"])
	require.Equal(t, "0.25", got["rollup.duty-cycle"])
	require.NotContains(t, got, "config.file")
	// Each reads back as the same configuration.
	again := Default()
	for _, f := range flags {
		if v, ok := got[f.name]; ok {
			require.NoError(t, f.v.set(again, v), f.name)
		}
	}
	require.Equal(t, c.Flags(), again.Flags())
}
