package cql

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestByReplicaCapsBatches(t *testing.T) {
	data := func(n, valueLen int) []stmt {
		var out []stmt
		for i := range n {
			key := fmt.Appendf(nil, "series%d", i)
			out = append(out, stmt{cql: insertDataPoint, part: "d" + string(key), route: key, size: cellBytes + 4 + valueLen})
		}
		return out
	}
	sizes := func(reqs [][]stmt) []int {
		var out []int
		for _, r := range reqs {
			out = append(out, len(r))
		}
		return out
	}

	oneHost := func([]byte) string { return "" }
	// One host: batches of 50.
	require.Equal(t, []int{50, 50, 20}, sizes(byReplica(data(120, 8), oneHost)))

	// Two hosts: a batch per host, each filled to 50 before a new one opens.
	evenOdd := func(key []byte) string { return []string{"even", "odd"}[key[len(key)-1]%2] }
	reqs := byReplica(data(120, 8), evenOdd)
	require.Equal(t, []int{50, 50, 10, 10}, sizes(reqs))
	for _, r := range reqs {
		for _, st := range r {
			require.Equal(t, evenOdd(r[0].route), evenOdd(st.route), "one host per batch")
		}
	}

	// Large values: the byte cap, not the count, closes the batches.
	reqs = byReplica(data(10, 1000), oneHost)
	require.Equal(t, []int{3, 3, 3, 1}, sizes(reqs))
	for _, r := range reqs {
		n := 0
		for _, st := range r {
			n += st.size
		}
		require.LessOrEqual(t, n, maxReplicaBytes)
	}

	// Index rows keep their per-partition batches, after the data.
	idx := []stmt{
		{cql: insertRowKey, part: "r1"}, {cql: insertRowKey, part: "r2"}, {cql: insertRowKey, part: "r1"},
	}
	reqs = byReplica(append(data(3, 8), idx...), oneHost)
	require.Equal(t, []int{3, 2, 1}, sizes(reqs))
	require.Equal(t, "r1", reqs[1][1].part)
}
