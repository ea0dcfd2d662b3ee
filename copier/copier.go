// Package copier copies a store from one engine to another row by row in
// the layout's own tables (engine.Raw): every table's rows with their write
// times and remaining TTLs, so that the destination holds what the source
// would have held had it been written there. It is the work of
// `kairos-adapter copy`.
//
// A copy is resumable: the position of each table is recorded in the
// destination's service_index (service MarkService, service key the source's
// name) once every row before it is stored, and a rerun continues there.
// Loads are idempotent (same rows, same write times), so the rows between
// the last mark and a crash are loaded twice, harmlessly, and a second run
// over a copy that finished changes nothing.
package copier

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// MarkService is the service_index service of the copy's marks in the
// destination. Rows of this service in the source are not copied: they are
// the marks of another copy into the source.
const MarkService = "kairos_copy"

// doneMark is the mark of a table copied whole.
const doneMark = "done"

// Store is what a copy reads and writes: an engine that is also Raw.
type Store interface {
	engine.Engine
	engine.Raw
}

// Progress is told what the copy does; *importer.Progress is one.
type Progress interface {
	Plan(units int, samples int64)
	AddSeries(n int64)
	AddSamples(n int64)
	UnitDone(skipped bool)
	SetFraction(f float64)
}

// Estimator is a source that can tell what share of a table lies before a
// resume position, for the time left in the progress report.
type Estimator interface {
	ScanFraction(table engine.Table, pos []byte) float64
}

// Options configure a copy.
type Options struct {
	// Source names the source in the destination's marks, so that copies
	// from two sources keep apart marks.
	Source string
	// Batch is the most rows of one load.
	Batch int
	// Rate is the most rows per second loaded; 0 means no limit.
	Rate float64
	// Retries is how many times in a row a table's copy is started again
	// from its last mark after an error, after 1 s, 2 s, 4 s ... 30 s.
	Retries int
	// MarkEvery is how often a table's position is recorded; 0 means 1 s.
	MarkEvery time.Duration
	// Progress, if not nil, is told how far the copy went.
	Progress Progress
}

// Summary is what one run did.
type Summary struct {
	Tables  int   // copied in this run
	Skipped int   // recorded as done by a run before
	Rows    int64 // rows loaded, data_points cells included
	Cells   int64 // data_points cells loaded
}

// spec names whose values must agree between source and destination: a
// row key's row time and a cell's column mean nothing under another width
// or unit (docs/kairosdb-layout.md §3).
var specNames = []string{"row_time_unit", "row_width"}

// CheckSpec refuses a copy between stores whose row width or time unit
// differ. A destination without a spec takes the source's.
func CheckSpec(ctx context.Context, src, dst engine.Engine) error {
	for _, name := range specNames {
		sv, sok, err := src.Spec(ctx, name)
		if err != nil {
			return fmt.Errorf("read the source's spec %s: %w", name, err)
		}
		dv, dok, err := dst.Spec(ctx, name)
		if err != nil {
			return fmt.Errorf("read the destination's spec %s: %w", name, err)
		}
		if sok && dok && sv != dv {
			return fmt.Errorf("the source's %s is %q and the destination's %q: cells would land in other rows; copy into an empty store or one with the same spec", name, sv, dv)
		}
	}
	return nil
}

