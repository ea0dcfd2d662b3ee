// Package querymemo lets the parts and shards of one query share the
// answers of reads that each of them would otherwise repeat: the query
// frontend gives a query's context a Memo, and the store remembers in it,
// for that query only, what a read found (index/kept.go: whether a row_keys
// entry exists). A query then sees what it saw at its first such read, as
// one evaluation sees one answer; the next query reads again, so nothing a
// memo holds outlives the query that made it.
package querymemo

import (
	"context"
	"errors"
	"sync"
)

// maxBytes bounds the keys a memo holds (a key names a series' row, so its
// size is its labels'): a query that checks more than this holds checks
// the rest in every part again, as without a memo. A year of 1,000 series
// of 10 labels in rows of three weeks is 19,000 keys, about 4 MiB.
const maxBytes = 8 << 20

// Memo is one query's remembered answers; safe for concurrent use.
type Memo struct {
	mu    sync.Mutex
	m     map[string]*call
	bytes int // of the keys in m
}

// call is one read: its answer once done is closed.
type call struct {
	done chan struct{}
	v    bool
	err  error
}

type memoKey struct{}

// With returns ctx with a new, empty memo.
func With(ctx context.Context) context.Context {
	return context.WithValue(ctx, memoKey{}, &Memo{m: map[string]*call{}})
}

// From is ctx's memo, nil when it has none; a nil Memo remembers nothing.
func From(ctx context.Context) *Memo {
	m, _ := ctx.Value(memoKey{}).(*Memo)
	return m
}

// errAbandoned is what waiters get when the read they waited for
// panicked; its caller sees the panic.
var errAbandoned = errors.New("querymemo: the read this one waited for failed")

// Do returns the answer remembered under key, or read's. Parts that ask
// for one key at once wait for the first one's read rather than read it
// too: a query's parts run in parallel, and would otherwise all miss.
// A failed read is not remembered (the next call reads again), and a
// full memo reads every key it does not hold.
func (m *Memo) Do(ctx context.Context, key string, read func() (bool, error)) (bool, error) {
	if m == nil {
		return read()
	}
	m.mu.Lock()
	if c, ok := m.m[key]; ok {
		m.mu.Unlock()
		select {
		case <-c.done:
			return c.v, c.err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if m.bytes+len(key) > maxBytes {
		m.mu.Unlock()
		return read()
	}
	c := &call{done: make(chan struct{}), err: errAbandoned}
	m.m[key] = c
	m.bytes += len(key)
	m.mu.Unlock()
	defer func() {
		if c.err != nil {
			m.mu.Lock()
			delete(m.m, key)
			m.bytes -= len(key)
			m.mu.Unlock()
		}
		close(c.done)
	}()
	c.v, c.err = read()
	return c.v, c.err
}
