package kairosstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"

	"github.com/kairos-remote/kairos-adapter/internal/lru"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
	"github.com/kairos-remote/kairos-adapter/kairosstore/index"
)

// Metadata lives in service_index (§9.2) under this service and service key,
// one key per metric family, so KairosDB's own metadata API can list it.
const (
	metadataService    = "prometheus"
	metadataServiceKey = "metric_metadata"
)

// NonFiniteSuffix names the side index of a metric's non-finite values
// (index.NonFiniteSuffix).
const NonFiniteSuffix = index.NonFiniteSuffix

// Appender collects the samples of one write request and stores them in one
// engine batch on Commit. It is not safe for concurrent use.
type Appender struct {
	s *Store

	// The series of the previous Append: remote-write requests carry all
	// samples of a series together, so most calls skip even the cache.
	cur     *series
	keyBuf  []byte
	rowPos  map[string]int // row key -> position in rows
	rows    []pendingRow   // rows whose index rows may need writing
	lastRow *seriesRow
	now     int64  // the store's stamp when the request started (cache.go)
	indexed int    // distinct rows found already indexed, for the hit counter
	values  []byte // backing store of all cell values
	batch   engine.Batch
	meta    map[string]pendingMetadata // by metric family
	// ttl is the TTL of the cells appended next (Options.TTL unless
	// SetDerived); derived marks the appender's changes as Change.Derived.
	ttl     int32
	derived bool

	// The times appended per metric, for Options.OnChange; chgOf is the
	// series changes[chg] was last looked up for.
	changes []Change
	chgPos  map[string]int
	chgOf   *series
	chg     int
}

type pendingRow struct {
	key         []byte
	metric      string // of the row key
	indexMetric string // of its index rows: metric, or a side metric KairosDB never reads
	rowTime     int64
	dataType    string
	tags        []codec.Tag
	shared      *seriesRow // the cached row to mark indexed, if any
	ttl         int32      // of the row's cells; its index rows outlive them (Store.IndexTTL)
}

// NewAppender starts collecting one request.
func (s *Store) NewAppender() *Appender {
	a := &Appender{s: s, rowPos: map[string]int{}, now: s.stamp(), ttl: s.opts.TTL}
	if bufs, ok := s.bufs.Get().(*appendBuffers); ok {
		a.batch.Cells, a.values = bufs.cells, bufs.values
	}
	return a
}

// appendBuffers are the two big slices of an appender, kept for the next
// request: allocating them per request made the garbage collector a large
// share of the write path's CPU (BENCHMARKS.md, BenchmarkPipeline: "The
// appender's cell and value buffers").
type appendBuffers struct {
	cells  []engine.Cell
	values []byte
}

// maxPooledCells keeps one huge request from pinning its buffers: at most
// 16 MiB of cells and 2 MiB of values per buffer, which sync.Pool drops
// after two collections without use. Requests of 200,000 samples (a
// backfill's, the year load of BENCHMARKS.md) allocating their buffers anew
// each time cost more CPU and a higher peak RSS, not a lower one
// (BENCHMARKS.md, "Issue #31, third pass").
const maxPooledCells = 256 << 10

// release hands the appender's buffers back. The engine has returned, and
// engines keep nothing of a batch after Write.
func (a *Appender) release() {
	if cap(a.batch.Cells) > maxPooledCells {
		return
	}
	clear(a.batch.Cells) // drop the references to row keys
	a.s.bufs.Put(&appendBuffers{cells: a.batch.Cells[:0], values: a.values[:0]})
	a.batch.Cells, a.values = nil, nil
}

// Grow sizes the appender for a request of n samples, histograms and
// exemplars, so its buffers are allocated once rather than grown by doubling.
func (a *Appender) Grow(n int) {
	a.batch.Cells = slices.Grow(a.batch.Cells, n)
	a.values = slices.Grow(a.values, 8*n)
}

// Append adds one float sample of the series ref or, when ref is 0, ls (the
// adapter's Appender contract: ls may be empty when ref is given, and a ref
// no longer known without labels is an *unknownRefError). It returns the
// series' ref, valid across appenders for as long as the store's ref table
// holds it (refTable). Finite values are stored as kairos_double. Non-finite
// ones (NaN of any payload, ±Inf, and Prometheus stale markers) cannot be
// kairos_double: KairosDB's JSON cannot print them and its aggregators would
// fail on them. They go to a row of KairosDB's "null" type holding the 8 raw
// bytes, indexed under the side metric <metric>#nonfinite (see
// NonFiniteSuffix), so KairosDB never reads them while this adapter returns
// them bit-exact.
func (a *Appender) Append(ref storage.SeriesRef, ls labels.Labels, t int64, v float64) (storage.SeriesRef, error) {
	if err := a.use(ref, ls); err != nil {
		return 0, err
	}
	return a.ref(), a.appendFloat(t, v)
}