// Copy copies every table of src into dst, table after table, each from
// its recorded position on. It returns when all is copied, or with the
// error that stopped it; what was recorded stays recorded.
func Copy(ctx context.Context, src, dst Store, o Options, log *slog.Logger) (Summary, error) {
	var sum Summary
	if o.Batch < 1 {
		return sum, fmt.Errorf("batch %d: want at least one row", o.Batch)
	}
	if o.MarkEvery <= 0 {
		o.MarkEvery = time.Second
	}
	if err := CheckSpec(ctx, src, dst); err != nil {
		return sum, err
	}
	if o.Progress != nil {
		o.Progress.Plan(len(engine.Tables), 0)
	}
	c := &copier{src: src, dst: dst, o: o, log: log, sum: &sum}
	if o.Rate > 0 {
		// A load is at most a second's worth, so the limiter's burst (one
		// load) keeps the rate over short windows too.
		c.batch = o.Batch
		if o.Rate < float64(o.Batch) { // compared as floats: int(1e300) is not a number of rows
			c.batch = max(1, int(o.Rate))
		}
		c.lim = rate.NewLimiter(rate.Limit(o.Rate), c.batch)
	} else {
		c.batch = o.Batch
	}
	for _, table := range engine.Tables {
		mark, ok, err := dst.ServiceValue(ctx, MarkService, o.Source, table.String())
		if err != nil {
			return sum, fmt.Errorf("read the copy's mark of %s in the destination: %w", table, err)
		}
		if ok && mark == doneMark {
			sum.Skipped++
			if o.Progress != nil {
				o.Progress.UnitDone(true)
			}
			log.Info("Table copied by a run before", "table", table)
			continue
		}
		var from []byte
		if ok {
			if from, err = hex.DecodeString(mark); err != nil {
				return sum, fmt.Errorf("the copy's mark of %s in the destination, %q, is not a position: %w", table, mark, err)
			}
			log.Info("Resuming the copy of a table", "table", table, "position", mark)
		}
		if err := c.table(ctx, table, from); err != nil {
			return sum, fmt.Errorf("copy %s: %w", table, err)
		}
		sum.Tables++
		if o.Progress != nil {
			o.Progress.UnitDone(false)
		}
	}
	return sum, nil
}

type copier struct {
	src, dst Store
	o        Options
	log      *slog.Logger
	sum      *Summary
	batch    int
	lim      *rate.Limiter
}

