package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInFlightLimits covers the write byte budget and the Cassandra
// in-flight limit: defaults, flag, YAML key, and the errors naming both.
func TestInFlightLimits(t *testing.T) {
	for _, tc := range []struct {
		name               string
		file               string
		args               []string
		wantBytes          Bytes
		wantCassandra      int
		wantErr, wantErrIn string
	}{
		{name: "defaults", wantBytes: 1 << 30, wantCassandra: 128},
		{name: "flags", args: []string{"--web.max-write-bytes-in-flight=1000", "--cassandra.max-in-flight-requests=7"}, wantBytes: 1000, wantCassandra: 7},
		{name: "yaml", file: "web:\n  max_write_bytes_in_flight: 2000\ncassandra:\n  max_in_flight_requests: 9\n", wantBytes: 2000, wantCassandra: 9},
		{name: "zero budget", args: []string{"--web.max-write-bytes-in-flight=0"}, wantErr: "invalid --web.max-write-bytes-in-flight (web.max_write_bytes_in_flight): must be positive"},
		{name: "zero cassandra limit", file: "cassandra:\n  max_in_flight_requests: 0\n", wantErr: "invalid --cassandra.max-in-flight-requests (cassandra.max_in_flight_requests): must be positive"},
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
			require.Equal(t, tc.wantBytes, c.Web.MaxWriteBytesInFlight)
			require.Equal(t, tc.wantCassandra, c.Cassandra.MaxInFlightRequests)
		})
	}
}
