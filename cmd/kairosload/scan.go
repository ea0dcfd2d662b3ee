package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

type scanFlags struct {
	hosts             *[]string
	keyspace, metric  *string
	rowTime           *int64
	pageSize, queries *int
	decode            *bool
	timeout           *time.Duration
}

// rawColumn keeps a column's bytes as the driver read them.
type rawColumn []byte

func (r *rawColumn) UnmarshalCQL(_ gocql.TypeInfo, data []byte) error {
	*r = data
	return nil
}

// runScan lists one row_keys partition straight through the driver, the
// way the adapter's phase 2 does (same statement, page size and
// consistency ONE), and reports the time per listing: the floor of what
// an uncached read of that partition can cost. Without --decode the
// columns stay raw bytes; with it the driver builds the tags map, as the
// adapter did before it parsed the bytes itself.
func runScan(ctx context.Context, f scanFlags, logger *slog.Logger) error {
	if *f.queries < 1 {
		return errors.New("--queries must be positive")
	}
	s, err := newSession(*f.hosts, *f.keyspace, *f.timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	rowTime := *f.rowTime
	if rowTime < 0 {
		// The latest row window of the metric.
		err := s.Query(`SELECT row_time FROM row_key_time_index WHERE metric = ? AND table_name = 'data_points' ORDER BY row_time DESC LIMIT 1`, *f.metric).
			Consistency(gocql.One).ScanContext(ctx, &rowTime)
		if err != nil {
			return fmt.Errorf("find the latest row time of %q: %w", *f.metric, err)
		}
	}
	var took []time.Duration
	entries := 0
	for i := range *f.queries {
		t0 := time.Now()
		sc := s.Query(`SELECT data_type, tags FROM row_keys WHERE metric = ? AND table_name = 'data_points' AND row_time = ?`, *f.metric, rowTime).
			Consistency(gocql.One).PageSize(*f.pageSize).Idempotent(true).IterContext(ctx).Scanner()
		n := 0
		var dataType, tags rawColumn
		var m map[string]string
		for sc.Next() {
			if *f.decode {
				err = sc.Scan(&dataType, &m)
			} else {
				err = sc.Scan(&dataType, &tags)
			}
			if err != nil {
				return err
			}
			n++
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("list row_keys: %w", err)
		}
		took = append(took, time.Since(t0))
		entries = n
		logger.Info("Listed", "query", i, "entries", n, "took", took[i])
	}
	slices.Sort(took)
	fmt.Printf("RESULT mode=scan metric=%s row_time=%d entries=%d queries=%d p50_ms=%.1f min_ms=%.1f max_ms=%.1f entries_per_s=%.0f decode=%t page=%d\n",
		*f.metric, rowTime, entries, len(took), ms(took[len(took)/2]), ms(took[0]), ms(took[len(took)-1]),
		float64(entries)/took[len(took)/2].Seconds(), *f.decode, *f.pageSize)
	return nil
}
