package main

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"
)

// frame encodes msg as the adapter's chunkedWriter does.
func frame(msg []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(msg)))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(msg, crc32.MakeTable(crc32.Castagnoli)))
	return append(b, msg...)
}

func TestDecodeChunked(t *testing.T) {
	chk := chunkenc.NewXORChunk()
	app, err := chk.Appender()
	require.NoError(t, err)
	for i := range 120 {
		app.Append(0, int64(1000+i*15000), value(1, i))
	}
	resp := prompb.ChunkedReadResponse{ChunkedSeries: []*prompb.ChunkedSeries{{
		Labels: []prompb.Label{{Name: "__name__", Value: "load_metric_0"}},
		Chunks: []prompb.Chunk{
			{MinTimeMs: 1000, MaxTimeMs: 1000 + 119*15000, Type: prompb.Chunk_XOR, Data: chk.Bytes()},
			{MinTimeMs: 1000, MaxTimeMs: 1000 + 119*15000, Type: prompb.Chunk_XOR, Data: chk.Bytes()},
		},
	}}}
	msg, err := resp.Marshal()
	require.NoError(t, err)
	st, err := decodeChunked(bytes.NewReader(append(frame(msg), frame(msg)...)))
	require.NoError(t, err)
	require.Equal(t, decodeStats{series: 2, samples: 480}, st)

	// A chunk whose samples lie outside its stated range is an error.
	resp.ChunkedSeries[0].Chunks[0].MaxTimeMs = 5000
	msg, err = resp.Marshal()
	require.NoError(t, err)
	_, err = decodeChunked(bytes.NewReader(frame(msg)))
	require.ErrorContains(t, err, "outside")
}

func TestDecodeSamples(t *testing.T) {
	resp := prompb.ReadResponse{Results: []*prompb.QueryResult{{Timeseries: []*prompb.TimeSeries{
		{Samples: []prompb.Sample{{Timestamp: 1, Value: 1}, {Timestamp: 2, Value: 2}}},
		{Samples: []prompb.Sample{{Timestamp: 1, Value: 3}}},
	}}}}
	raw, err := resp.Marshal()
	require.NoError(t, err)
	st, err := decodeSamples(bytes.NewReader(snappy.Encode(nil, raw)))
	require.NoError(t, err)
	require.Equal(t, decodeStats{series: 2, samples: 3}, st)
}

func TestReadRequest(t *testing.T) {
	body, err := readRequest(`{__name__=~"load_metric_.*", job!="x"}`, "1700000000000", 86400e9, "chunks")
	require.NoError(t, err)
	raw, err := snappy.Decode(nil, body)
	require.NoError(t, err)
	var req prompb.ReadRequest
	require.NoError(t, req.Unmarshal(raw))
	require.Len(t, req.Queries, 1)
	q := req.Queries[0]
	require.EqualValues(t, 1700000000000, q.StartTimestampMs)
	require.EqualValues(t, 1700000000000+86400000, q.EndTimestampMs)
	require.Equal(t, []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS}, req.AcceptedResponseTypes)
	require.ElementsMatch(t, []*prompb.LabelMatcher{
		{Type: prompb.LabelMatcher_RE, Name: "__name__", Value: "load_metric_.*"},
		{Type: prompb.LabelMatcher_NEQ, Name: "job", Value: "x"},
	}, q.Matchers)
}