// table copies one table from position from, retrying from the last mark.
func (c *copier) table(ctx context.Context, table engine.Table, from []byte) error {
	failures := 0
	for {
		next, err := c.pass(ctx, table, from)
		if err == nil {
			return c.mark(ctx, table, doneMark)
		}
		if ctx.Err() != nil {
			return err
		}
		if !bytes.Equal(next, from) {
			failures = 0 // it got further: the cause may have passed
		}
		from = next
		if failures >= c.o.Retries {
			return err
		}
		wait := 30 * time.Second
		if failures < 5 { // a larger shift would overflow after a long series of failures
			wait = time.Second << failures
		}
		failures++
		c.log.Warn("Copy failed; trying again from the last position stored", "table", table, "attempt", failures, "of", c.o.Retries, "wait", wait, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// batch is the rows of one load, and the position a rerun may start from
// once they and every batch before them are loaded (nil: none new).
type batch struct {
	rows  []engine.Row
	arena []byte
	pos   []byte
}

// pass scans table from from and loads its rows in batches. It returns the
// last position whose earlier rows are all loaded (and recorded, when it
// has been MarkEvery since the last record).
//
// The scan fills one batch while a goroutine loads the one before, in
// order, so that reading the source and writing the destination overlap;
// three batches exist at most (filling, waiting, loading), whatever the
// store's size.
func (c *copier) pass(ctx context.Context, table engine.Table, from []byte) (safe []byte, err error) {
	safe = slices.Clone(from) // every row before it is loaded
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loads, free := make(chan *batch, 1), make(chan *batch, 3)
	for range 3 {
		free <- &batch{rows: make([]engine.Row, 0, c.batch), arena: make([]byte, 0, 64*c.batch)}
	}
	var loadErr error
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		defer cancel() // a failed load stops the scan
		defer recovered.Into(&loadErr, c.log, "a copy's load")
		marked, markedAt := time.Now(), safe
		for b := range loads {
			if loadErr = c.load(ctx, table, b.rows); loadErr != nil {
				return
			}
			if b.pos != nil {
				safe = b.pos
				// data_points is nearly all of a store: its share done
				// is the copy's.
				if est, ok := c.src.(Estimator); ok && table == engine.DataPoints && c.o.Progress != nil {
					c.o.Progress.SetFraction(est.ScanFraction(table, safe))
				}
			}
			if time.Since(marked) >= c.o.MarkEvery && !bytes.Equal(safe, markedAt) {
				if loadErr = c.mark(ctx, table, hex.EncodeToString(safe)); loadErr != nil {
					return
				}
				marked, markedAt = time.Now(), safe
			}
			b.rows, b.arena, b.pos = b.rows[:0], b.arena[:0], nil
			free <- b
		}
	}()
	cur := <-free
	var latest []byte // the last resume position seen
	send := func() error {
		cur.pos, latest = latest, nil
		select {
		case loads <- cur:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case cur = <-free:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err = c.src.ScanRaw(ctx, table, from, func(r *engine.Row, resume []byte) error {
		if resume != nil {
			// Every row before this one is in cur or sent: once cur is
			// loaded, a rerun may start here.
			latest = slices.Clone(resume)
		}
		if r.Table == engine.ServiceIndex && r.Service == MarkService {
			return nil
		}
		cur.rows = append(cur.rows, cloneRow(r, &cur.arena))
		if len(cur.rows) == c.batch {
			return send()
		}
		return nil
	})
	if err == nil && (len(cur.rows) > 0 || latest != nil) {
		err = send()
	}
	close(loads)
	<-loaded
	switch {
	case loadErr != nil:
		return safe, loadErr
	case err != nil:
		return safe, fmt.Errorf("read the source: %w", err)
	}
	return safe, nil
}

// load writes one batch into the destination, at the rate allowed.
func (c *copier) load(ctx context.Context, table engine.Table, rows []engine.Row) error {
	if len(rows) == 0 {
		return nil
	}
	if c.lim != nil {
		if err := c.lim.WaitN(ctx, len(rows)); err != nil {
			return err
		}
	}
	if err := c.dst.LoadRaw(ctx, rows); err != nil {
		return fmt.Errorf("load %d rows into the destination: %w", len(rows), err)
	}
	n := int64(len(rows))
	c.sum.Rows += n
	if table == engine.DataPoints {
		c.sum.Cells += n
	}
	if c.o.Progress != nil {
		c.o.Progress.AddSeries(n)
		if table == engine.DataPoints {
			c.o.Progress.AddSamples(n)
		}
	}
	return nil
}

// mark records a table's position, or that it is done, in the destination.
func (c *copier) mark(ctx context.Context, table engine.Table, value string) error {
	if err := c.dst.SetServiceValue(ctx, MarkService, c.o.Source, table.String(), value, time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("record the copy's position in the destination: %w", err)
	}
	return nil
}

// cloneRow copies r: ScanRaw's rows are valid only during its callback. Its
// bytes go to arena, one allocation per batch rather than several per row;
// a row that does not fit gets its own.
func cloneRow(r *engine.Row, arena *[]byte) engine.Row {
	b := func(s []byte) []byte {
		if s == nil {
			return nil
		}
		if cap(*arena)-len(*arena) < len(s) {
			return slices.Clone(s)
		}
		n := len(*arena)
		*arena = append(*arena, s...)
		return (*arena)[n:len(*arena):len(*arena)]
	}
	s := func(v string) string { return strings.Clone(v) }
	out := engine.Row{Table: r.Table, WriteTime: r.WriteTime, TTL: r.TTL}
	switch r.Table {
	case engine.DataPoints:
		out.Cell = engine.Cell{Key: b(r.Cell.Key), Column: r.Cell.Column, Value: b(r.Cell.Value)}
		if out.Cell.Value == nil {
			out.Cell.Value = []byte{}
		}
	case engine.RowKeyIndex:
		out.Legacy = engine.LegacyRowKey{Metric: s(r.Legacy.Metric), RowKey: b(r.Legacy.RowKey)}
	case engine.RowKeys, engine.TagIndexedRowKeys, engine.RowKeyTimeIndex:
		ix := r.Index
		ix.Metric, ix.DataType, ix.Pair = s(ix.Metric), s(ix.DataType), s(ix.Pair)
		ix.Tags = slices.Clone(ix.Tags)
		for i := range ix.Tags {
			ix.Tags[i].Name, ix.Tags[i].Value = s(ix.Tags[i].Name), s(ix.Tags[i].Value)
		}
		out.Index = ix
	default:
		out.Service, out.ServiceKey, out.Name, out.Value = s(r.Service), s(r.ServiceKey), s(r.Name), b(r.Value)
	}
	return out
}
