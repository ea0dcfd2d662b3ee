package codec

import (
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/require"
)

const testW = defaultRowWidth

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

func tags(kv ...string) []Tag {
	var out []Tag
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Tag{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

// Row key vectors of §2.4 and Appendix A. Tags are given unsorted where the
// example is about ordering; the test sorts them first.
var rowKeyVectors = []struct {
	name string
	key  RowKey
	hex  string
}{
	{"EX1", RowKey{"sys.cpu", 1358985600000, TypeLong, tags("host", "server1")},
		"7379732e637075 00 0000013c69da9c00 00 0b 6b6169726f735f6c6f6e67 686f73743d736572766572313a"},
	{"EX2 escaping and order", RowKey{"m", 1698278400000, TypeDouble, tags("dc", "x:y", "a:b", "c=d")},
		"6d 00 0000018b6947e000 00 0d 6b6169726f735f646f75626c65 613a3a623d633d3d643a 64633d783d3a793a"},
	{"EX3 ts -1", RowKey{"neg", -2, TypeString, tags("h", "a")},
		"6e6567 00 fffffffffffffffe 00 0d 6b6169726f735f737472696e67 683d613a"},
	{"ts -W", RowKey{"neg", -testW, TypeString, tags("h", "a")},
		"6e656700ffffffff93da7400000d6b6169726f735f737472696e67683d613a"},
	{"ts -W-1", RowKey{"neg", -testW - 2, TypeString, tags("h", "a")},
		"6e656700ffffffff93da73fe000d6b6169726f735f737472696e67683d613a"},
	{"EX4 legacy", RowKey{"sys.cpu", 1358985600000, TypeLegacy, tags("host", "server1")},
		"7379732e637075 00 0000013c69da9c00 686f73743d736572766572313a"},
	{"EX5 no tags", RowKey{"nt", 0, TypeLong, nil},
		"6e74 00 0000000000000000 00 0b 6b6169726f735f6c6f6e67"},
	{"EX6 Java order", RowKey{"été", 0, TypeLong, tags("\uFFFF", "1", "😀", "2", "B", "3", "a", "4")},
		"c3a974c3a9 00 0000000000000000 00 0b 6b6169726f735f6c6f6e67 423d333a 613d343a f09f98803d323a efbfbf3d313a"},
	{"SECONDS row", RowKey{"s", 1699998451200, TypeLong, tags("h", "a")},
		"73000000018bcfcdc600000b6b6169726f735f6c6f6e67683d613a"},
	{"null type", RowKey{"m", 0, TypeNull, tags("a", "b")},
		"6d 00 0000000000000000 00 04 6e756c6c 613d623a"},
	{"empty names and values", RowKey{"", 0, "", tags("", "")},
		"00 0000000000000000 00 00 3d3a"},
	{"escape chars everywhere", RowKey{"m", 0, TypeLong, tags("::==", "==::")},
		"6d 00 0000000000000000 00 0b 6b6169726f735f6c6f6e67 3a3a3a3a3a3d3a3d 3d 3d3d3d3d3d3a3d3a 3a"},
}

func TestAppendRowKey(t *testing.T) {
	for _, tc := range rowKeyVectors {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.key
			k.Tags = slices.Clone(k.Tags)
			SortTags(k.Tags)
			require.NoError(t, k.Validate())
			want := unhex(t, tc.hex)

			prefix := []byte("prefix")
			got := AppendRowKey(prefix, k)
			require.Equal(t, "prefix", string(got[:len(prefix)]))
			require.Equal(t, hex.EncodeToString(want), hex.EncodeToString(got[len(prefix):]))

			parsed, err := ParseRowKey(want)
			require.NoError(t, err)
			require.Equal(t, k, parsed)
		})
	}
}

func TestAppendLegacyIndexBound(t *testing.T) {
	for _, tc := range []struct {
		name    string
		metric  string
		rowTime int64
		end     bool
		hex     string
	}{
		{"§7.2 start row 0", "sys.cpu", 0, false, "7379732e637075 00 0000000000000000 0000"},
		{"§7.2 end row W", "sys.cpu", testW, true, "7379732e637075 00 000000006c258c00 ff00"},
		{"negative row", "m", -2, false, "6d 00 fffffffffffffffe 0000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := AppendLegacyIndexBound([]byte{0xAA}, tc.metric, tc.rowTime, tc.end)
			require.Equal(t, "aa"+strings.ReplaceAll(tc.hex, " ", ""), hex.EncodeToString(got))
		})
	}
	// The start bound is the key of type "" with no tags (§7.2).
	require.Equal(t,
		AppendRowKey(nil, RowKey{Metric: "x", RowTime: 5}),
		AppendLegacyIndexBound(nil, "x", 5, false))
}

