package kairosstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"

	"github.com/kairos-remote/kairos-adapter/translate"
)

// Metadata lives in service_index (§9.2) under this service and service key,
// one key per metric family, so KairosDB's own metadata API can list it.
const (
	metadataService    = "prometheus"
	metadataServiceKey = "metric_metadata"
)

// NonFiniteSuffix names the side index of a metric's non-finite values: their
// null-typed rows keep the metric's own row key, but their row_keys and
// row_key_time_index entries go under <metric>#nonfinite, which is not in
// string_index. KairosDB reads only the index of the metric it queries (§7),
// so it never meets these rows: a NullDataPoint prints as null in a raw
// query but fails every aggregator that asks for its value. The reader looks
// up both indexes. A real metric of that name is harmless: the reader takes
// only null rows from a side index, and their keys carry the other name.
const NonFiniteSuffix = "#nonfinite"

// Appender collects the samples of one write request and stores them in one
// engine batch on Commit. It is not safe for concurrent use.
type Appender struct {
	s *Store

	// The series of the previous Append: remote-write requests carry all
	// samples of a series together, so most calls skip the translation.
	last     labels.Labels
	lastOK   bool
	metric   string
	tags     []translate.Tag
	keyBuf   []byte
	rowIndex map[string]int // row key -> index in rows
	rows     []pendingRow
	values   []byte // backing store of all cell values
	batch    Batch
	meta     map[string]string // metric family -> JSON
}

type pendingRow struct {
	key         []byte
	metric      string // of the row key
	indexMetric string // of its index rows: metric, or a side metric KairosDB never reads
	rowTime     int64
	dataType    string
	tags        []translate.Tag
}

// NewAppender starts collecting one request.
func (s *Store) NewAppender() *Appender {
	return &Appender{s: s, rowIndex: map[string]int{}}
}

// Grow sizes the appender for a request of n samples, histograms and
// exemplars, so its buffers are allocated once rather than grown by doubling.
func (a *Appender) Grow(n int) {
	a.batch.Cells = slices.Grow(a.batch.Cells, n)
	a.values = slices.Grow(a.values, 8*n)
}

// Append adds one float sample of the series ls. Finite values are stored as
// kairos_double. Non-finite ones (NaN of any payload, ±Inf, and Prometheus
// stale markers) cannot be kairos_double: KairosDB's JSON cannot print them
// and its aggregators would fail on them. They go to a row of KairosDB's
// "null" type holding the 8 raw bytes, indexed under the side metric
// <metric>#nonfinite (see NonFiniteSuffix), so KairosDB never reads them while
// this adapter returns them bit-exact.
func (a *Appender) Append(ls labels.Labels, t int64, v float64) error {
	if err := a.s.checkTime(t); err != nil {
		return err
	}
	if err := a.series(ls); err != nil {
		return err
	}
	off := len(a.values)
	a.values = AppendDouble(a.values, v)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		a.addCell(a.metric, a.metric+NonFiniteSuffix, t, TypeNull, off)
	} else {
		a.addCell(a.metric, a.metric, t, TypeDouble, off)
	}
	return nil
}

// AppendHistogram adds one native histogram sample of the series ls; exactly
// one of h (integer counts) and fh (float counts) is set. It goes to the
// series' row of type prom_histogram or prom_float_histogram (histogram.go).
// A histogram that fails histogram.Validate is refused, as Prometheus's TSDB
// refuses it, so that nothing is stored that readers would have to skip;
// callers reduce schemas 9..52 to 8 first (prometheus-remote-protocols.md
// §2.7). A histogram stale marker (Sum = StaleNaN) is valid and kept bit for
// bit.
func (a *Appender) AppendHistogram(ls labels.Labels, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) error {
	if err := a.s.checkTime(t); err != nil {
		return err
	}
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
		return badRequest("invalid native histogram at %d: %w", t, err)
	}
	if err := a.series(ls); err != nil {
		return err
	}
	off := len(a.values)
	dataType := TypeHistogram
	if h != nil {
		a.values = AppendHistogramValue(a.values, h)
	} else {
		dataType = TypeFloatHistogram
		a.values = AppendFloatHistogramValue(a.values, fh)
	}
	a.addCell(a.metric, a.metric, t, dataType, off)
	return nil
}