// use makes a.cur the series of ref or, when ref is 0, of ls.
func (a *Appender) use(ref storage.SeriesRef, ls labels.Labels) error {
	if ref != 0 {
		if a.cur != nil && a.ref() == ref {
			return nil
		}
		if s := a.s.refs.get(ref); s != nil {
			a.cur = s
			return nil
		}
		if ls.IsEmpty() {
			return &unknownRefError{ref}
		}
	}
	return a.series(ls)
}

// ref is the current series' ref.
func (a *Appender) ref() storage.SeriesRef { return storage.SeriesRef(a.cur.ref.Load()) }

// unknownRefError is a ref the store no longer knows, given without labels
// (the adapter's UnknownRefError): the caller appends again with them. A
// caller that does not is a bug, which the adapter answers 500 so that the
// sender retries rather than loses the series.
type unknownRefError struct{ ref storage.SeriesRef }

func (e *unknownRefError) Error() string {
	return fmt.Sprintf("series ref %d is no longer known and no labels came with it", e.ref)
}
func (*unknownRefError) UnknownSeriesRef() {}

func (a *Appender) appendFloat(t int64, v float64) error {
	if err := a.s.checkTime(t); err != nil {
		return err
	}
	a.noteTime(t)
	off := len(a.values)
	a.values = codec.AppendDouble(a.values, v)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		a.addCell(a.cur.metric, a.cur.metric+NonFiniteSuffix, t, codec.TypeNull, off)
		// The reader returns the null row only for row windows where the
		// series has a row in the metric's own index (index.withoutOrphans), the
		// index KairosDB's delete goes by (§8). So index the series'
		// kairos_double row of the row window too, with or without cells: an
		// entry of an empty data_points row costs KairosDB one empty read.
		a.row(a.cur.metric, a.cur.metric, a.s.spec.RowTime(t), codec.TypeDouble)
		return nil
	}
	// The hot path: the row and its key come from the series cache, so a
	// sample costs no allocation once its series was seen.
	rowTime := a.s.spec.RowTime(t)
	r := a.cur.doubleRow(rowTime)
	if r != a.lastRow {
		a.lastRow = r
		if a.s.fresh(r.indexedAt.Load(), a.now) {
			a.indexed++
		} else if _, ok := a.rowPos[string(r.key)]; !ok {
			a.rowPos[string(r.key)] = len(a.rows)
			a.rows = append(a.rows, pendingRow{
				key: r.key, metric: a.cur.metric, indexMetric: a.cur.metric, rowTime: rowTime,
				dataType: codec.TypeDouble, tags: a.cur.tags, shared: r, ttl: a.ttl,
			})
		}
	}
	a.batch.Cells = append(a.batch.Cells, engine.Cell{
		Key:    r.key,
		Column: a.s.spec.Column(rowTime, t),
		Value:  a.values[off:len(a.values):len(a.values)],
		TTL:    a.ttl,
	})
	return nil
}

