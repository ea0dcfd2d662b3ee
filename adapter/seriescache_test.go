package adapter

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSymbolTable checks that symbols keep their numbers across requests,
// and that a number given out again after the table filled up never makes
// the key of an earlier series.
func TestSymbolTable(t *testing.T) {
	st := newSymbolTable(5)
	ids, gen := st.resolve(nil, []string{"", "a", "b"})
	require.Equal(t, []uint32{0, 1, 2}, ids)
	again, gen2 := st.resolve(nil, []string{"b", "a"})
	require.Equal(t, []uint32{2, 1}, again)
	require.Equal(t, gen, gen2)
	oldKey := appendSymbolKey(nil, gen, []uint32{0, 1}, ids) // {"": "a"}

	// Full: a new generation numbers from 0 again.
	fresh, gen3 := st.resolve(nil, []string{"c", "d", "e"})
	require.Equal(t, []uint32{0, 1, 2}, fresh)
	require.NotEqual(t, gen, gen3)
	newKey := appendSymbolKey(nil, gen3, []uint32{0, 1}, fresh) // {"c": "d"}
	require.NotEqual(t, oldKey, newKey)
	require.Equal(t, byte(0), newKey[0], "2.0 keys never start like 1.0 label fields")
}

// BenchmarkSeriesCacheMemory reports the heap the write handler's series
// cache holds per entry (B/entry): the key is the series' encoded labels,
// here five labels as node_exporter sends them; the handle is the store's,
// counted with the store's series cache.
//
//	go test -run '^$' -bench SeriesCacheMemory -benchtime 1x ./adapter/
func BenchmarkSeriesCacheMemory(b *testing.B) {
	const n = 100_000
	keys := make([][]byte, n)
	for i := range keys {
		for _, l := range [][2]string{{"__name__", "node_cpu_seconds_total"}, {"cpu", fmt.Sprint(i % 64)},
			{"instance", fmt.Sprintf("node-%d.example.com:9100", i/64)}, {"job", "node"}, {"mode", "user"}} {
			label := appendField(appendField(nil, 0x0a, []byte(l[0])), 0x12, []byte(l[1]))
			keys[i] = appendField(keys[i], 0x0a, label) // prometheus.TimeSeries.labels
		}
	}
	handle := SeriesRef(1)
	var perEntry float64
	for b.Loop() {
		c := newSeriesCache(n, time.Minute)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, k := range keys {
			c.put(k, handle)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(c)
		perEntry = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	}
	b.ReportMetric(perEntry, "B/entry")
	b.ReportMetric(float64(len(keys[n-1])), "key-bytes")
}

// appendField appends a protobuf length-delimited field of one-byte tag.
func appendField(dst []byte, tag byte, b []byte) []byte {
	return append(binary.AppendUvarint(append(dst, tag), uint64(len(b))), b...)
}
