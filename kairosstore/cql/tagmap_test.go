package cql

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// TestParseTagMap covers the map<text, text> serialization the row_keys
// scan parses itself (protocol v4+: 4-byte count, 4-byte lengths).
func TestParseTagMap(t *testing.T) {
	enc := func(n int32, parts ...string) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(n))
		for _, p := range parts {
			b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
			b = append(b, p...)
		}
		return b
	}
	cases := []struct {
		name    string
		in      []byte
		want    []codec.Tag
		wantErr string
	}{
		{"null", nil, nil, ""},
		{"empty", enc(0), nil, ""},
		{"two", enc(2, "dc", "x:y", "host", "a=b"), []codec.Tag{{Name: "dc", Value: "x:y"}, {Name: "host", Value: "a=b"}}, ""},
		{"empty value and NUL", enc(2, "e", "", "n", "a\x00b"), []codec.Tag{{Name: "e", Value: ""}, {Name: "n", Value: "a\x00b"}}, ""},
		{"utf-8", enc(1, "😀", "vé"), []codec.Tag{{Name: "😀", Value: "vé"}}, ""},
		{"short count", []byte{0, 0, 1}, nil, "truncated map"},
		{"count beyond the bytes", enc(1000, "a", "b"), nil, "map of 1000 entries"},
		{"negative count", enc(-1), nil, "map of -1 entries"},
		{"missing value", append(enc(1, "abcdef"), 0, 0), nil, "truncated map"},
		{"element beyond the end", append(enc(1, "a"), 0, 0, 0, 9, 'x'), nil, "map element of 9 bytes in 1"},
		{"negative element", append(enc(1, "a"), 0xff, 0xff, 0xff, 0xff), nil, "map element of -1 bytes"},
		{"trailing bytes", append(enc(1, "a", "b"), 7), nil, "1 bytes after the map"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseTagMap(nil, c.in)
			if c.wantErr != "" {
				require.ErrorContains(t, err, c.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}
