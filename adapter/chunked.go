package adapter

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"net/http"

	"github.com/prometheus/prometheus/prompb"
)

// castagnoli is the CRC-32C table of the frame checksums. crc32.MakeTable
// returns a shared read-only table for Castagnoli, so this is a constant in
// all but syntax.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frameHeaderMax is the largest frame header: uvarint length + CRC.
const frameHeaderMax = binary.MaxVarintLen64 + 4

// chunkedWriter writes STREAMED_XOR_CHUNKS frames (docs/remote-protocols.md §5.4;
// Prometheus storage/remote/chunked.go): uvarint(len(msg)) ‖ big-endian
// CRC-32C(msg) ‖ msg, one Write and one Flush per frame so the client gets
// each series as soon as it is ready.
type chunkedWriter struct {
	w       io.Writer
	f       http.Flusher
	buf     []byte // header room + marshalled message, reused across frames
	started bool   // a byte went out: errors can no longer change the status
}

func (c *chunkedWriter) writeFrame(m *prompb.ChunkedReadResponse) error {
	size := m.Size()
	need := frameHeaderMax + size
	if cap(c.buf) < need {
		c.buf = make([]byte, need)
	}
	buf := c.buf[:need]
	// Marshal after the header room, then put the header right before the
	// message, so the frame is one contiguous slice.
	n, err := m.MarshalToSizedBuffer(buf[frameHeaderMax:])
	if err != nil {
		return err
	}
	msg := buf[need-n:]
	var hdr [frameHeaderMax]byte
	k := binary.PutUvarint(hdr[:], uint64(n))
	binary.BigEndian.PutUint32(hdr[k:], crc32.Checksum(msg, castagnoli))
	start := need - n - k - 4
	copy(buf[start:], hdr[:k+4])

	c.started = true
	if _, err := c.w.Write(buf[start:]); err != nil {
		return err
	}
	c.f.Flush()
	return nil
}
