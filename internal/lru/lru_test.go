package lru

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/testclock"
)

// op is one step of a scenario: add a key, look one up (want says whether
// it must hit), or let time pass.
type op struct {
	add, get string
	want     bool
	wait     time.Duration
}

func TestCache(t *testing.T) {
	const maxAge = time.Minute
	for _, tc := range []struct {
		name string
		size int
		ops  []op
	}{
		{"miss on empty", 2, []op{{get: "a"}}},
		{"hit after add", 2, []op{{add: "a"}, {get: "a", want: true}, {get: "b"}}},
		{"two generations hold 2×size", 2, []op{
			{add: "a"}, {add: "b"}, {add: "c"}, {add: "d"},
			{get: "d", want: true}, {get: "c", want: true}, {get: "a", want: true},
			{get: "b"}, // dropped when a moved into a full generation
		}},
		{"the oldest generation is dropped", 2, []op{
			{add: "a"}, {add: "b"}, {add: "c"}, {add: "d"}, {add: "e"},
			{get: "a"}, {get: "b"}, {get: "e", want: true}, {get: "c", want: true},
		}},
		{"a hit in the old generation keeps the entry", 2, []op{
			{add: "a"}, {add: "b"}, {add: "c"},
			{get: "a", want: true}, // moves a into c's generation
			{add: "d"},             // a and c full: a, c become old
			{add: "e"},
			{get: "a", want: true}, {get: "b"},
		}},
		{"expires maxAge after it was added", 2, []op{
			{add: "a"}, {wait: maxAge - time.Nanosecond}, {get: "a", want: true},
			{wait: time.Nanosecond}, {get: "a"},
		}},
		{"a hit does not extend the age", 4, []op{
			{add: "a"}, {wait: maxAge / 2}, {get: "a", want: true},
			{wait: maxAge / 2}, {get: "a"},
		}},
		{"moving forward keeps the age", 1, []op{
			{add: "a"}, {wait: maxAge / 2}, {add: "b"}, {get: "a", want: true}, // a promoted from old
			{wait: maxAge / 2}, {get: "a"}, {get: "b", want: true},
		}},
		{"adding again renews", 4, []op{
			{add: "a"}, {wait: maxAge}, {get: "a"}, {add: "a"}, {get: "a", want: true},
		}},
		{"an expired old entry is not moved forward", 1, []op{
			{add: "a"}, {add: "b"}, {wait: maxAge}, {get: "a"}, {add: "c"}, {get: "a"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testclock.New(time.Unix(1_700_000_000, 0))
			c := New[string, int](tc.size, maxAge, clk.Now)
			for i, o := range tc.ops {
				switch {
				case o.add != "":
					c.Add(o.add, i+1)
				case o.get != "":
					_, ok := c.Get(o.get)
					require.Equal(t, o.want, ok, "step %d: Get(%q)", i, o.get)
					// The three lookups agree.
					_, ok = GetBytes(c, []byte(o.get))
					require.Equal(t, o.want, ok, "step %d: GetBytes(%q)", i, o.get)
					got := AppendBytes(c, nil, [][]byte{[]byte(o.get), nil})
					require.Equal(t, o.want, got[0] != 0, "step %d: AppendBytes(%q)", i, o.get)
					require.Zero(t, got[1], "a nil key is a miss")
				default:
					clk.Advance(o.wait)
				}
				require.LessOrEqual(t, c.Len(), 2*tc.size, "step %d", i)
			}
		})
	}
}

func TestCacheValues(t *testing.T) {
	c := New[string, string](10, time.Minute, nil)
	c.Add("a", "1")
	c.AddAll([]string{"b", "c"}, "2")
	c.Add("a", "3")
	v, ok := c.Get("a")
	require.True(t, ok)
	require.Equal(t, "3", v, "the last value added wins")
	require.Equal(t, []string{"3", "2", "", "2"}, AppendBytes(c, nil, [][]byte{[]byte("a"), []byte("b"), []byte("x"), []byte("c")}))
	c.Clear()
	require.Zero(t, c.Len())
	_, ok = c.Get("b")
	require.False(t, ok)
}

func TestNewPanicsOnNonPositive(t *testing.T) {
	require.Panics(t, func() { New[string, int](0, time.Minute, nil) })
	require.Panics(t, func() { New[string, int](1, 0, nil) })
}

// TestNoAllocs: the write path looks up row keys and encoded labels it
// holds as []byte for every series of every request.
func TestNoAllocs(t *testing.T) {
	c := New[string, int](100, time.Minute, nil)
	keys := [][]byte{[]byte("k1"), []byte("k2"), nil}
	for _, k := range keys[:2] {
		c.Add(string(k), 1)
	}
	dst := make([]int, 0, len(keys))
	for _, tc := range []struct {
		name string
		fn   func()
	}{
		{"GetBytes", func() { GetBytes(c, keys[0]) }},
		{"GetBytes miss", func() { GetBytes(c, []byte("none")) }},
		{"AppendBytes", func() { dst = AppendBytes(c, dst[:0], keys) }},
	} {
		require.Zero(t, testing.AllocsPerRun(100, tc.fn), tc.name)
	}
}

// TestConcurrent runs lookups, adds and clears at once, for the race
// detector.
func TestConcurrent(t *testing.T) {
	c := New[string, int](16, time.Minute, nil)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			var dst []int
			for i := range 2000 {
				k := fmt.Sprint(i % 50)
				switch (i + g) % 4 {
				case 0:
					c.Add(k, i)
				case 1:
					c.Get(k)
				case 2:
					dst = AppendBytes(c, dst[:0], [][]byte{[]byte(k)})
				default:
					if i%500 == 0 {
						c.Clear()
					}
					GetBytes(c, []byte(k))
				}
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, c.Len(), 32)
}

func BenchmarkGetBytes(b *testing.B) {
	c := New[string, int](1<<16, time.Minute, nil)
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, `{__name__="m",instance="host-%d:9100",job="node"}`, i)
		c.Add(string(keys[i]), i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		GetBytes(c, keys[i&(len(keys)-1)])
		i++
	}
}

