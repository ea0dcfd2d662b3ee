package adapter

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	// golang/snappy rather than klauspost/compress/snappy: it decodes as fast
	// and encodes faster (klauspost's snappy.Encode is s2's "better" mode;
	// BENCHMARKS.md, BenchmarkSnappy). It is also what Prometheus's own sender
	// and reader use.
	"github.com/golang/snappy"

	"github.com/kairos-remote/kairos-adapter/remotewrite"
)

// writeProto is the protobuf message a remote-write request carries.
type writeProto int

const (
	writeV1 writeProto = iota + 1 // prometheus.WriteRequest (remote write 1.0)
	writeV2                       // io.prometheus.write.v2.Request (remote write 2.0)
)

func (p writeProto) String() string {
	if p == writeV2 {
		return "2.0"
	}
	return "1.0"
}

const (
	protobufMediaType = "application/x-protobuf"
	protoV1           = remotewrite.MessageV1
	protoV2           = remotewrite.MessageV2
	protoRead         = remotewrite.MessageRead
)

// parseWriteContentType picks the message from Content-Type (RW 2.0 spec
// §"Content-Type"; docs/remote-protocols.md §3.1). mime.ParseMediaType follows RFC 9110,
// so `application/x-protobuf; proto="io.prometheus.write.v2.Request"` with a
// space and quotes is 2.0 too, where a naive split on ";" and "=" would fall
// back to 1.0 and store nothing. A missing header means 1.0, as in
// Prometheus's own receiver. Everything else is 415 so senders can downgrade.
func parseWriteContentType(ct string) (writeProto, error) {
	if strings.TrimSpace(ct) == "" {
		return writeV1, nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return 0, fmt.Errorf("cannot parse Content-Type %q: %w; expected %s;proto=%s or %s;proto=%s", truncate(ct), err, protobufMediaType, protoV1, protobufMediaType, protoV2)
	}
	if mt != protobufMediaType {
		return 0, fmt.Errorf("unsupported Content-Type %q; expected %s;proto=%s or %s;proto=%s", truncate(ct), protobufMediaType, protoV1, protobufMediaType, protoV2)
	}
	proto, ok := params["proto"]
	switch {
	case !ok, proto == protoV1:
		return writeV1, nil
	case proto == protoV2:
		return writeV2, nil
	default:
		return 0, fmt.Errorf("unsupported proto=%q in Content-Type; this server accepts %s and %s", truncate(proto), protoV1, protoV2)
	}
}

// checkSnappyEncoding accepts only the snappy block format. A missing
// Content-Encoding means identity (RFC 9110), that is an uncompressed
// protobuf, which neither remote-write version allows; Prometheus always sends
// the header, so we answer 415 for both versions instead of guessing.
// Content codings are case-insensitive (RFC 9110 §8.4.1).
func checkSnappyEncoding(ce string) error {
	ce = strings.TrimSpace(ce)
	if strings.EqualFold(ce, "snappy") {
		return nil
	}
	if ce == "" {
		return newRequestError(http.StatusUnsupportedMediaType, "missing Content-Encoding; only snappy (block format) is accepted")
	}
	return newRequestError(http.StatusUnsupportedMediaType, fmt.Sprintf("unsupported Content-Encoding %q; only snappy (block format) is accepted", truncate(ce)))
}

// maxPooledBuffer keeps one huge request from pinning its buffers in a pool.
const maxPooledBuffer = 8 << 20

// readBody reads the whole (compressed) body into buf, refusing more than
// limit bytes with 413 before reading them when Content-Length tells, and
// through http.MaxBytesReader otherwise.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, buf []byte) ([]byte, error) {
	if r.ContentLength > limit {
		return buf, newRequestError(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes exceeds the %d bytes limit", r.ContentLength, limit))
	}
	if n := int(r.ContentLength); n > 0 && cap(buf) < n {
		buf = make([]byte, 0, n)
	}
	buf = buf[:0]
	body := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return buf, newRequestError(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds the %d bytes limit", limit))
			}
			return buf, newRequestError(http.StatusBadRequest, "cannot read request body: "+err.Error())
		}
	}
}

// snappyFramedMagic opens a snappy stream in the framed format (a stream
// identifier chunk), which remote write forbids since Prometheus 1.7.
var snappyFramedMagic = []byte("\xff\x06\x00\x00sNaPpY")

// decodeSnappy decodes a snappy block into dst (reused when large enough).
// The declared decoded length is checked against limit before allocating, so
// a tiny body cannot make us allocate gigabytes (413). Corrupt input is 400,
// with a hint for the two usual mistakes (framed snappy, gzip).
func decodeSnappy(dst, src []byte, limit int64) ([]byte, error) {
	if bytes.HasPrefix(src, snappyFramedMagic) {
		return dst, newRequestError(http.StatusBadRequest, "body is snappy framed (stream) format; remote read and write need the snappy block format")
	}
	n, err := snappy.DecodedLen(src)
	if err != nil {
		return dst, newRequestError(http.StatusBadRequest, corruptSnappyMessage(src, err))
	}
	if int64(n) > limit {
		return dst, newRequestError(http.StatusRequestEntityTooLarge, fmt.Sprintf("decoded body of %d bytes (declared by the snappy header) exceeds the %d bytes limit", n, limit))
	}
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	// Both snappy packages reuse dst only when it is long enough, so pass
	// its full capacity.
	out, err := snappy.Decode(dst[:cap(dst)], src)
	if err != nil {
		return dst, newRequestError(http.StatusBadRequest, corruptSnappyMessage(src, err))
	}
	return out, nil
}

func corruptSnappyMessage(src []byte, err error) string {
	switch {
	case len(src) == 0:
		return "empty body; expected a snappy block-compressed protobuf (an empty message compresses to one 0x00 byte)"
	case bytes.HasPrefix(src, []byte{0x1f, 0x8b}):
		return "body looks gzip-compressed, but Content-Encoding says snappy: " + err.Error()
	default:
		return "cannot decode snappy block: " + err.Error()
	}
}
