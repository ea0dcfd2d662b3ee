package frames

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// frame encodes msg as the adapter's chunkedWriter does.
func frame(msg []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(msg)))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(msg, crc32.MakeTable(crc32.Castagnoli)))
	return append(b, msg...)
}

func TestFrameReader(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 300) // a two-byte uvarint length
	stream := append(frame([]byte("hello")), frame(big)...)
	stream = append(stream, frame(nil)...)

	fr := NewReader(bytes.NewReader(stream), 1<<20)
	for _, want := range [][]byte{[]byte("hello"), big, {}} {
		got, err := fr.Next()
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := fr.Next()
	require.Equal(t, io.EOF, err)
}

func TestFrameReaderRejects(t *testing.T) {
	good := frame([]byte("payload"))
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-1] ^= 1
	for name, c := range map[string]struct {
		stream []byte
		max    uint64
		errSub string
	}{
		"bad checksum":   {corrupt, 1 << 20, "checksum"},
		"truncated body": {good[:len(good)-2], 1 << 20, "unexpected EOF"},
		"truncated crc":  {good[:3], 1 << 20, "unexpected EOF"},
		"over the limit": {good, 3, "limit"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(c.stream), c.max).Next()
			require.ErrorContains(t, err, c.errSub)
			// Only a wrong frame is corrupt; a cut stream may be read again.
			require.Equal(t, c.errSub != "unexpected EOF", errors.Is(err, ErrCorrupt))
		})
	}
}
