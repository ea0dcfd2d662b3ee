package cql_test

import (
	"context"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/cassandratest"
	"github.com/kairos-remote/kairos-adapter/kairosstore/cql"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/enginetest"
)

func TestConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		addr, ks := cassandratest.Keyspace(t)
		e, err := cql.Open(t.Context(), testConfig(addr, ks), nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Close()) })
		return seeder{e, cassandratest.Session(t, ks)}
	})
}

// seeder adds enginetest.LegacySeeder: the engine never writes row_key_index
// (only KairosDB before 1.2 did), so the suite seeds it through a plain
// session, with KairosDB's millisecond timestamps (§5.4).
type seeder struct {
	*cql.Engine
	s *gocql.Session
}

const insertLegacy = `INSERT INTO row_key_index (key, column1, value) VALUES (?, ?, 0x00)`

func (s seeder) SeedLegacyRowKeys(ctx context.Context, writeTime int64, keys []engine.LegacyRowKey) error {
	for _, k := range keys {
		if err := s.s.Query(insertLegacy, []byte(k.Metric), k.RowKey).WithTimestamp(writeTime).ExecContext(ctx); err != nil {
			return err
		}
	}
	return nil
}
