package cql

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/engine"
)

func TestByReplicaCapsBatches(t *testing.T) {
	data := func(n, valueLen int) []engine.Cell {
		var out []engine.Cell
		for i := range n {
			out = append(out, engine.Cell{Key: fmt.Appendf(nil, "series%d", i), Value: make([]byte, valueLen)})
		}
		return out
	}
	sizes := func(reqs [][]int32) []int {
		var out []int
		for _, r := range reqs {
			out = append(out, len(r))
		}
		return out
	}

	oneHost := func([]byte) string { return "" }
	// One host: batches of 50, every cell once, in order.
	reqs := byReplica(data(120, 8), oneHost)
	require.Equal(t, []int{50, 50, 20}, sizes(reqs))
	var all []int32
	for _, r := range reqs {
		all = append(all, r...)
	}
	require.Equal(t, cellIndexes(120), all)

	// Two hosts: a batch per host, each filled to 50 before a new one opens.
	evenOdd := func(key []byte) string { return []string{"even", "odd"}[key[len(key)-1]%2] }
	cells := data(120, 8)
	reqs = byReplica(cells, evenOdd)
	require.Equal(t, []int{50, 50, 10, 10}, sizes(reqs))
	for _, r := range reqs {
		for _, i := range r {
			require.Equal(t, evenOdd(cells[r[0]].Key), evenOdd(cells[i].Key), "one host per batch")
		}
	}

	// Large values: the byte cap, not the count, closes the batches.
	cells = data(10, 1000)
	reqs = byReplica(cells, oneHost)
	require.Equal(t, []int{3, 3, 3, 1}, sizes(reqs))
	for _, r := range reqs {
		n := 0
		for _, i := range r {
			n += cellBytes + 4 + len(cells[i].Value)
		}
		require.LessOrEqual(t, n, maxReplicaBytes)
	}
}

func TestByPartitionGroups(t *testing.T) {
	stmts := []stmt{{part: "r1"}, {part: "r2"}, {part: "r1"}, {part: "r1"}}
	groups := byPartition(stmts, func(st stmt) string { return st.part }, 2)
	require.Equal(t, [][]stmt{{{part: "r1"}, {part: "r1"}}, {{part: "r2"}}, {{part: "r1"}}}, groups)
}

// TestWritePanicFails: a statement whose execution panics on a worker of
// the pool (here a nil session, in the driver) fails its write with an
// error naming the panic, so the request answers 5xx; the worker serves the
// next write. Before the recover, the panic ended the test binary.
func TestWritePanicFails(t *testing.T) {
	e := &Engine{pool: newPool(1, nil), limit: newAdaptiveLimit(1, time.Second, time.Second)}
	defer e.pool.close()
	reqs := []request{{stmts: []stmt{{cql: "INSERT INTO t (a) VALUES (?)", args: []any{1}}}}}
	for range 2 {
		err := e.run(t.Context(), nil, reqs, call{}, "write")
		require.ErrorContains(t, err, "a Cassandra write panicked")
	}
}
