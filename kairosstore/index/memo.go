package index

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/kairos-remote/kairos-adapter/internal/recovered"
	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
	"github.com/kairos-remote/kairos-adapter/readhint"
)

// rowKeysChecker is an engine that checks several row_keys entries of one
// partition in one read (kairosstore/cql: one statement, where each
// RowKeyExists is a round trip). Engines without it are asked entry by
// entry.
type rowKeysChecker interface {
	RowKeysExist(ctx context.Context, metric string, rowTime int64, dataType string, tags [][]codec.Tag) ([]bool, error)
}

// maxMemo bounds the row_keys checks one query remembers (a few hundred
// bytes each); past it, checks are made and not remembered. A query checks
// at most maxVerify candidates per partition it reads, so this is 64
// partitions of the largest checks, or a year of 20 series in 3-week row
// windows 45 times over.
const maxMemo = 16384

// rowKeyMemo is what the parts and shards of one query (readhint.Query)
// learned from row_keys: whether each entry they checked exists. The
// frontend evaluates a year as some 15 parts, and the row windows of
// three weeks each part selects overlap its neighbours', so without it
// the same entries are checked by every part that reads their window.
// An entry another process deletes while the query runs may still be
// answered as existing, as it would by a single read begun at the query's
// start; the next query checks again.
type rowKeyMemo struct {
	mu sync.Mutex
	m  map[string]*memoCheck
}

// memoCheck is one entry's check: done closes once exists or err is set.
type memoCheck struct {
	done   chan struct{}
	exists bool
	err    error
}

type memoKey struct{ x *Index }

// errAbandoned is the error of a check whose reader did not return: the
// parts waiting for it check for themselves.
var errAbandoned = errors.New("row_keys check abandoned")

// memo is the query's memo of ctx, nil outside a query (readhint.Query).
func (x *Index) memo(ctx context.Context) *rowKeyMemo {
	q := readhint.QueryFrom(ctx)
	if q == nil {
		return nil
	}
	return q.Value(memoKey{x}, func() any { return &rowKeyMemo{m: map[string]*memoCheck{}} }).(*rowKeyMemo)
}

// entryKey names the row_keys entry (metric, rowTime, e) in a memo; e's
// tags are sorted.
func entryKey(metric string, rowTime int64, e entry) string {
	b := []byte(partitionKey(metric, rowTime))
	b = append(b, e.dataType...)
	b = append(b, 0)
	for _, t := range e.tags {
		b = strconv.AppendInt(b, int64(len(t.Name)), 10)
		b = append(append(b, ':'), t.Name...)
		b = strconv.AppendInt(b, int64(len(t.Value)), 10)
		b = append(append(b, ':'), t.Value...)
	}
	return string(b)
}

// checkRowKeys reports which of cands (tags sorted) exist in the row_keys
// partition (metric, rowTime): from the query's memo where another part
// checked them, the rest from the engine, in one read per data type where
// the engine allows it.
func (x *Index) checkRowKeys(ctx context.Context, metric string, rowTime int64, cands []entry) ([]bool, error) {
	exists := make([]bool, len(cands))
	memo := x.memo(ctx)
	mine := make([]int, 0, len(cands)) // checked here
	var owned []*memoCheck             // mine's memo entries, nil where unremembered
	var waits []int                    // checked by another part
	var waitOn []*memoCheck
	if memo == nil {
		for i := range cands {
			mine = append(mine, i)
		}
		owned = make([]*memoCheck, len(cands))
	} else {
		memo.mu.Lock()
		for i, c := range cands {
			k := entryKey(metric, rowTime, c)
			if mc := memo.m[k]; mc != nil {
				waits, waitOn = append(waits, i), append(waitOn, mc)
				continue
			}
			var mc *memoCheck
			if len(memo.m) < maxMemo {
				mc = &memoCheck{done: make(chan struct{})}
				memo.m[k] = mc
			}
			mine, owned = append(mine, i), append(owned, mc)
		}
		memo.mu.Unlock()
	}
	err := errAbandoned
	func() {
		// Resolved before waiting on others, so two parts that each wait
		// on the other's entries never block; and deferred, so that a
		// panic below (recovered by the caller) leaves no part waiting.
		defer func() {
			for j, mc := range owned {
				if mc != nil {
					mc.exists, mc.err = exists[mine[j]], err
					close(mc.done)
				}
			}
		}()
		err = x.readChecks(ctx, metric, rowTime, cands, mine, exists)
	}()
	if err != nil {
		return nil, err
	}
	var again []int
	for j, mc := range waitOn {
		select {
		case <-mc.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if mc.err != nil {
			// The other part failed, perhaps only its own context: this
			// one asks for itself.
			again = append(again, waits[j])
			continue
		}
		exists[waits[j]] = mc.exists
	}
	if len(again) > 0 {
		if err := x.readChecks(ctx, metric, rowTime, cands, again, exists); err != nil {
			return nil, err
		}
	}
	return exists, nil
}

// readChecks sets exists[i] for each i of which from the engine.
func (x *Index) readChecks(ctx context.Context, metric string, rowTime int64, cands []entry, which []int, exists []bool) error {
	if len(which) == 0 {
		return nil
	}
	if b, ok := x.r.(rowKeysChecker); ok {
		byType := map[string][]int{}
		for _, i := range which {
			byType[cands[i].dataType] = append(byType[cands[i].dataType], i)
		}
		for dataType, is := range byType {
			tags := make([][]codec.Tag, len(is))
			for j, i := range is {
				tags[j] = cands[i].tags
			}
			got, err := b.RowKeysExist(ctx, metric, rowTime, dataType, tags)
			if err != nil {
				return fmt.Errorf("check row_keys of %q: %w", metric, err)
			}
			if len(got) != len(is) {
				return fmt.Errorf("check row_keys of %q: %d answers for %d entries", metric, len(got), len(is))
			}
			for j, i := range is {
				exists[i] = got[j]
			}
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(x.opts.ReadConcurrency)
	for _, i := range which {
		c := cands[i]
		g.Go(func() (err error) {
			defer recovered.Into(&err, x.opts.Logger, "a row_keys check")
			exists[i], err = x.r.RowKeyExists(gctx, metric, rowTime, c.dataType, c.tags)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("check row_keys of %q: %w", metric, err)
	}
	return nil
}
