package cql

import (
	"context"
	"encoding/binary"
	"fmt"
)

// ttlProbeKey is a data_points partition no KairosDB writer makes: a row key
// begins with its metric name, which is never empty (docs/kairosdb-layout.md
// §3.1), and nothing indexes this key, so no reader ever lists it.
var ttlProbeKey = []byte("\x00kairos-adapter: TTL probe")

// CheckTTL tells whether the node accepts writes with a TTL of ttl seconds
// now. Cassandra before 5.0's storage_compatibility_mode NONE refuses any
// expiry past 2038-01-19 (CASSANDRA-14092), and the longest TTL the adapter
// writes is a setting's, so without this a long TTL would fail every write
// with a 5xx that Prometheus retries forever. Only a real write tells: a
// conditional one that does not apply is not checked. So the probe
// partition is first deleted at write time 2 and then written at write time
// 1: the cell is shadowed from the moment it lands and never visible, and
// both go at the next compaction after gc_grace_seconds.
func (e *Engine) CheckTTL(ctx context.Context, ttl int32) error {
	if ttl <= 0 {
		return nil
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	if err := s.Query(deleteRow, ttlProbeKey).Consistency(e.set.write).WithTimestamp(2).Idempotent(true).ExecContext(ctx); err != nil {
		return fmt.Errorf("cassandra: TTL probe: %w", classify(err))
	}
	column := binary.BigEndian.AppendUint32(nil, 0)
	err = s.Query(insertDataPoint, ttlProbeKey, column, []byte{}, ttl, int64(1)).Consistency(e.set.write).Idempotent(true).ExecContext(ctx)
	if err != nil {
		return fmt.Errorf("cassandra refuses a TTL of %d seconds: %w", ttl, classify(err))
	}
	return nil
}
