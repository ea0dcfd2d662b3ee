package cql

import (
	"runtime"
	"testing"
)

// BenchmarkRouteCacheMemory reports the heap the route cache holds per
// entry (B/entry): a partition key's hash and its host, whose string is
// shared by all keys of the host.
//
//	go test -run '^$' -bench RouteCacheMemory -benchtime 1x ./kairosstore/cql/
func BenchmarkRouteCacheMemory(b *testing.B) {
	const n = 100_000
	hosts := []string{"10.0.0.1:9042", "10.0.0.2:9042", "10.0.0.3:9042"}
	var perEntry float64
	for b.Loop() {
		c := newRouteCache()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range uint64(n) {
			c.hosts.Add(i*0x9e3779b97f4a7c15, hosts[i%3])
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(c)
		perEntry = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	}
	b.ReportMetric(perEntry, "B/entry")
}
