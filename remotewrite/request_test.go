package remotewrite

import (
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/stretchr/testify/require"
)

// v2NameRef compares refs when the table names __name__ once or not at all,
// and strings when a (legal but odd) table holds it twice.
func TestV2NameRef(t *testing.T) {
	for _, tc := range []struct {
		name    string
		symbols []string
		refs    []uint32
		want    uint32
	}{
		{"first label", []string{"", "__name__", "up", "job", "x"}, []uint32{1, 2, 3, 4}, 2},
		{"later label", []string{"", "a", "b", "__name__", "up"}, []uint32{1, 2, 3, 4}, 4},
		{"no name in table", []string{"", "job", "x"}, []uint32{1, 2}, 0},
		{"name in table, not in series", []string{"", "__name__", "up", "job", "x"}, []uint32{3, 4}, 0},
		{"twice, series uses the second", []string{"", "__name__", "up", "__name__", "down"}, []uint32{3, 4}, 4},
		{"twice, series uses the first", []string{"", "__name__", "up", "__name__", "down"}, []uint32{1, 2}, 2},
		{"name as a value only", []string{"", "job", "__name__"}, []uint32{1, 2}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, v2NameRef(tc.refs, tc.symbols, nameSymbol(tc.symbols)))
		})
	}
}

// Both protocols' metric type enums map to the same types, and a number
// neither defines to unknown.
func TestMetricType(t *testing.T) {
	for name, v := range prompb.MetricMetadata_MetricType_value {
		want := model.MetricType(strings.ToLower(name))
		if name == "UNKNOWN" {
			want = model.MetricTypeUnknown
		}
		require.Equal(t, want, metricType(v), name)
	}
	for name, v := range writev2.Metadata_MetricType_value {
		want := model.MetricType(strings.ToLower(strings.TrimPrefix(name, "METRIC_TYPE_")))
		if name == "METRIC_TYPE_UNSPECIFIED" {
			want = model.MetricTypeUnknown
		}
		require.Equal(t, want, metricType(v), name)
	}
	require.Equal(t, model.MetricTypeUnknown, metricType(8))
	require.Equal(t, model.MetricTypeUnknown, metricType(-1))
}
