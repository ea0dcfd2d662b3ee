package index

import (
	"fmt"
	"hash/maphash"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// TestListingBytes: the weight a kept row_keys listing is charged in the
// cache (--kairosdb.row-keys-cache-bytes) is within 25 % of the heap it
// holds, for entries shaped like kairosload's (10 labels, one of them
// unique per series), so the flag bounds what it says.
func TestListingBytes(t *testing.T) {
	const n = 200_000
	entries := make([][]codec.Tag, n)
	for i := range entries {
		entries[i] = []codec.Tag{
			{Name: "cpu", Value: fmt.Sprint(i % 64)},
			{Name: "datacenter", Value: fmt.Sprintf("dc%d", i%4)},
			{Name: "env", Value: []string{"prod", "staging"}[i%2]},
			{Name: "instance", Value: fmt.Sprintf("10.%d.%d.%d:9100", i>>16&255, i>>8&255, i&255)},
			{Name: "job", Value: "node"},
			{Name: "mode", Value: []string{"idle", "user", "system", "iowait"}[i%4]},
			{Name: "rack", Value: fmt.Sprintf("r%02d", i%8)},
			{Name: "region", Value: []string{"eu-west-1", "us-east-1", "ap-southeast-2"}[i%3]},
			{Name: "team", Value: []string{"infra", "payments", "search"}[i%3]},
		}
	}
	var l *listing
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b := newListingBuilder(maphash.MakeSeed(), time.Now())
	b.maxBytes = 1 << 40
	for _, tags := range entries {
		b.addEntry("kairos_double", tags)
	}
	l = b.finish()
	b = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
	t.Logf("%d entries: charged %d B (%.0f B/entry), heap %.0f B (%.0f B/entry)", n, l.bytes, float64(l.bytes)/n, heap, heap/n)
	require.InDelta(t, heap, float64(l.bytes), 0.25*heap)
	runtime.KeepAlive(l)
	runtime.KeepAlive(entries)
}

// TestListingBuilderGivesUpPastItsBudget: a listing that could not be
// kept stops costing memory as soon as it is seen to be too large.
func TestListingBuilderGivesUpPastItsBudget(t *testing.T) {
	b := newListingBuilder(maphash.MakeSeed(), time.Now())
	b.maxBytes = 64 << 10
	for i := range 20_000 {
		b.addEntry("kairos_double", []codec.Tag{{Name: "instance", Value: fmt.Sprint(i)}, {Name: "job", Value: "node"}})
	}
	require.True(t, b.tooMany)
	require.Less(t, len(b.l.entType)+len(b.l.pairValue), 1, "nothing kept")
	require.Nil(t, b.finish())
}
