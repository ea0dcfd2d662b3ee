package index

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/kairosstore/codec"
)

// TestTagsAt: the tags of a row key start at tagsAt for every type, so the
// id finder.add slices out of a typed key equals the one it encodes for a
// type-less key of the same series, which groups their rows into one series.
func TestTagsAt(t *testing.T) {
	tags := []codec.Tag{{Name: "a", Value: "x:y=z"}, {Name: "b", Value: "2"}}
	legacy := codec.AppendRowKey(nil, codec.RowKey{Metric: "m", RowTime: 0, DataType: codec.TypeLegacy, Tags: tags})
	want := string(legacy[tagsAt("m", codec.TypeLegacy):])
	for _, dataType := range []string{codec.TypeLegacy, codec.TypeDouble, codec.TypeNull, codec.TypeHistogram, "a_type_of_some_length"} {
		key := codec.AppendRowKey(nil, codec.RowKey{Metric: "m", RowTime: -12345, DataType: dataType, Tags: tags})
		require.Equal(t, want, string(key[tagsAt("m", dataType):]), dataType)
	}
}
