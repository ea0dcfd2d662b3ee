package index

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"golang.org/x/sync/errgroup"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/translate"
)

// findSeries runs phases 0 to 2 for metrics over [start, end] and returns
// the series found, sorted by labels.
func (x *Index) findSeries(ctx context.Context, metrics []string, plan translate.Plan, start, end int64, useKept bool) ([]*Series, error) {
	start = max(start, x.opts.MinTime)
	f := &finder{byID: map[string]*Series{}, seen: map[string]bool{}, mapper: x.opts.Mapper, useKept: useKept}
	defer func() { x.m.ScannedPerQuery.Observe(float64(f.scanned.Load())) }()
	// Every metric's phases 0 and 1, and phase 2 of each of its row
	// windows, run concurrently: a selector over a hundred metric names
	// would otherwise wait for three index reads per name in turn before
	// the first row key. Phase-2 reads have a group of their own, so that
	// a metric waiting for room there never holds room its row windows
	// need.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var perMetric, perRow errgroup.Group
	perMetric.SetLimit(x.opts.ReadConcurrency)
	perRow.SetLimit(x.opts.ReadConcurrency)
	early := make(chan struct{}, x.opts.ReadConcurrency) // phases 0 and 1 in flight
	// The first error stops the others; theirs are then the cancellation,
	// so the first is the one reported (context.Cause). A panic is such an
	// error: these goroutines are not the request's, whose server would
	// recover it, so unrecovered it would end the process.
	failing := func(fn func() error) func() error {
		return func() (err error) {
			defer func() {
				if err != nil {
					cancel(err)
				}
			}()
			defer recovered.Into(&err, x.opts.Logger, "an index read")
			return fn()
		}
	}
	for _, metric := range metrics {
		perMetric.Go(failing(func() error {
			// Phase 0 and phase 1 of the metric's own index and of the
			// side index of its non-finite values (NonFiniteSuffix) do not
			// wait for each other: a Select waited for three round trips
			// in a row before its first row_keys read, which the panels of
			// a year then waited for too (BENCHMARKS.md, "Issue #30 on
			// Cassandra: where a refresh's time goes"). They share one
			// bound of ReadConcurrency reads, and a row window's phase 2
			// starts as soon as its row time is known.
			var phases errgroup.Group
			phases.Go(failing(func() error {
				early <- struct{}{}
				defer func() { <-early }()
				return x.legacyRowKeys(ctx, metric, plan, start, end, func(k codec.RowKey, raw []byte) {
					f.add(metric, k.Tags, Row{Key: slices.Clone(raw), RowTime: k.RowTime, DataType: k.DataType, Legacy: k.DataType == codec.TypeLegacy}, -1)
				})
			}))
			for _, indexMetric := range []string{metric, metric + NonFiniteSuffix} {
				phases.Go(failing(func() error {
					rowTimes, err := func() ([]int64, error) {
						early <- struct{}{}
						defer func() { <-early }() // also after a panic
						return x.rowTimes(ctx, indexMetric, start, end)
					}()
					if err != nil {
						return err
					}
					for _, rt := range rowTimes {
						perRow.Go(failing(func() error { return x.rowKeysOf(ctx, f, metric, indexMetric, rt, plan) }))
					}
					return nil
				}))
			}
			// Every perRow.Go of this metric is made before it returns,
			// so before perRow.Wait begins.
			return phases.Wait()
		}))
	}
	if cmp.Or(perMetric.Wait(), perRow.Wait()) != nil {
		return nil, context.Cause(ctx)
	}
	out := make([]*Series, 0, len(f.byID))
	for _, sr := range f.byID {
		out = append(out, sr)
	}
	sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].Labels, out[j].Labels) < 0 })
	return out, nil
}

// lowestRowTime is the lowest row time that can hold a sample at or after
// start. For negative times KairosDB's row time is not a floor (§3.1), so a
// sample at start or later can sit in a row up to one width below
// RowTime(start); KairosDB itself misses those (§7.3), this reader does not.
func (x *Index) lowestRowTime(start int64) int64 {
	spec := x.opts.Spec
	lo := spec.RowTime(start)
	if start < 0 && start-(spec.Width-1) < lo {
		lo = start - (spec.Width - 1)
	}
	return lo
}