// TestWeighted: a weighted cache rotates a generation when the next value
// would take it past size, keeps at most 2 × size in all, refuses a value
// heavier than size (dropping an older value of that key), and Remove and
// Clear give the weight back.
func TestWeighted(t *testing.T) {
	c := NewWeighted[string, int](10, time.Minute, nil, func(v int) int64 { return int64(v) })
	held := func() int64 {
		c.mu.RLock()
		defer c.mu.RUnlock()
		var w int64
		for _, e := range c.cur {
			w += int64(e.v)
		}
		for _, e := range c.old {
			w += int64(e.v)
		}
		return w
	}
	c.Add("a", 6)
	c.Add("b", 3)
	require.Equal(t, int64(9), held())
	c.Add("c", 4) // 13 > 10: a and b become the old generation
	for _, k := range []string{"a", "b", "c"} {
		_, ok := c.Get(k) // a and b are promoted in turn
		require.True(t, ok, k)
	}
	require.LessOrEqual(t, held(), int64(20))
	c.Add("d", 9)
	c.Add("e", 9)
	require.LessOrEqual(t, held(), int64(20))
	_, ok := c.Get("e")
	require.True(t, ok)

	c.Add("e", 11) // heavier than a generation: not kept, nor its old value
	_, ok = c.Get("e")
	require.False(t, ok)

	c.Remove("d")
	_, ok = c.Get("d")
	require.False(t, ok)
	c.Clear()
	require.Zero(t, held())
	c.Add("f", 10) // a whole generation's weight fits in an empty one
	v, ok := c.Get("f")
	require.True(t, ok)
	require.Equal(t, 10, v)
}

// TestWeight: the weight held counts both generations, an entry promoted
// from the old one once.
func TestWeight(t *testing.T) {
	c := NewWeighted[string, int](10, time.Minute, nil, func(v int) int64 { return int64(v) })
	c.Add("a", 6)
	c.Add("b", 3)
	require.Equal(t, int64(9), c.Weight())
	c.Add("c", 4) // a and b become the old generation
	require.Equal(t, int64(13), c.Weight())
	_, ok := c.Get("a") // promoted: in both maps, counted once
	require.True(t, ok)
	require.Equal(t, int64(13), c.Weight())
	c.Remove("b")
	require.Equal(t, int64(10), c.Weight())
	c.Clear()
	require.Zero(t, c.Weight())

	n := New[int, string](2, time.Minute, nil)
	n.AddAll([]int{1, 2, 3}, "x")
	require.Equal(t, int64(3), n.Weight(), "entries, for a cache of New")
}
