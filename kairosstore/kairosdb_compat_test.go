package kairosstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	ks "github.com/kairos-remote/kairos-adapter/kairosstore"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// TestReadsRowsKairosDBWroteWithCQL seeds a keyspace with the very CQL
// statements KairosDB issues (docs/kairosdb-layout.md §3.3, §5.3, with
// millisecond write timestamps §5.4), byte for byte from the specification's
// vectors, in a LEGACY-mode keyspace, including a pre-typed key that only the
// legacy row_key_index knows (§7.2, §4.8). The store must read all of it.
func TestReadsRowsKairosDBWroteWithCQL(t *testing.T) {
	addr, keyspace := cassandratest.Keyspace(t)
	ctx := context.Background()
	eng := cassandratest.Engine(t, addr, keyspace)
	require.NoError(t, eng.Setup(ctx))

	session := cassandratest.Session(t, keyspace)
	ms := time.Now().UnixMilli()
	for _, stmt := range []string{
		// §3.3: literal statements; a keyspace that had data before the
		// spec table existed is LEGACY.
		`INSERT INTO spec (spec_type, name, value) VALUES ('cluster_config', 'row_time_unit', 'LEGACY')`,
		`INSERT INTO spec (spec_type, name, value) VALUES ('cluster_config', 'row_width', '1814400000')`,
		// EX1 (§2.4): sys.cpu{host=server1} kairos_long 123 at 1359788400000,
		// LEGACY column 5fb38300 (Appendix A).
		`INSERT INTO data_points (key, column1, value) VALUES (0x7379732e637075000000013c69da9c00000b6b6169726f735f6c6f6e67686f73743d736572766572313a, 0x5fb38300, 0xf601) USING TTL 0 AND TIMESTAMP ?`,
		`INSERT INTO row_keys (metric, table_name, row_time, data_type, tags, mtime) VALUES ('sys.cpu', 'data_points', 1358985600000, 'kairos_long', {'host': 'server1'}, now()) USING TTL 0 AND TIMESTAMP ?`,
		`INSERT INTO row_key_time_index (metric, table_name, row_time) VALUES ('sys.cpu', 'data_points', 1358985600000) USING TTL 0 AND TIMESTAMP ?`,
		`INSERT INTO string_index (key, column1, value) VALUES (0x6d65747269635f6e616d6573, 'sys.cpu', 0x00) USING TIMESTAMP ?`,
		// A pre-typed key (Appendix A "Legacy type"), host=server2, known
		// only to row_key_index; its cells carry the value type in the
		// column's low bit (§4.8): a float 2.5 at +1 s, a stripped long 300
		// at +2 s.
		`INSERT INTO row_key_index (key, column1, value) VALUES (0x7379732e637075, 0x7379732e637075000000013c69da9c00686f73743d736572766572323a, 0x00) USING TIMESTAMP ?`,
		`INSERT INTO data_points (key, column1, value) VALUES (0x7379732e637075000000013c69da9c00686f73743d736572766572323a, 0x5fb38ad1, 0x0140200000) USING TTL 0 AND TIMESTAMP ?`,
		`INSERT INTO data_points (key, column1, value) VALUES (0x7379732e637075000000013c69da9c00686f73743d736572766572323a, 0x5fb392a0, 0x012c) USING TTL 0 AND TIMESTAMP ?`,
	} {
		var args []any
		if strings.Contains(stmt, "?") {
			args = append(args, ms) // the write timestamp
		}
		require.NoError(t, session.Query(stmt, args...).ExecContext(ctx), stmt)
	}

	s, err := ks.Open(ctx, eng, ks.Options{RowWidth: 504 * time.Hour}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, codec.Legacy, s.Spec().Unit)
	const ts = int64(1359788400000)
	require.Equal(t, []series{
		{lbl("__name__", "sys.cpu", "host", "server1"), []sample{{ts, bits(123)}}},
		{lbl("__name__", "sys.cpu", "host", "server2"), []sample{{ts + 1000, bits(2.5)}, {ts + 2000, bits(300)}}},
	}, read(t, s, ts-hour, ts+hour, eq("__name__", "sys.cpu")))
	// A selector without a metric name finds the metric through string_index.
	require.Len(t, read(t, s, ts-hour, ts+hour, eq("host", "server1")), 1)
}
