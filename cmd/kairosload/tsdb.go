package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
)

// runTSDB writes exactly the samples that write --requests=N with the same
// shape sends into Prometheus TSDB blocks under dir, compacted as far as
// Prometheus compacts them (blocks of at most blockMillis, aligned to
// multiples of it, as its compactor aligns them), and prints their bytes:
// the Prometheus side of the bytes-per-sample comparison (BENCHMARKS.md,
// issue #31) without a Prometheus whose head would refuse a year of old
// samples.
func runTSDB(ctx context.Context, sh shape, dir string, blockMillis int64, logger *slog.Logger) error {
	if blockMillis <= 0 {
		return errors.New("--block must be positive")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ls := sh.allLabels()
	first, last := sh.startMs, sh.timestamp((sh.requests-1)/sh.requestsPerRound(), sh.samplesPerSeries-1)
	// Floored, so that a start before 1970 is in its block too.
	from := first - (first%blockMillis+blockMillis)%blockMillis
	if blocks := (last-from)/blockMillis + 1; blocks > maxBlocks {
		return fmt.Errorf("--block %dms cuts the run's %dms into %d blocks, more than %d", blockMillis, last-first, blocks, maxBlocks)
	}
	samples := 0
	t0 := time.Now()
	for lo := from; lo <= last; lo += blockMillis {
		n, err := writeBlock(ctx, sh, ls, dir, lo, lo+blockMillis, blockMillis, logger)
		if err != nil {
			return err
		}
		samples += n
	}
	var size int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			size += info.Size()
		}
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("RESULT mode=tsdb samples=%d bytes=%d bytes_per_sample=%.3f elapsed_s=%.1f\n",
		samples, size, float64(size)/float64(max(samples, 1)), time.Since(t0).Seconds())
	return nil
}

// maxBlocks bounds the blocks one run writes: each is a head and a
// directory of its own.
const maxBlocks = 10_000

// writeBlock writes the samples in [lo, hi) as one block and returns how
// many there were. The head takes them in time order across all series:
// it refuses a sample older than half a block before its newest.
func writeBlock(ctx context.Context, sh shape, ls []labels.Labels, dir string, lo, hi, blockMillis int64, logger *slog.Logger) (n int, err error) {
	w, err := tsdb.NewBlockWriter(logger, dir, blockMillis)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, w.Close()) }()
	rpr := sh.requestsPerRound()
	for round := 0; round*rpr < sh.requests && sh.timestamp(round, 0) < hi; round++ {
		app := w.Appender(ctx)
		for k := range sh.samplesPerSeries {
			ts := sh.timestamp(round, k)
			if ts < lo || ts >= hi {
				continue
			}
			for i := range ls {
				if round*rpr+i/sh.seriesPerRequest >= sh.requests {
					break
				}
				if _, err := app.Append(0, ls[i], ts, value(i, round*sh.samplesPerSeries+k)); err != nil {
					return n, errors.Join(err, app.Rollback())
				}
				n++
			}
		}
		if err := app.Commit(); err != nil {
			return n, err
		}
	}
	if n == 0 {
		return 0, nil
	}
	_, err = w.Flush(ctx)
	return n, err
}
