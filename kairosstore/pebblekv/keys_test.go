package pebblekv

import (
	"bytes"
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// The encodings must keep Cassandra's order: for components a and b,
// compare(enc(a)+x, enc(b)+y) == compare(a, b) whenever a != b, whatever
// follows (prefix-freeness).
func TestEscapedOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0x00, 0x01, 0x02, 0xfe, 0xff, 'a'}
	random := func() []byte {
		b := make([]byte, r.IntN(5))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return b
	}
	for range 20000 {
		a, b := random(), random()
		ea := append(appendEscaped([]byte{tableData}, a), random()...)
		eb := append(appendEscaped([]byte{tableData}, b), random()...)
		if !bytes.Equal(a, b) {
			require.Equal(t, bytes.Compare(a, b), bytes.Compare(ea, eb), "%x vs %x", a, b)
		}
		got, rest, err := cutEscaped(ea[1:])
		require.NoError(t, err)
		require.Equal(t, a, append([]byte{}, got...))
		require.Equal(t, ea[len(ea)-len(rest):], rest)

		// A prefix's encoding starts the encoding of every extension.
		p := appendEscapedPrefix(nil, string(a))
		require.Equal(t, bytes.HasPrefix(b, a), bytes.HasPrefix(appendEscaped(nil, b), p), "%x prefix of %x", a, b)
	}
}

func TestCutEscapedCorrupt(t *testing.T) {
	for _, src := range [][]byte{nil, {'a'}, {'a', 0}, {0, 2}, {0, 0xff}, {0, 0xff, 'a', 0}} {
		_, _, err := cutEscaped(src)
		require.ErrorIs(t, err, errCorrupt, "%x", src)
	}
}

func FuzzCutEscaped(f *testing.F) {
	f.Add([]byte{'a', 0, 0xff, 0, 1})
	f.Fuzz(func(t *testing.T, src []byte) {
		comp, rest, err := cutEscaped(src)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to the bytes it came from.
		require.Equal(t, src[:len(src)-len(rest)], appendEscaped(nil, comp))
	})
}

func TestInt64Order(t *testing.T) {
	values := []int64{math.MinInt64, -9223372035360000000, -1814400000, -2, -1, 0, 1, 1814400000, math.MaxInt64}
	for i := 1; i < len(values); i++ {
		a, b := appendInt64(nil, values[i-1]), appendInt64(nil, values[i])
		require.Negative(t, bytes.Compare(a, b), "%d < %d", values[i-1], values[i])
		require.Equal(t, values[i], decodeInt64(b))
	}
	require.Negative(t, bytes.Compare(appendInt32(nil, math.MinInt32), appendInt32(nil, -1)))
	require.Negative(t, bytes.Compare(appendInt32(nil, -1), appendInt32(nil, 0)))
}

func TestTags(t *testing.T) {
	tags := func(kv ...string) []codec.Tag {
		var ts []codec.Tag
		for i := 0; i < len(kv); i += 2 {
			ts = append(ts, codec.Tag{Name: kv[i], Value: kv[i+1]})
		}
		return ts
	}
	for _, tc := range []struct {
		name string
		in   []codec.Tag
		want []codec.Tag
	}{
		{"empty", nil, nil},
		{"sorted by name bytes", tags("b", "1", "a\x00", "2", "a", "3", "é", "4", "B", "5"), tags("B", "5", "a", "3", "a\x00", "2", "b", "1", "é", "4")},
		{"last duplicate wins", tags("a", "1", "b", "2", "a", "3"), tags("a", "3", "b", "2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			canon := canonicalTags(nil, tc.in)
			require.Equal(t, tc.want, canon)
			require.Equal(t, in, tc.in, "the caller's slice is untouched")

			enc := appendTags(nil, canon)
			got, rest, err := decodeTags(nil, append(enc, 'x'))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, []byte("x"), rest)
		})
	}

	// Frozen maps compare entry by entry, key then value; a shorter map
	// that is a prefix of a longer one sorts first.
	ordered := [][]codec.Tag{nil, tags("a", ""), tags("a", "", "b", "1"), tags("a", "\x00"), tags("a", "x"), tags("a\x00", ""), tags("b", "")}
	for i := 1; i < len(ordered); i++ {
		a, b := appendTags(nil, ordered[i-1]), appendTags(nil, ordered[i])
		require.Negative(t, bytes.Compare(a, b), "%v < %v", ordered[i-1], ordered[i])
	}
}

func TestSupersedes(t *testing.T) {
	live := func(wt int64, value string) entry { return entry{writeTime: wt, value: []byte(value)} }
	expiring := func(wt, expiry int64, value string) entry {
		return entry{writeTime: wt, expiry: expiry, value: []byte(value)}
	}
	tomb := func(wt, expiry int64) entry { return entry{tombstone: true, writeTime: wt, expiry: expiry} }
	for _, tc := range []struct {
		name     string
		new, old entry
		want     bool
	}{
		{"newer write", live(2, "a"), live(1, "b"), true},
		{"older write", live(1, "b"), live(2, "a"), false},
		{"older tombstone", tomb(1, 9), live(2, "a"), false},
		{"tie: tombstone beats live", tomb(1, 9), live(1, "a"), true},
		{"tie: live loses to tombstone", live(1, "z"), tomb(1, 9), false},
		{"tie: expiring beats plain", expiring(1, 5, "a"), live(1, "z"), true},
		{"tie: later expiry", expiring(1, 6, "a"), expiring(1, 5, "z"), true},
		{"tie: greater value", live(1, "b"), live(1, "a"), true},
		{"tie: smaller value", live(1, "a"), live(1, "b"), false},
		{"identical", live(1, "a"), live(1, "a"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.new.supersedes(tc.old))
		})
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range []entry{
		{writeTime: 1700000000000, value: []byte{}},
		{writeTime: -1, expiry: 1700000000, value: []byte{0, 1, 2}},
		{tombstone: true, writeTime: math.MaxInt64, expiry: 1},
	} {
		got, err := decodeEntry(e.append([]byte("prefix"))[len("prefix"):])
		require.NoError(t, err)
		require.Equal(t, e.tombstone, got.tombstone)
		require.Equal(t, e.writeTime, got.writeTime)
		require.Equal(t, e.expiry, got.expiry)
		require.Equal(t, 0, cmp.Compare(len(e.value), len(got.value)))
		require.Equal(t, string(e.value), string(got.value))
	}
	_, err := decodeEntry([]byte{0, 1})
	require.ErrorIs(t, err, errCorrupt)
	_, err = decodeEntry(make([]byte, entryHeaderLen+1)[:entryHeaderLen:entryHeaderLen])
	require.NoError(t, err)
	bad := make([]byte, entryHeaderLen)
	bad[0] = 2
	_, err = decodeEntry(bad)
	require.ErrorIs(t, err, errCorrupt)
}