// rowKeysOf runs phase 2 for one row time (§7.4, §6.3) of metric's rows
// indexed under indexMetric.
func (x *Index) rowKeysOf(ctx context.Context, f *finder, metric, indexMetric string, rt int64, plan translate.Plan) error {
	t0 := time.Now()
	defer x.observe("row_keys", t0)
	side := indexMetric != metric
	var scanned, selected int
	defer func() {
		f.scanned.Add(int64(scanned))
		x.m.Scanned.WithLabelValues(metric).Add(float64(scanned))
		x.m.Selected.WithLabelValues(metric).Add(float64(selected))
	}()
	// keep takes an entry that passed the matchers, its tags sorted and
	// its own to hold: a kept listing's entries are (keptRowKeys), so they
	// are not copied again for every part of a query.
	keep := func(dataType string, tags []codec.Tag) {
		// A side index holds only null rows; anything else in that
		// partition belongs to a real metric of that name.
		if side && dataType != codec.TypeNull {
			return
		}
		selected++
		// The row key is encoded once; the series' id is a slice of it.
		key := codec.AppendRowKey(nil, codec.RowKey{Metric: metric, RowTime: rt, DataType: dataType, Tags: tags})
		r := Row{Key: key, RowTime: rt, DataType: dataType}
		if side {
			r.IndexMetric = indexMetric
		}
		f.add(metric, tags, r, tagsAt(metric, dataType))
	}
	// add is keep for an entry whose strings may alias the engine's
	// buffers.
	add := func(dataType string, tags []codec.Tag) {
		if side && dataType != codec.TypeNull {
			return
		}
		tags = cloneTags(tags)
		codec.SortTags(tags)
		keep(strings.Clone(dataType), tags)
	}
	list := func(dataType string, tags []codec.Tag) {
		scanned++
		// Matching before copying anything: most entries of a large
		// partition are not wanted.
		if plan.MatchTags(tags) {
			add(dataType, tags)
		}
	}
	if !side {
		if name, values, ok := x.indexedLookup(metric, plan); ok {
			// KairosDB reads only tag_indexed_row_keys for such a query;
			// its rows are a subset of row_keys, one query per value of
			// the chosen tag (§6.3).
			for _, v := range values {
				if err := x.r.TagIndexedRowKeys(ctx, metric, rt, codec.SingleTagPair(codec.Tag{Name: name, Value: v}), func(dataType string, tags []codec.Tag) error {
					list(dataType, tags)
					return nil
				}); err != nil {
					return fmt.Errorf("read tag_indexed_row_keys of %q: %w", metric, err)
				}
			}
			return nil
		}
	}
	build := true
	if f.useKept {
		n, res, err := x.keptRowKeys(ctx, indexMetric, rt, plan, keep)
		scanned += n
		if err != nil || res == keptHit {
			return err
		}
		// A listing held but too many candidates to check one by one:
		// list, and keep the listing held.
		build = res == keptMiss
	}
	var b *listingBuilder
	if build {
		b = x.startFill(indexMetric, rt)
	}
	return x.listRowKeys(ctx, indexMetric, rt, b, list)
}

// rowTimes runs phase 1 (§7.3): the row times of metric's index from the
// lowest one that can hold a sample at or after start up to end.
func (x *Index) rowTimes(ctx context.Context, metric string, start, end int64) ([]int64, error) {
	var rowTimes []int64
	t0 := time.Now()
	err := x.r.RowTimes(ctx, metric, x.lowestRowTime(start), end, func(rt int64) error {
		rowTimes = append(rowTimes, rt)
		return nil
	})
	x.observe("row_times", t0)
	if err != nil {
		return nil, fmt.Errorf("read row_key_time_index of %q: %w", metric, err)
	}
	return rowTimes, nil
}

// listRowKeys lists the row_keys partition (metric, rt) into fn, handing
// every entry to b as well when the listing is to be kept (b from
// startFill; nil keeps nothing).
func (x *Index) listRowKeys(ctx context.Context, metric string, rt int64, b *listingBuilder, fn func(dataType string, tags []codec.Tag)) error {
	complete := false
	// Deferred, so that a panic below (recovered by the request's server)
	// still ends the fill: an unended one would hold its building slot and
	// keep every later listing of the partition from being built.
	defer func() { x.endFill(b, complete) }()
	err := x.r.RowKeys(ctx, metric, rt, func(dataType string, tags []codec.Tag) error {
		if b != nil {
			b.add(dataType, tags)
		}
		fn(dataType, tags)
		return nil
	})
	complete = err == nil
	if err != nil {
		return fmt.Errorf("read row_keys of %q: %w", metric, err)
	}
	return nil
}

// tagsAt is where the tags start in a row key of metric and dataType
// (codec.AppendRowKey, §2.1): after the name, its NUL and the row time,
// and, unless the key is type-less, the type marker, length and name.
func tagsAt(metric, dataType string) int {
	if dataType == codec.TypeLegacy {
		return len(metric) + 1 + 8
	}
	return len(metric) + 1 + 8 + 2 + len(dataType)
}

