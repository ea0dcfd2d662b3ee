package index

import (
	"context"
	"math"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/readhint"
)

// existsReader answers RowKeyExists from a set, counting the calls, and
// panics on the calls panicAt lists (1-based).
type existsReader struct {
	Reader
	mu      sync.Mutex
	stored  map[string]bool
	calls   int
	panicAt map[int]bool
}

func (r *existsReader) RowKeyExists(_ context.Context, metric string, rowTime int64, dataType string, tags []codec.Tag) (bool, error) {
	r.mu.Lock()
	r.calls++
	n := r.calls
	r.mu.Unlock()
	if r.panicAt[n] {
		panic("a cell no codec expected")
	}
	return r.stored[entryKey(metric, rowTime, entry{dataType, tags})], nil
}

// batchReader checks a partition's entries in one call, as cql does.
type batchReader struct{ *existsReader }

func (b batchReader) RowKeysExist(ctx context.Context, metric string, rowTime int64, dataType string, tags [][]codec.Tag) ([]bool, error) {
	out := make([]bool, len(tags))
	for i, tg := range tags {
		var err error
		if out[i], err = b.RowKeyExists(ctx, metric, rowTime, dataType, tg); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TestRowKeyMemo: within one query an entry is checked once, answered
// alike by every part; a part whose check panicked leaves the others to
// check for themselves instead of waiting; past maxMemo entries checks
// are made and not remembered; and a new query checks again. Row times at
// Prometheus's minimum and maximum times, and tags of NUL and empty
// values, are entries like any other.
func TestRowKeyMemo(t *testing.T) {
	r := &existsReader{stored: map[string]bool{}, panicAt: map[int]bool{}}
	x := &Index{r: r, opts: Options{ReadConcurrency: 4}}
	promMin, promMax := int64(math.MinInt64/1000+62135596801)*1000, int64(math.MaxInt64/1000-62135596801)*1000+999
	var cands []entry
	var want []bool
	for i, tg := range [][]codec.Tag{nil, {{Name: "a", Value: ""}}, {{Name: "a", Value: "\x00"}}, {{Name: "a", Value: "1"}, {Name: "b", Value: "2"}}} {
		e := entry{codec.TypeDouble, tg}
		cands, want = append(cands, e), append(want, i%2 == 0)
	}
	for _, rt := range []int64{promMin, 0, promMax} {
		for i, e := range cands {
			if want[i] {
				r.stored[entryKey("m", rt, e)] = true
			}
		}
	}
	ctx := readhint.WithQuery(context.Background())
	for _, rt := range []int64{promMin, 0, promMax} {
		r.calls = 0
		for range 3 { // three parts
			got, err := x.checkRowKeys(ctx, "m", rt, cands)
			require.NoError(t, err)
			require.Equal(t, want, got)
		}
		require.Equal(t, len(cands), r.calls, "row time %d: checked more than once in a query", rt)
	}

	// A part's check fails (a panic recovered into its error), or panics
	// out of a batch read: the next part of the query is not left
	// waiting, and answers right.
	ctx = readhint.WithQuery(context.Background())
	r.calls, r.panicAt = 0, map[int]bool{1: true}
	_, err := x.checkRowKeys(ctx, "m", 0, cands)
	require.Error(t, err)
	got, err := x.checkRowKeys(ctx, "m", 0, cands)
	require.NoError(t, err)
	require.Equal(t, want, got)
	bx := &Index{r: batchReader{r}, opts: x.opts}
	ctx = readhint.WithQuery(context.Background())
	r.calls, r.panicAt = 0, map[int]bool{1: true}
	func() {
		defer func() { require.NotNil(t, recover()) }()
		_, _ = bx.checkRowKeys(ctx, "m", promMax, cands)
	}()
	got, err = bx.checkRowKeys(ctx, "m", promMax, cands)
	require.NoError(t, err)
	require.Equal(t, want, got)
	r.panicAt = map[int]bool{}

	// Past maxMemo: answered, not remembered.
	ctx = readhint.WithQuery(context.Background())
	many := make([]entry, 0, maxMemo+10)
	for i := range maxMemo + 10 {
		many = append(many, entry{codec.TypeDouble, []codec.Tag{{Name: "n", Value: strconv.Itoa(i)}}})
	}
	_, err = x.checkRowKeys(ctx, "m", 0, many)
	require.NoError(t, err)
	require.Len(t, x.memo(ctx).m, maxMemo)
	r.calls = 0
	_, err = x.checkRowKeys(ctx, "m", 0, many)
	require.NoError(t, err)
	require.Equal(t, 10, r.calls)

	// Another query, or none, checks again.
	r.calls = 0
	_, err = x.checkRowKeys(readhint.WithQuery(context.Background()), "m", 0, cands)
	require.NoError(t, err)
	_, err = x.checkRowKeys(context.Background(), "m", 0, cands)
	require.NoError(t, err)
	require.Equal(t, 2*len(cands), r.calls)
}
