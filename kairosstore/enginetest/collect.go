package enginetest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// The collectors below copy everything a callback hands over, because those
// slices are only valid during the call (Engine doc).

type cell struct {
	Column uint32
	Value  []byte
}

// indexEntry is a row_keys or tag_indexed_row_keys entry with its tags as a
// map: engines return tags in no particular order.
type indexEntry struct {
	DataType string
	Tags     map[string]string
}

func tagMap(tags []codec.Tag) map[string]string {
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		// Engines may hand out strings valid only during the callback.
		m[strings.Clone(t.Name)] = strings.Clone(t.Value)
	}
	return m
}

func tags(kv ...string) []codec.Tag {
	ts := make([]codec.Tag, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		ts = append(ts, codec.Tag{Name: kv[i], Value: kv[i+1]})
	}
	return ts
}

func entry(dataType string, kv ...string) indexEntry {
	return indexEntry{DataType: dataType, Tags: tagMap(tags(kv...))}
}

func cells(t *testing.T, e engine.Engine, key []byte, lo, hi uint32) []cell {
	t.Helper()
	out := []cell{}
	err := e.Cells(t.Context(), key, lo, hi, func(column uint32, value []byte) error {
		out = append(out, cell{Column: column, Value: append([]byte{}, value...)})
		return nil
	})
	require.NoError(t, err)
	return out
}

func rowKeys(t *testing.T, e engine.Engine, metric string, rowTime int64) []indexEntry {
	t.Helper()
	out := []indexEntry{}
	err := e.RowKeys(t.Context(), metric, rowTime, func(dataType string, tags []codec.Tag) error {
		out = append(out, indexEntry{DataType: dataType, Tags: tagMap(tags)})
		return nil
	})
	require.NoError(t, err)
	return out
}

func tagIndexed(t *testing.T, e engine.Engine, metric string, rowTime int64, pair string) []indexEntry {
	t.Helper()
	out := []indexEntry{}
	err := e.TagIndexedRowKeys(t.Context(), metric, rowTime, pair, func(dataType string, tags []codec.Tag) error {
		out = append(out, indexEntry{DataType: dataType, Tags: tagMap(tags)})
		return nil
	})
	require.NoError(t, err)
	return out
}

func rowTimes(t *testing.T, e engine.Engine, metric string, lo, hi int64) []int64 {
	t.Helper()
	out := []int64{}
	err := e.RowTimes(t.Context(), metric, lo, hi, func(rowTime int64) error {
		out = append(out, rowTime)
		return nil
	})
	require.NoError(t, err)
	return out
}

func legacyRowKeys(t *testing.T, e engine.Engine, metric string, lo, hi []byte) [][]byte {
	t.Helper()
	out := [][]byte{}
	err := e.LegacyRowKeys(t.Context(), metric, lo, hi, func(rowKey []byte) error {
		out = append(out, append([]byte{}, rowKey...))
		return nil
	})
	require.NoError(t, err)
	return out
}

func metricNames(t *testing.T, e engine.Engine) []string {
	t.Helper()
	out := []string{}
	err := e.MetricNames(t.Context(), func(name string) error {
		out = append(out, name)
		return nil
	})
	require.NoError(t, err)
	return out
}

func serviceKeys(t *testing.T, e engine.Engine, service, serviceKey, prefix string) []string {
	t.Helper()
	out := []string{}
	err := e.ServiceKeys(t.Context(), service, serviceKey, prefix, func(key string) error {
		out = append(out, key)
		return nil
	})
	require.NoError(t, err)
	return out
}

func spec(t *testing.T, e engine.Engine, name string) (string, bool) {
	t.Helper()
	v, ok, err := e.Spec(t.Context(), name)
	require.NoError(t, err)
	return v, ok
}

func serviceValue(t *testing.T, e engine.Engine, service, serviceKey, key string) (string, bool) {
	t.Helper()
	v, ok, err := e.ServiceValue(t.Context(), service, serviceKey, key)
	require.NoError(t, err)
	return v, ok
}

func write(t *testing.T, e engine.Engine, b *engine.Batch) {
	t.Helper()
	require.NoError(t, e.Write(t.Context(), b))
}

func del(t *testing.T, e engine.Engine, d *engine.Deletes) {
	t.Helper()
	require.NoError(t, e.Delete(t.Context(), d))
}

// seedLegacy writes row_key_index cells, which only data from KairosDB
// before 1.0 has.
func seedLegacy(t *testing.T, e engine.Engine, writeTime int64, keys ...engine.LegacyRowKey) {
	t.Helper()
	write(t, e, &engine.Batch{WriteTime: writeTime, LegacyRowKeys: keys})
}
