package adapter

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/internal/heappeak"
)

// writeMemFactor bounds the bytes one write request may allocate, as a
// multiple of its decoded body, whatever its shape: everything it builds,
// garbage included, so also the most it can add to the heap at any moment.
const writeMemFactor = 16

// writeMemBound is writeMemFactor, or the ceiling of 32 under the
// race detector (scripts/test.sh runs -race), where the 2.0 tiny-symbol
// shape measures ~21x against ~11x without it.
func writeMemBound() int {
	if raceEnabled {
		return 32
	}
	return writeMemFactor
}

// noopStore accepts everything and keeps nothing, so what a request costs
// is the handler's own work. Like the real store it refuses series without
// a metric name, and its Grow allocates what kairosstore's does per item
// (a Cell and 8 value bytes), so that the appender's pre-sizing counts.
type noopStore struct{}

func (noopStore) NewAppender() Appender { return &noopAppender{} }
func (noopStore) Querier(int64, int64) (storage.Querier, error) {
	return nil, errors.New("noopStore: no reads")
}
func (noopStore) ChunkQuerier(int64, int64) (storage.ChunkQuerier, error) {
	return nil, errors.New("noopStore: no reads")
}
func (noopStore) Metadata(context.Context, string, int) (map[string][]metadata.Metadata, error) {
	return nil, nil
}
func (noopStore) Ready(context.Context) error { return nil }

type noopAppender struct{ grown []byte }

var errNoName = errors.New("missing metric name")

func (*noopAppender) check(ls labels.Labels) error {
	if ls.Get(model.MetricNameLabel) == "" {
		return errNoName
	}
	return nil
}

// appendTo is the noop store's Append*: a series given by labels gets ref
// 1, and a ref is always known.
func (a *noopAppender) appendTo(ref SeriesRef, ls labels.Labels) (SeriesRef, error) {
	if ref != 0 {
		return ref, nil
	}
	if err := a.check(ls); err != nil {
		return 0, err
	}
	return 1, nil
}
func (a *noopAppender) Append(ref SeriesRef, ls labels.Labels, _ int64, _ float64) (SeriesRef, error) {
	return a.appendTo(ref, ls)
}
func (a *noopAppender) AppendHistogram(ref SeriesRef, ls labels.Labels, _ int64, _ *histogram.Histogram, _ *histogram.FloatHistogram) (SeriesRef, error) {
	return a.appendTo(ref, ls)
}
func (a *noopAppender) AppendExemplar(ref SeriesRef, ls labels.Labels, _ exemplar.Exemplar) (SeriesRef, error) {
	return a.appendTo(ref, ls)
}
func (*noopAppender) SetMetadata(string, metadata.Metadata) error { return nil }
func (*noopAppender) Commit(context.Context) error                { return nil }
func (a *noopAppender) Grow(n int)                                { a.grown = make([]byte, 0, 72*n) }

