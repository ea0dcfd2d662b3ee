package copier

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

// Digest sums up a table's rows whatever order an engine lists them in:
// how many, and the sum of a 128-bit hash of each row, so that two stores
// hold the same rows when their digests are equal. A row's hash covers its
// key and value, and, where both engines read them per row, its write time
// and whether it has a TTL (the seconds left change while a scan runs): not
// in row_keys, tag_indexed_row_keys and row_key_time_index, whose write
// time and TTL Cassandra reads from the partition (package cql, ScanRaw).
// Rows of MarkService are left out.
type Digest struct {
	Rows   int64
	Hi, Lo uint64
}

// TableDigest scans table whole and returns its digest. It holds one row at
// a time.
func TableDigest(ctx context.Context, e engine.Raw, table engine.Table) (Digest, error) {
	var d Digest
	var buf []byte
	err := e.ScanRaw(ctx, table, nil, func(r *engine.Row, _ []byte) error {
		if r.Table == engine.ServiceIndex && r.Service == MarkService {
			return nil
		}
		buf = appendRow(buf[:0], r)
		sum := sha256.Sum256(buf)
		hi, lo := binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:16])
		var carry uint64
		d.Lo, carry = d.Lo+lo, 0
		if d.Lo < lo {
			carry = 1
		}
		d.Hi += hi + carry
		d.Rows++
		return nil
	})
	return d, err
}

func (d Digest) String() string { return fmt.Sprintf("%d rows, sum %016x%016x", d.Rows, d.Hi, d.Lo) }

// appendRow appends the bytes of r that Digest hashes, each field with its
// length so that no two rows share them.
func appendRow(b []byte, r *engine.Row) []byte {
	field := func(s []byte) { b = append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	str := func(s string) { b = append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	num := func(v int64) { b = binary.BigEndian.AppendUint64(b, uint64(v)) }
	b = append(b, byte(r.Table))
	switch r.Table {
	case engine.RowKeys, engine.TagIndexedRowKeys, engine.RowKeyTimeIndex:
	default:
		ttl := int64(0)
		if r.TTL > 0 {
			ttl = 1
		}
		num(ttl)
		num(r.WriteTime)
	}
	switch r.Table {
	case engine.DataPoints:
		field(r.Cell.Key)
		num(int64(r.Cell.Column))
		field(r.Cell.Value)
	case engine.RowKeyIndex:
		str(r.Legacy.Metric)
		field(r.Legacy.RowKey)
	case engine.RowKeys, engine.TagIndexedRowKeys, engine.RowKeyTimeIndex:
		str(r.Index.Metric)
		num(r.Index.RowTime)
		if r.Table == engine.RowKeyTimeIndex {
			break
		}
		str(r.Index.DataType)
		if r.Table == engine.TagIndexedRowKeys {
			str(r.Index.Pair)
			num(int64(r.Index.Hash))
		}
		tags := slices.Clone(r.Index.Tags)
		slices.SortFunc(tags, func(x, y codec.Tag) int { return cmp.Compare(x.Name, y.Name) })
		for _, t := range tags {
			str(t.Name)
			str(t.Value)
		}
	default:
		str(r.Service)
		str(r.ServiceKey)
		str(r.Name)
		field(r.Value)
	}
	return b
}