// AppendExemplar adds one exemplar of the series ls. It goes to the series'
// exemplar metric (exemplar.go), at the exemplar's timestamp. An exemplar
// whose labels Prometheus could not hold is refused.
func (a *Appender) AppendExemplar(ls labels.Labels, e exemplar.Exemplar) error {
	if err := a.s.checkTime(e.Ts); err != nil {
		return err
	}
	if err := checkExemplarLabels(e.Labels); err != nil {
		return badRequest("invalid exemplar at %d: %w", e.Ts, err)
	}
	if err := a.series(ls); err != nil {
		return err
	}
	off := len(a.values)
	a.values = AppendExemplarValue(a.values, e.Labels, e.Value)
	// The key fits Cassandra's limit: Split checked the series with room
	// for a 127-byte type name, and the suffix plus "prom_exemplar" is
	// shorter than that.
	a.addCell(a.metric+ExemplarSuffix, a.metric+ExemplarSuffix, e.Ts, TypeExemplar, off)
	return nil
}

// minTime is the earliest timestamp the layout can hold. KairosDB's row time
// ts - (|ts| mod width) overflows within one row width of the int64 minimum
// (§3.1), which would put the sample where no read finds it.
func (s *Store) minTime() int64 {
	return math.MinInt64 + max(s.spec.Width, s.spec.WidthMillis())
}

// checkTime refuses timestamps the layout cannot hold.
func (s *Store) checkTime(t int64) error {
	if t < s.minTime() {
		return badRequest("timestamp %d is out of range: the KairosDB layout holds timestamps from %d on", t, s.minTime())
	}
	return nil
}

// addCell adds the cell at time t of the current series' row of metric and
// dataType, indexed under indexMetric; its value is a.values[off:].
func (a *Appender) addCell(metric, indexMetric string, t int64, dataType string, off int) {
	rowTime := a.s.spec.RowTime(t)
	row := a.row(metric, indexMetric, rowTime, dataType)
	a.batch.Cells = append(a.batch.Cells, Cell{
		Key:    a.rows[row].key,
		Column: a.s.spec.Column(rowTime, t),
		Value:  a.values[off:len(a.values):len(a.values)],
		TTL:    a.s.opts.TTL,
	})
}

// SetMetadata records the metadata of a metric family.
func (a *Appender) SetMetadata(family string, m metadata.Metadata) error {
	if family == "" {
		return badRequest("metadata without a metric family name")
	}
	b, err := json.Marshal(storedMetadata{Type: string(m.Type), Help: m.Help, Unit: m.Unit})
	if err != nil {
		return err
	}
	if a.meta == nil {
		a.meta = map[string]string{}
	}
	a.meta[family] = string(b)
	return nil
}

type storedMetadata struct {
	Type string `json:"type"`
	Help string `json:"help"`
	Unit string `json:"unit"`
}

// series translates ls unless it is the series of the previous call.
func (a *Appender) series(ls labels.Labels) error {
	if a.lastOK && labels.Equal(ls, a.last) {
		return nil
	}
	a.lastOK = false
	metric, tags, err := a.s.mapper.Split(ls, a.tags[:0])
	if err != nil {
		return badRequest("%w", err)
	}
	SortTags(tags)
	a.metric, a.tags, a.last, a.lastOK = metric, tags, ls, true
	return nil
}

// row returns the index of the current series' row of metric (the series'
// own or its exemplar metric) for rowTime and type, adding it on first use.
func (a *Appender) row(metric, indexMetric string, rowTime int64, dataType string) int {
	a.keyBuf = AppendRowKey(a.keyBuf[:0], RowKey{Metric: metric, RowTime: rowTime, DataType: dataType, Tags: a.tags})
	if i, ok := a.rowIndex[string(a.keyBuf)]; ok {
		return i
	}
	key := append([]byte(nil), a.keyBuf...)
	a.rows = append(a.rows, pendingRow{
		key: key, metric: metric, indexMetric: indexMetric, rowTime: rowTime, dataType: dataType,
		tags: append([]translate.Tag(nil), a.tags...),
	})
	a.rowIndex[string(key)] = len(a.rows) - 1
	return len(a.rows) - 1
}