// field is a length-delimited protobuf field.
func field(num int, payload ...byte) []byte {
	b := binary.AppendUvarint(nil, uint64(num)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// repeatTo is head followed by unit repeated up to size bytes.
func repeatTo(size int, head, unit []byte) []byte {
	b := append([]byte{}, head...)
	for len(b)+len(unit) <= size {
		b = append(b, unit...)
	}
	return b
}

// manyInOne is one field num (a series) holding head and then unit up to
// about size bytes.
func manyInOne(size, num int, head, unit []byte) []byte {
	return field(num, repeatTo(size-8, head, unit)...)
}

// worstWriteShapes are the smallest things a write body can hold many of,
// by protocol, each body about size bytes decoded.
func worstWriteShapes(size int) []struct {
	name, ct string
	body     []byte
} {
	var (
		emptySample = field(2)                   // value 0 at time 0
		labelA      = field(1, field(1, 'a')...) // a=""
		labelName   = field(1, cat(field(1, []byte("__name__")...), field(2, 'x'))...)
		v2Symbols   = cat(field(4), field(4, []byte("__name__")...), field(4, 'x'), field(4, 'a'))
		v2Name      = field(1, 1, 2) // __name__="x", packed refs
		v2LabelA    = field(1, 3, 0) // a=""
	)
	return []struct {
		name, ct string
		body     []byte
	}{
		{"1.0 empty series", ctV1, repeatTo(size, nil, field(1))},
		{"1.0 one-label series", ctV1, repeatTo(size, nil, field(1, cat(labelA, emptySample)...))},
		{"1.0 one-label series without samples", ctV1, repeatTo(size, nil, field(1, labelA...))},
		{"1.0 unlabeled series with a sample", ctV1, repeatTo(size, nil, field(1, emptySample...))},
		{"1.0 many tiny samples", ctV1, manyInOne(size, 1, labelName, emptySample)},
		{"1.0 many tiny exemplars", ctV1, manyInOne(size, 1, cat(labelName, emptySample), field(3))},
		{"1.0 many tiny histograms", ctV1, manyInOne(size, 1, labelName, field(4))},
		{"1.0 many tiny metadata", ctV1, repeatTo(size, nil, field(3))},
		{"2.0 empty series", ctV2, repeatTo(size, v2Symbols, field(5))},
		{"2.0 one-label series", ctV2, repeatTo(size, v2Symbols, field(5, cat(v2LabelA, emptySample)...))},
		{"2.0 one-label series without samples", ctV2, repeatTo(size, v2Symbols, field(5, v2LabelA...))},
		{"2.0 named series", ctV2, repeatTo(size, v2Symbols, field(5, cat(v2Name, emptySample)...))},
		{"2.0 many tiny samples", ctV2, cat(v2Symbols, manyInOne(size, 5, v2Name, emptySample))},
		{"2.0 many tiny histograms", ctV2, cat(v2Symbols, manyInOne(size, 5, v2Name, field(3)))},
		{"2.0 many tiny exemplars", ctV2, cat(v2Symbols, manyInOne(size, 5, cat(v2Name, emptySample), field(4)))},
		{"2.0 many tiny symbols", ctV2, repeatTo(size, v2Symbols, field(4))},
	}
}

// requestAlloc is the bytes the handler allocates to serve one request,
// and its status.
func requestAlloc(h http.Handler, ct string, compressed []byte) (uint64, int) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rec := post(h, "/api/v1/write", ct, "snappy", compressed)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, rec.Code
}

// TestWriteMemoryBoundedByBody: a request of millions of tiny series,
// samples or symbols allocates at most writeMemBound() times its decoded
// body, valid or not, on a handler that has served nothing yet (nothing
// pooled).
func TestWriteMemoryBoundedByBody(t *testing.T) {
	const size = 2 << 20
	for _, shape := range worstWriteShapes(size) {
		t.Run(shape.name, func(t *testing.T) {
			h, _ := newTestHandler(t, noopStore{}, Options{})
			compressed := snappy.Encode(nil, shape.body)
			alloc, code := requestAlloc(h, shape.ct, compressed)
			require.Contains(t, []int{http.StatusNoContent, http.StatusBadRequest}, code)
			factor := float64(alloc) / float64(len(shape.body))
			t.Logf("%s: %d bytes decoded, status %d, %d bytes allocated (%.2fx)", shape.name, len(shape.body), code, alloc, factor)
			require.LessOrEqual(t, alloc, uint64(writeMemBound()*len(shape.body)),
				"allocated %.1fx the decoded body", factor)
		})
	}
}

// TestWriteMemoryParallel: 8 of the worst requests at once keep the heap
// within 8 times the bound of one, measured as the highest heap seen while
// they run (sampled) and as all they allocate.
func TestWriteMemoryParallel(t *testing.T) {
	const size, n = 2 << 20, 8
	for _, shape := range worstWriteShapes(size) {
		if shape.name != "1.0 empty series" && shape.name != "2.0 empty series" {
			continue
		}
		t.Run(shape.name, func(t *testing.T) {
			h, _ := newTestHandler(t, noopStore{}, Options{})
			compressed := snappy.Encode(nil, shape.body)
			var codes []int
			rise, alloc := heappeak.Measure(func() {
				var wg sync.WaitGroup
				codes = make([]int, n)
				for i := range n {
					wg.Go(func() {
						codes[i] = post(h, "/api/v1/write", shape.ct, "snappy", compressed).Code
					})
				}
				wg.Wait()
			})
			for _, c := range codes {
				require.Contains(t, []int{http.StatusNoContent, http.StatusBadRequest}, c)
			}
			bound := uint64(n * writeMemBound() * len(shape.body))
			t.Logf("%s x%d: heap rose at most %d bytes, %d allocated (bound %d)", shape.name, n, rise, alloc, bound)
			require.LessOrEqual(t, alloc, bound, fmt.Sprintf("allocated %.1fx one body", float64(alloc)/float64(len(shape.body))))
			require.LessOrEqual(t, rise, int64(bound))
		})
	}
}
