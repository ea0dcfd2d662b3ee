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

// knownSeriesKeys are the 1.0 cache keys of n series of ten labels shaped
// as kairosload's (about 200 bytes each), in the order a round sends them.
func knownSeriesKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		j := i / 100
		for _, l := range [][2]string{{"__name__", fmt.Sprintf("load_metric_%d", i%100)}, {"cpu", fmt.Sprint(j % 64)},
			{"device", "nvme0n1"}, {"env", "prod"}, {"instance", fmt.Sprintf("10.%d.%d.%d:9100", j>>16&255, j>>8&255, j&255)},
			{"job", "node"}, {"kernel", "6.8.0-45-generic"}, {"mode", "user"}, {"region", "eu-west-1"}, {"zone", "eu-west-1a"}} {
			label := appendField(appendField(nil, 0x0a, []byte(l[0])), 0x12, []byte(l[1]))
			keys[i] = appendField(keys[i], 0x0a, label)
		}
	}
	return keys
}

// BenchmarkSeriesCacheKnown is the handler's series cache under issue #31's
// known-series load: 100,000 series cached, looked up 2,000 a request in
// the order they were sent, every lookup a hit.
func BenchmarkSeriesCacheKnown(b *testing.B) {
	const (
		n          = 100_000
		perRequest = 2_000
	)
	keys := knownSeriesKeys(n)
	c := newSeriesCache(200_000, time.Hour)
	for i, k := range keys {
		c.put(k, SeriesRef(i+1))
	}
	var refs []SeriesRef
	next := 0
	for b.Loop() {
		refs = c.lookup(refs[:0], keys[next:next+perRequest])
		if refs[0] != SeriesRef(next+1) || refs[perRequest-1] != SeriesRef(next+perRequest) {
			b.Fatal("a miss", refs[0], refs[perRequest-1])
		}
		next = (next + perRequest) % n
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perRequest), "ns/lookup")
}