// AppendHistogram adds one native histogram sample of the series ls; exactly
// one of h (integer counts) and fh (float counts) is set. It goes to the
// series' row of type prom_histogram or prom_float_histogram (histogram.go).
// A histogram that fails histogram.Validate is refused, as Prometheus's TSDB
// refuses it, so that nothing is stored that readers would have to skip:
// this is the one place histograms are validated, before anything else of
// the sample; callers reduce schemas 9..52 to 8 first
// (docs/remote-protocols.md §2.7). A histogram stale marker (Sum = StaleNaN)
// is valid and kept bit for bit.
func (a *Appender) AppendHistogram(ref storage.SeriesRef, ls labels.Labels, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (storage.SeriesRef, error) {
	var err error
	switch {
	case (h == nil) == (fh == nil):
		err = errors.New("a histogram sample needs exactly one of integer and float counts")
	case h != nil:
		err = h.Validate()
	default:
		err = fh.Validate()
	}
	if err != nil {
		return ref, badRequest("invalid native histogram at %d: %w", t, err)
	}
	if err := a.s.checkTime(t); err != nil {
		return ref, err
	}
	if err := a.use(ref, ls); err != nil {
		return 0, err
	}
	a.noteTime(t)
	off := len(a.values)
	dataType := codec.TypeHistogram
	if h != nil {
		a.values = codec.AppendHistogramValue(a.values, h)
	} else {
		dataType = codec.TypeFloatHistogram
		a.values = codec.AppendFloatHistogramValue(a.values, fh)
	}
	a.addCell(a.cur.metric, a.cur.metric, t, dataType, off)
	return a.ref(), nil
}

// AppendExemplar adds one exemplar of the series ref or ls (as Append). It goes to the series'
// exemplar metric (exemplar.go), at the exemplar's timestamp. An exemplar
// whose labels Prometheus could not hold is refused.
func (a *Appender) AppendExemplar(ref storage.SeriesRef, ls labels.Labels, e exemplar.Exemplar) (storage.SeriesRef, error) {
	if err := a.s.checkTime(e.Ts); err != nil {
		return ref, err
	}
	if err := codec.CheckExemplarLabels(e.Labels); err != nil {
		return ref, badRequest("invalid exemplar at %d: %w", e.Ts, err)
	}
	if err := a.use(ref, ls); err != nil {
		return 0, err
	}
	off := len(a.values)
	a.values = codec.AppendExemplarValue(a.values, e.Labels, e.Value)
	// The key fits Cassandra's limit: Split checked the series with room
	// for a 127-byte type name, and the suffix plus "prom_exemplar" is
	// shorter than that.
	a.addCell(a.cur.metric+codec.ExemplarSuffix, a.cur.metric+codec.ExemplarSuffix, e.Ts, codec.TypeExemplar, off)
	return a.ref(), nil
}

// minTime is the earliest timestamp the layout can hold. KairosDB's row time
// ts - (|ts| mod width) overflows within one row width of the int64 minimum
// (§3.1), which would put the sample where no read finds it.
func (s *Store) minTime() int64 {
	return math.MinInt64 + max(s.spec.Width, s.spec.WidthMillis())
}

// checkTime refuses timestamps the layout cannot hold. The error refuses
// that one item, not its series (adapter.ItemError): the series' other
// items are stored.
func (s *Store) checkTime(t int64) error {
	if t < s.minTime() {
		return &timeRangeError{t: t, min: s.minTime()}
	}
	return nil
}

// timeRangeError is a timestamp before the layout's first one: out of
// bounds, as Prometheus's storage says, and only the item that has it is
// refused.
type timeRangeError struct{ t, min int64 }

func (e *timeRangeError) Error() string {
	return fmt.Sprintf("timestamp %d is out of range: the KairosDB layout holds timestamps from %d on", e.t, e.min)
}
func (e *timeRangeError) Is(target error) bool { return target == storage.ErrOutOfBounds }
func (e *timeRangeError) RefusesItemOnly()     {}

// noteTime widens the current series' metric's Change to t.
func (a *Appender) noteTime(t int64) {
	if a.s.opts.OnChange == nil && a.s.opts.Guard == nil {
		return
	}
	if a.chgOf != a.cur {
		a.chgOf = a.cur
		name := a.cur.name
		i, ok := a.chgPos[name]
		if !ok {
			if a.chgPos == nil {
				a.chgPos = map[string]int{}
			}
			i = len(a.changes)
			a.chgPos[name] = i
			a.changes = append(a.changes, Change{Metric: name, MinT: t, MaxT: t, Derived: a.derived})
		}
		a.chg = i
	}
	c := &a.changes[a.chg]
	c.MinT, c.MaxT = min(c.MinT, t), max(c.MaxT, t)
}

// addCell adds the cell at time t of the current series' row of metric and
// dataType, indexed under indexMetric; its value is a.values[off:].
func (a *Appender) addCell(metric, indexMetric string, t int64, dataType string, off int) {
	rowTime := a.s.spec.RowTime(t)
	row := a.row(metric, indexMetric, rowTime, dataType)
	a.batch.Cells = append(a.batch.Cells, engine.Cell{
		Key:    a.rows[row].key,
		Column: a.s.spec.Column(rowTime, t),
		Value:  a.values[off:len(a.values):len(a.values)],
		TTL:    a.ttl,
	})
}

// SetMetadata records the metadata of a metric family.
func (a *Appender) SetMetadata(family string, m metadata.Metadata) error {
	if family == "" {
		return badRequest("metadata without a metric family name")
	}
	if prev, ok := a.s.meta.Get(family); ok && prev == m {
		return nil
	}
	b, err := json.Marshal(storedMetadata{Type: string(m.Type), Help: m.Help, Unit: m.Unit})
	if err != nil {
		return err
	}
	if a.meta == nil {
		a.meta = map[string]pendingMetadata{}
	}
	// The strings may point into the caller's request buffer.
	m = metadata.Metadata{Type: m.Type, Help: strings.Clone(m.Help), Unit: strings.Clone(m.Unit)}
	a.meta[strings.Clone(family)] = pendingMetadata{md: m, json: string(b)}
	return nil
}

type pendingMetadata struct {
	md   metadata.Metadata
	json string
}

type storedMetadata struct {
	Type string `json:"type"`
	Help string `json:"help"`
	Unit string `json:"unit"`
}

// series makes a.cur the series of ls.
func (a *Appender) series(ls labels.Labels) error {
	if a.cur != nil && labels.Equal(ls, a.cur.ls) {
		return nil
	}
	a.cur = nil
	s, err := a.s.lookupSeries(ls)
	if err != nil {
		return badRequest("%w", err)
	}
	a.cur = s
	return nil
}

// row returns the index of the current series' row of metric (the series'
// own or its exemplar metric) for rowTime and type, adding it on first use.
func (a *Appender) row(metric, indexMetric string, rowTime int64, dataType string) int {
	a.keyBuf = codec.AppendRowKey(a.keyBuf[:0], codec.RowKey{Metric: metric, RowTime: rowTime, DataType: dataType, Tags: a.cur.tags})
	if i, ok := a.rowPos[string(a.keyBuf)]; ok {
		return i
	}
	key := append([]byte(nil), a.keyBuf...)
	a.rows = append(a.rows, pendingRow{
		key: key, metric: metric, indexMetric: indexMetric, rowTime: rowTime, dataType: dataType,
		tags: a.cur.tags, ttl: a.ttl,
	})
	a.rowPos[string(key)] = len(a.rows) - 1
	return len(a.rows) - 1
}

// Commit stores everything appended in one engine batch: the cells, and the
// index rows this process has not stored within IndexCacheTTL (§5.2,
// cache.go). It returns nil only when the engine confirmed every row.
func (a *Appender) Commit(ctx context.Context) error {
	s := a.s
	b := &a.batch
	// Cassandra gives a tie to the tombstone: a write in the millisecond
	// of a delete that returned before it would be lost.
	b.WriteTime = max(s.opts.Now().UnixMilli(), s.lastDeleteMillis.Load()+1)
	var newRows, newMetricRows []string
	var confirmed []*seriesRow
	var seenMetricRows, seenNames map[string]bool
	// Read before the write: a delete during it stamps a later time, so
	// rows confirmed now do not count as indexed after it.
	now := s.stamp()
	rowHits, rowMisses, metricHits, metricMisses := a.indexed, 0, 0, 0
	for _, r := range a.rows {
		if r.shared != nil && s.fresh(r.shared.indexedAt.Load(), now) {
			rowHits++
			continue
		}
		if stamp, ok := lru.GetBytes(s.rowKeys, r.key); ok && s.fresh(stamp, now) {
			rowHits++
			if r.shared != nil {
				// The cache's stamp, not now: the mark must not
				// outlive the entry.
				r.shared.indexedAt.Store(stamp)
			}
			continue
		}
		rowMisses++
		newRows = append(newRows, string(r.key))
		if r.shared != nil {
			confirmed = append(confirmed, r.shared)
		}
		indexTTL := s.IndexTTL(r.ttl)
		irk := engine.IndexedRowKey{Metric: r.indexMetric, RowTime: r.rowTime, DataType: r.dataType, Tags: r.tags, TTL: indexTTL}
		b.RowKeys = append(b.RowKeys, irk)
		if r.indexMetric == r.metric {
			b.TagIndexed = s.appendTagIndexed(b.TagIndexed, irk)
		}

		mk := metricRowKey(r.indexMetric, r.rowTime)
		if seenMetricRows[mk] {
			metricHits++
			continue
		}
		if stamp, ok := s.metricRows.Get(mk); ok && s.fresh(stamp, now) {
			metricHits++
			continue
		}
		metricMisses++
		if seenMetricRows == nil {
			seenMetricRows, seenNames = map[string]bool{}, map[string]bool{}
		}
		seenMetricRows[mk] = true
		newMetricRows = append(newMetricRows, mk)
		b.RowTimes = append(b.RowTimes, engine.RowTimeIndex{Metric: r.indexMetric, RowTime: r.rowTime, TTL: indexTTL})
		// string_index lists the metric of the row key: a side metric is
		// found through its metric and stays out of KairosDB's name list.
		if !seenNames[r.metric] {
			seenNames[r.metric] = true
			b.MetricNames = append(b.MetricNames, r.metric)
		}
	}
	s.m.rowKeyHits.Add(float64(rowHits))
	s.m.rowKeyMisses.Add(float64(rowMisses))
	s.m.metricRowHits.Add(float64(metricHits))
	s.m.metricRowMisses.Add(float64(metricMisses))
	if len(b.Cells) > 0 || len(b.RowKeys) > 0 {
		guard := s.opts.Guard != nil && !a.derived && len(a.changes) > 0
		var began time.Time
		if guard {
			began = s.opts.Now()
			if err := s.opts.Guard.BeforeChange(ctx, a.changes); err != nil {
				return err
			}
		}
		start, n := time.Now(), len(b.Cells)
		err := s.eng.Write(ctx, b)
		s.observe("write", start)
		// Even after an error: some entries may be stored, and a cached
		// listing must not hide them.
		s.idx.NoteWritten(b.RowKeys)
		a.release()
		if len(a.changes) > 0 && s.opts.OnChange != nil {
			s.opts.OnChange(a.changes)
		}
		if err != nil {
			return fmt.Errorf("store %d samples: %w", n, err)
		}
		if guard {
			if err := s.opts.Guard.AfterChange(ctx, a.changes, began); err != nil {
				return err
			}
		}
	}
	s.rowKeys.AddAll(newRows, now)
	s.metricRows.AddAll(newMetricRows, now)
	for _, r := range confirmed {
		r.indexedAt.Store(now)
	}
	for family, p := range a.meta {
		if prev, ok := s.meta.Get(family); ok && prev == p.md {
			continue // another request stored it meanwhile
		}
		if err := s.eng.SetServiceValue(ctx, metadataService, metadataServiceKey, family, p.json, b.WriteTime); err != nil {
			return fmt.Errorf("store metadata of %s: %w", family, err)
		}
		s.meta.Add(family, p.md)
	}
	return nil
}

// IndexTTL is KairosDB's TTL of the index rows of cells with TTL ttl: the
// data TTL plus one row width, so an index entry outlives every cell of its
// row (§5.2 step 4).
func (s *Store) IndexTTL(ttl int32) int32 {
	if ttl == 0 {
		return 0
	}
	return ttl + int32(s.spec.WidthMillis()/1000)
}

// SetDerived makes the cells appended after it, and their index rows, live
// ttl seconds (0: forever) instead of Options.TTL, and marks the changes
// this appender reports to Options.OnChange as Derived. The rollup job
// writes its series so: each resolution has its own retention, and a
// rollup written is not a change of the samples it was computed from.
func (a *Appender) SetDerived(ttl int32) {
	a.ttl, a.derived = ttl, true
}

// appendTagIndexed adds the tag_indexed_row_keys rows of a row key of a
// tag-indexed metric (§6.2).
func (s *Store) appendTagIndexed(dst []engine.TagIndexedRowKey, r engine.IndexedRowKey) []engine.TagIndexedRowKey {
	names, all, ok := index.TagIndexedNames(s.opts.TagIndexed, r.Metric)
	if !ok {
		return dst
	}
	indexed := r.Tags
	if !all {
		indexed = nil
		for _, t := range r.Tags {
			if slices.Contains(names, t.Name) {
				indexed = append(indexed, t)
			}
		}
	}
	if len(indexed) == 0 {
		return dst
	}
	hash := codec.TagCollectionHash(indexed)
	for _, t := range indexed {
		dst = append(dst, engine.TagIndexedRowKey{IndexedRowKey: r, Pair: codec.SingleTagPair(t), Hash: hash})
	}
	return dst
}

func metricRowKey(metric string, rowTime int64) string {
	return string(binary.BigEndian.AppendUint64([]byte(metric+"\x00"), uint64(rowTime)))
}