// Commit stores everything appended in one engine batch: the cells, and the
// index rows this process has not stored before (§5.2). It returns nil only
// when the engine confirmed every row.
func (a *Appender) Commit(ctx context.Context) error {
	s := a.s
	b := &a.batch
	b.WriteTime = s.opts.Now().UnixMilli()
	indexTTL := s.indexTTL()
	var newRows, newMetricRows []string
	seenMetricRows, seenNames := map[string]bool{}, map[string]bool{}
	for _, r := range a.rows {
		if s.rowKeys.has(r.key) {
			s.m.cacheHits.WithLabelValues("row_keys").Inc()
			continue
		}
		s.m.cacheMisses.WithLabelValues("row_keys").Inc()
		newRows = append(newRows, string(r.key))
		irk := IndexedRowKey{Metric: r.indexMetric, RowTime: r.rowTime, DataType: r.dataType, Tags: r.tags, TTL: indexTTL}
		b.RowKeys = append(b.RowKeys, irk)
		if r.indexMetric == r.metric {
			b.TagIndexed = s.appendTagIndexed(b.TagIndexed, irk)
		}

		mk := metricRowKey(r.indexMetric, r.rowTime)
		if seenMetricRows[mk] || s.metrics.has([]byte(mk)) {
			s.m.cacheHits.WithLabelValues("row_key_time_index").Inc()
			continue
		}
		s.m.cacheMisses.WithLabelValues("row_key_time_index").Inc()
		seenMetricRows[mk] = true
		newMetricRows = append(newMetricRows, mk)
		b.RowTimes = append(b.RowTimes, RowTimeIndex{Metric: r.indexMetric, RowTime: r.rowTime, TTL: indexTTL})
		// string_index lists the metric of the row key: a side metric is
		// found through its metric and stays out of KairosDB's name list.
		if !seenNames[r.metric] {
			seenNames[r.metric] = true
			b.MetricNames = append(b.MetricNames, r.metric)
		}
	}
	if len(b.Cells) > 0 || len(b.RowKeys) > 0 {
		start := time.Now()
		err := s.eng.Write(ctx, b)
		s.observe("write", start)
		if err != nil {
			return fmt.Errorf("store %d samples: %w", len(b.Cells), err)
		}
	}
	s.rowKeys.add(newRows...)
	s.metrics.add(newMetricRows...)
	for family, v := range a.meta {
		key := family + "\x00" + v
		if s.meta.has([]byte(key)) {
			continue
		}
		if err := s.eng.SetServiceValue(ctx, metadataService, metadataServiceKey, family, v, b.WriteTime); err != nil {
			return fmt.Errorf("store metadata of %s: %w", family, err)
		}
		s.meta.add(key)
	}
	return nil
}

// indexTTL is KairosDB's TTL of index rows: the data TTL plus one row width,
// so an index entry outlives every cell of its row (§5.2 step 4).
func (s *Store) indexTTL() int32 {
	if s.opts.TTL == 0 {
		return 0
	}
	return s.opts.TTL + int32(s.spec.WidthMillis()/1000)
}

// appendTagIndexed adds the tag_indexed_row_keys rows of a row key of a
// tag-indexed metric (§6.2).
func (s *Store) appendTagIndexed(dst []TagIndexedRowKey, r IndexedRowKey) []TagIndexedRowKey {
	names, ok := s.opts.TagIndexed[r.Metric]
	if !ok {
		if names, ok = s.opts.TagIndexed["*"]; !ok {
			return dst
		}
	}
	indexed := r.Tags
	if len(names) > 0 && !(len(names) == 1 && names[0] == "*") {
		indexed = nil
		for _, t := range r.Tags {
			if containsString(names, t.Name) {
				indexed = append(indexed, t)
			}
		}
	}
	if len(indexed) == 0 {
		return dst
	}
	hash := TagCollectionHash(indexed)
	for _, t := range indexed {
		dst = append(dst, TagIndexedRowKey{IndexedRowKey: r, Pair: SingleTagPair(t), Hash: hash})
	}
	return dst
}

func metricRowKey(metric string, rowTime int64) string {
	return string(binary.BigEndian.AppendUint64([]byte(metric+"\x00"), uint64(rowTime)))
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