func TestParseRowKey(t *testing.T) {
	head := "6d 00 0000000000000001 00 0b 6b6169726f735f6c6f6e67" // m, rowTime 1, kairos_long
	for _, tc := range []struct {
		name string
		hex  string
		tags []Tag
	}{
		{"no tags", head, nil},
		{"final pair without ':' dropped", head + hex.EncodeToString([]byte("a=b:c=d")), tags("a", "b")},
		{"final name without '=' dropped", head + hex.EncodeToString([]byte("a=b:c")), tags("a", "b")},
		{"only an unfinished pair", head + hex.EncodeToString([]byte("a=b")), nil},
		{"escaped ':' in name", head + hex.EncodeToString([]byte("a::b=c:")), tags("a:b", "c")},
		{"escaped '=' in name", head + hex.EncodeToString([]byte("a:=b=c:")), tags("a=b", "c")},
		{"escaped '=' in value", head + hex.EncodeToString([]byte("a=b==c:")), tags("a", "b=c")},
		{"escaped ':' in value", head + hex.EncodeToString([]byte("a=b=:c:")), tags("a", "b:c")},
		{"escape makes any char literal", head + hex.EncodeToString([]byte("a:xb=c=yd:")), tags("axb", "cyd")},
		{"escaped multi-byte char", head + hex.EncodeToString([]byte(":é=a=😀:")), tags("é", "a😀")},
		{"'=' inside value state is an escape", head + hex.EncodeToString([]byte("a=b=:")), nil},
		{"escape at the very end", head + hex.EncodeToString([]byte("a=b:c:")), tags("a", "b")},
		{"empty name and value", head + hex.EncodeToString([]byte("=:")), tags("", "")},
		{"unsorted key sorted like TreeMap", head + hex.EncodeToString([]byte("b=1:a=2:")), tags("a", "2", "b", "1")},
		{"repeated name: last wins", head + hex.EncodeToString([]byte("a=1:b=2:a=3:")), tags("a", "3", "b", "2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParseRowKey(unhex(t, tc.hex))
			require.NoError(t, err)
			require.Equal(t, RowKey{Metric: "m", RowTime: 1, DataType: TypeLong, Tags: tc.tags}, k)
		})
	}
}

func TestParseRowKeyLegacy(t *testing.T) {
	for _, tc := range []struct {
		name string
		hex  string
		want RowKey
	}{
		{"EX4", "7379732e637075 00 0000013c69da9c00 686f73743d736572766572313a",
			RowKey{"sys.cpu", 1358985600000, TypeLegacy, tags("host", "server1")}},
		{"legacy without tags", "6d 00 0000000000000000", RowKey{"m", 0, TypeLegacy, nil}},
		{"empty type block", "6d 00 0000000000000000 0000", RowKey{"m", 0, "", nil}},
		{"unknown type", "6d 00 0000000000000000 0003 666f6f 613d623a", RowKey{"m", 0, "foo", tags("a", "b")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParseRowKey(unhex(t, tc.hex))
			require.NoError(t, err)
			require.Equal(t, tc.want, k)
		})
	}
}

func TestParseRowKeyErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		hex  string
	}{
		{"empty", ""},
		{"no NUL", "6d6d"},
		{"short row time", "6d 00 00000000000000"},
		{"type block without length", "6d 00 0000000000000000 00"},
		{"negative type length", "6d 00 0000000000000000 00 80 6b"},
		{"type length past end", "6d 00 0000000000000000 00 05 6b6b"},
		{"metric not UTF-8", "ff 00 0000000000000000 00 00"},
		{"type not UTF-8", "6d 00 0000000000000000 00 01 ff"},
		{"tags not UTF-8", "6d 00 0000000000000000 00 00 613dff3a"},
		// §2.1: the 0xFF end marker is not a type block, so the parser takes
		// FF 00 as a legacy tag string, which is not UTF-8.
		{"end search key", "6d 00 0000000000000000 ff00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRowKey(unhex(t, tc.hex))
			require.Error(t, err)
		})
	}
}

func TestRowKeyValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  RowKey
		ok   bool
	}{
		{"fine", RowKey{"m", 0, TypeLong, tags("a", "1", "b", "2")}, true},
		{"127-byte type", RowKey{"m", 0, strings.Repeat("t", 127), nil}, true},
		{"NUL in metric", RowKey{"m\x00", 0, TypeLong, nil}, false},
		{"128-byte type", RowKey{"m", 0, strings.Repeat("t", 128), nil}, false},
		{"unsorted tags", RowKey{"m", 0, TypeLong, tags("b", "1", "a", "2")}, false},
		{"duplicate tags", RowKey{"m", 0, TypeLong, tags("a", "1", "a", "2")}, false},
		{"invalid UTF-8 value", RowKey{"m", 0, TypeLong, tags("a", "\xff")}, false},
		{"legacy tag name starting with NUL", RowKey{"m", 0, TypeLegacy, tags("\x00a", "1")}, false},
		{"typed tag name starting with NUL", RowKey{"m", 0, TypeLong, tags("\x00a", "1")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.key.Validate()
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			got, err := ParseRowKey(AppendRowKey(nil, tc.key))
			require.NoError(t, err)
			require.Equal(t, tc.key, got)
		})
	}
}

// javaOrderRef compares like String.compareTo by building UTF-16.
func javaOrderRef(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

var javaOrderStrings = []string{
	"", "a", "B", "ab", "aé", "é", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uffff", "\ufffd",
	"😀", "😀a", "😀\uffff", "\U00010000", "\U0010ffff", "a\U00010000", "a\uffff", "a\x00", "\x00",
	"host", "host_name", "hosts", "data_center", "ü", "zz", "Ω",
}

func TestJavaLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		less bool
	}{
		{"a", "b", true},
		{"B", "a", true},
		{"a", "a", false},
		{"a", "ab", true},
		{"ab", "a", false},
		{"", "a", true},
		{"😀", "\uFFFF", true},  // §2.2: surrogate pair before U+E000-U+FFFF
		{"\uFFFF", "😀", false}, // byte order would say the opposite
		{"\ue000", "\U00010000", false},
		{"\ud7ff", "\U00010000", true},
		{"\U00010000", "\U0010ffff", true},
		{"a😀", "a\uffff", true},
	} {
		require.Equal(t, tc.less, javaLess(tc.a, tc.b), "%q < %q", tc.a, tc.b)
	}
	for _, a := range javaOrderStrings {
		for _, b := range javaOrderStrings {
			require.Equal(t, javaOrderRef(a, b), javaCompare(a, b), "%q vs %q", a, b)
		}
	}
}

func TestJavaCompareInvalidUTF8(t *testing.T) {
	// Invalid bytes sort after all runes; the order stays total and
	// antisymmetric.
	strs := []string{"\xff", "\xfe", "a\xff", "a", "\uffff", "\xc3", "\xc3\xa9", "\xc3A"}
	for _, a := range strs {
		require.Equal(t, 0, javaCompare(a, a))
		for _, b := range strs {
			require.Equal(t, -javaCompare(b, a), javaCompare(a, b), "%q vs %q", a, b)
			for _, c := range strs {
				if javaCompare(a, b) < 0 && javaCompare(b, c) < 0 {
					require.Negative(t, javaCompare(a, c), "%q < %q < %q", a, b, c)
				}
			}
		}
	}
}

func TestSortTags(t *testing.T) {
	got := tags("\uFFFF", "1", "😀", "2", "B", "3", "a", "4", "data_center", "DC1", "host", "server1")
	SortTags(got)
	require.Equal(t, tags("B", "3", "a", "4", "data_center", "DC1", "host", "server1", "😀", "2", "\uFFFF", "1"), got)
}

// TestEscapedLen holds EscapedLen, which translate uses to bound key sizes,
// to what AppendRowKey writes.
func TestEscapedLen(t *testing.T) {
	for _, s := range []string{"", "a", ":", "=", "a:b=c", "::==", "😀:"} {
		require.Equal(t, len(appendEscaped(nil, s, ':')), EscapedLen(s), "%q", s)
	}
}
