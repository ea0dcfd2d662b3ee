package adapter

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSymbolTable checks that symbols keep their numbers across requests,
// and that a number given out again after the table filled up never makes
// the key of an earlier series.
func TestSymbolTable(t *testing.T) {
	st := newSymbolTable(5)
	ids, gen := st.resolve(nil, []string{"", "a", "b"})
	require.Equal(t, []uint32{0, 1, 2}, ids)
	again, gen2 := st.resolve(nil, []string{"b", "a"})
	require.Equal(t, []uint32{2, 1}, again)
	require.Equal(t, gen, gen2)
	oldKey := appendSymbolKey(nil, gen, []uint32{0, 1}, ids) // {"": "a"}

	// Full: a new generation numbers from 0 again.
	fresh, gen3 := st.resolve(nil, []string{"c", "d", "e"})
	require.Equal(t, []uint32{0, 1, 2}, fresh)
	require.NotEqual(t, gen, gen3)
	newKey := appendSymbolKey(nil, gen3, []uint32{0, 1}, fresh) // {"c": "d"}
	require.NotEqual(t, oldKey, newKey)
	require.Equal(t, byte(0), newKey[0], "2.0 keys never start like 1.0 label fields")
}