func cloneTags(tags []codec.Tag) []codec.Tag {
	out := make([]codec.Tag, len(tags))
	for i, t := range tags {
		out[i] = codec.Tag{Name: strings.Clone(t.Name), Value: strings.Clone(t.Value)}
	}
	return out
}

// TagIndexedNames is the tag names whose pairs go to tag_indexed_row_keys
// for metric (§6.1): ok false when the metric is not tag-indexed, all
// true when every tag is.
func TagIndexedNames(tagIndexed map[string][]string, metric string) (names []string, all, ok bool) {
	names, ok = tagIndexed[metric]
	if !ok {
		if names, ok = tagIndexed["*"]; !ok {
			return nil, false, false
		}
	}
	return names, len(names) == 0 || len(names) == 1 && names[0] == "*", true
}

// indexedLookup picks the tag whose literal values narrow the lookup through
// tag_indexed_row_keys, for metrics configured as tag-indexed: the pinned
// tag with the fewest values.
func (x *Index) indexedLookup(metric string, plan translate.Plan) (string, []string, bool) {
	names, all, ok := TagIndexedNames(x.opts.TagIndexed, metric)
	if !ok {
		return "", nil, false
	}
	best, bestValues := "", []string(nil)
	for name, values := range plan.TagValues {
		if len(values) == 0 || !all && !slices.Contains(names, name) {
			continue
		}
		if bestValues == nil || len(values) < len(bestValues) || len(values) == len(bestValues) && name < best {
			best, bestValues = name, values
		}
	}
	return best, bestValues, bestValues != nil
}

// legacyRowKeys runs phase 0 (§7.2): KairosDB still consults the legacy
// row_key_index, whose cells are whole row keys. fn takes each key that
// passes the matchers, parsed with its tags sorted, and raw (valid during
// the call).
func (x *Index) legacyRowKeys(ctx context.Context, metric string, plan translate.Plan, start, end int64, fn func(k codec.RowKey, raw []byte)) error {
	ranges := [][2]int64{{start, end}}
	if start < 0 && end >= 0 {
		// Negative row times sort after positive ones as unsigned bytes.
		ranges = [][2]int64{{start, -1}, {0, end}}
	}
	for _, r := range ranges {
		lo := codec.AppendLegacyIndexBound(nil, metric, x.lowestRowTime(r[0]), false)
		hi := codec.AppendLegacyIndexBound(nil, metric, x.opts.Spec.RowTime(r[1]), true)
		err := x.r.LegacyRowKeys(ctx, metric, lo, hi, func(raw []byte) error {
			k, err := codec.ParseRowKey(raw)
			if err != nil || k.Metric != metric {
				x.m.Skipped.WithLabelValues("unparsable_row_key").Inc()
				return nil
			}
			codec.SortTags(k.Tags)
			if plan.MatchTags(k.Tags) {
				fn(k, raw)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read row_key_index of %q: %w", metric, err)
		}
	}
	return nil
}

// finder collects the row keys of phases 0-2, grouped by series.
type finder struct {
	mu     sync.Mutex
	byID   map[string]*Series
	seen   map[string]bool
	mapper translate.Mapper
	b      labels.ScratchBuilder
	id     []byte // scratch for a series' id
	// useKept lets phase 2 take row_keys listings from Index.listings.
	// A delete does not: it must find entries other writers just added.
	useKept bool
	// scanned counts the index entries phase 2 looked at, read or kept.
	scanned atomic.Int64
}

// add takes one selected row of the series of metric and tags (sorted,
// owned by the row). tagsAt is where the tags start in r.Key, or -1 when
// the key does not encode them as AppendRowKey would (a key read from
// row_key_index).
func (f *finder) add(metric string, tags []codec.Tag, r Row, tagsAt int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen[string(r.Key)] {
		return
	}
	f.seen[string(r.Key)] = true
	// A series' id is its metric and encoded tags: the row key without
	// the row time and type.
	if tagsAt >= 0 {
		f.id = append(append(append(f.id[:0], metric...), 0), r.Key[tagsAt:]...)
	} else {
		k := codec.AppendRowKey(f.id[:0], codec.RowKey{Metric: metric, DataType: codec.TypeLegacy, Tags: tags})
		f.id = append(k[:len(metric)+1], k[len(metric)+1+8:]...)
	}
	sr := f.byID[string(f.id)]
	if sr == nil {
		lset, ok := f.mapper.Join(metric, tags, &f.b)
		if !ok {
			return
		}
		sr = &Series{Labels: lset}
		f.byID[string(f.id)] = sr
	}
	sr.Rows = append(sr.Rows, r)
}
