package codec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMurmur3x86_32(t *testing.T) {
	// Reference vectors of MurmurHash3_x86_32.
	for _, tc := range []struct {
		in   string
		seed uint32
		want uint32
	}{
		{"", 0, 0},
		{"", 1, 0x514e28b7},
		{"", 0xffffffff, 0x81f16f39},
		{"\x00\x00\x00\x00", 0, 0x2362f9de},
		{"a", 0x9747b28c, 0x7fa09ea6},
		{"abc", 0x9747b28c, 0xc84a62dd},
		{"abcd", 0x9747b28c, 0xf0478627},
		{"aaaa", 0x9747b28c, 0x5a97808a},
		{"Hello, world!", 0x9747b28c, 0x24884cba},
		{"The quick brown fox jumps over the lazy dog", 0x9747b28c, 0x2fa826cd},
		{"hostserver1", 0, 0x814b33d4}, // §6.2
	} {
		t.Run(fmt.Sprintf("%q/%x", tc.in, tc.seed), func(t *testing.T) {
			require.Equal(t, fmt.Sprintf("%08x", tc.want), fmt.Sprintf("%08x", murmur3x86_32([]byte(tc.in), tc.seed)))
		})
	}
}

func TestMurmurStreaming(t *testing.T) {
	// Feeding the input in any split gives the one-shot hash.
	in := "The quick brown fox jumps over the lazy dog"
	want := murmur3x86_32([]byte(in), 7)
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			m := murmur32{h: 7}
			murmurWrite(&m, in[:i])
			murmurWrite(&m, []byte(in[i:j]))
			murmurWrite(&m, in[j:])
			require.Equal(t, want, m.sum(), "split %d %d", i, j)
		}
	}
}

func TestTagCollectionHash(t *testing.T) {
	for _, tc := range []struct {
		name string
		tags []Tag
		want int32
	}{ // §6.2
		{"one tag", tags("host", "server1"), -2125777964},
		{"two tags", tags("data_center", "DC1", "host", "server1"), -934437578},
		{"escape chars hashed raw", tags("a:b", "c=d", "dc", "x:y"), -1644294476},
		{"emoji", tags("😀", "vé"), 816871731},
		{"none", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, TagCollectionHash(tc.tags))
			var concat strings.Builder
			for _, tg := range tc.tags {
				concat.WriteString(tg.Name + tg.Value)
			}
			require.Equal(t, tc.want, int32(murmur3x86_32([]byte(concat.String()), 0)))
		})
	}
	// The hex forms of §6.2.
	require.Equal(t, uint32(0x814b33d4), uint32(TagCollectionHash(tags("host", "server1"))))
	require.Equal(t, uint32(0xc84d9d36), uint32(TagCollectionHash(tags("data_center", "DC1", "host", "server1"))))
}

func TestSingleTagPair(t *testing.T) {
	require.Equal(t, "host=server1", SingleTagPair(Tag{Name: "host", Value: "server1"}))
	require.Equal(t, "a:b=c=d", SingleTagPair(Tag{Name: "a:b", Value: "c=d"}))
	require.Equal(t, "=", SingleTagPair(Tag{}))
}
