// Package frames reads the frames of a streamed remote-read answer
// (STREAMED_XOR_CHUNKS): a uvarint length, the big-endian CRC-32C of the
// message, the message. The importer and the load tool both read them.
package frames

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt marks a frame whose length is over the limit or whose
// checksum fails: the stream arrived, but it is wrong, so reading it again
// would not help (unlike a stream cut short).
var ErrCorrupt = errors.New("corrupt frame")

// Reader reads frames one after another.
type Reader struct {
	r   *bufio.Reader
	buf []byte
	max uint64
}

// NewReader reads frames of at most max bytes from r.
func NewReader(r io.Reader, max uint64) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next message, valid until the following call; io.EOF
// only at a frame boundary, so a stream cut inside a frame is
// io.ErrUnexpectedEOF. Errors of the stream itself come as they are; a
// corrupt frame's wrap ErrCorrupt.
func (f *Reader) Next() ([]byte, error) {
	size, err := binary.ReadUvarint(f.r)
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil {
		return nil, noEOF(err)
	}
	if size > f.max {
		return nil, fmt.Errorf("%w: frame of %d bytes, over the %d limit", ErrCorrupt, size, f.max)
	}
	var crc [4]byte
	if _, err := io.ReadFull(f.r, crc[:]); err != nil {
		return nil, noEOF(err)
	}
	if uint64(cap(f.buf)) < size {
		f.buf = make([]byte, size)
	}
	msg := f.buf[:size]
	if _, err := io.ReadFull(f.r, msg); err != nil {
		return nil, noEOF(err)
	}
	if got, want := crc32.Checksum(msg, castagnoli), binary.BigEndian.Uint32(crc[:]); got != want {
		return nil, fmt.Errorf("%w: frame checksum %08x, computed %08x", ErrCorrupt, want, got)
	}
	return msg, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
