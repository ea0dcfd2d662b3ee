package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kairos-remote/kairos-adapter/kairosstore/pebblekv"
)

// runCompact compacts the embedded store in dir and prints one RESULT line
// with the size of its sstables after: what bytes per sample are counted
// from (BENCHMARKS.md, issue #31), with the store's own merge operator and
// compression, which only the engine knows.
func runCompact(ctx context.Context, dir string) (err error) {
	eng, err := pebblekv.Open(dir, pebblekv.Options{}, nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Close()) }()
	t0 := time.Now()
	size, err := eng.Compact(ctx)
	if err != nil {
		return fmt.Errorf("compact %s: %w", dir, err)
	}
	fmt.Printf("RESULT mode=compact sstable_bytes=%d elapsed_s=%.1f\n", size, time.Since(t0).Seconds())
	return nil
}
