package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecodeQueryAnswer(t *testing.T) {
	for _, c := range []struct {
		name, body      string
		series, samples int
		err             string
	}{
		{"matrix", `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"job":"a"},"values":[[1,"1"],[2,"+Inf"]]},{"metric":{},"values":[[1,"NaN"]]}]}}`, 2, 3, ""},
		{"vector", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"a"},"value":[1.5,"2"]}]}}`, 1, 1, ""},
		{"native histograms", `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"histograms":[[1,{"count":"1"}],[2,{"count":"2"}]]}]}}`, 1, 2, ""},
		{"scalar", `{"status":"success","data":{"resultType":"scalar","result":[1,"3"]}}`, 0, 1, ""},
		{"empty", `{"status":"success","data":{"resultType":"matrix","result":[]}}`, 0, 0, ""},
		{"error answer", `{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory"}`, 0, 0, "execution: query processing"},
		{"bad value", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}`, 0, 0, "point value"},
		{"short point", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1]}]}}`, 0, 0, "point of 1 elements"},
		{"truncated", `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]`, 0, 0, "JSON"},
		{"unknown type", `{"status":"success","data":{"resultType":"table","result":[]}}`, 0, 0, `result type "table"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := decodeQueryAnswer(strings.NewReader(c.body))
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, decodeStats{series: c.series, samples: c.samples}, st)
		})
	}
}

func TestQueryRequest(t *testing.T) {
	str := func(s string) *string { return &s }
	dur := func(d time.Duration) *time.Duration { return &d }
	flags := func(instant bool) queryFlags {
		return queryFlags{
			url: str("http://127.0.0.1:9201/"), query: str("sum(x)"), start: str("1700000000000"),
			queryRange: dur(24 * time.Hour), step: dur(time.Minute), instant: &instant,
		}
	}
	u, body, err := queryRequest(flags(false))
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9201/api/v1/query_range", u)
	require.Equal(t, "end=1700086400.000&query=sum%28x%29&start=1700000000.000&step=60", body)

	u, body, err = queryRequest(flags(true))
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9201/api/v1/query", u)
	require.Equal(t, "query=sum%28x%29&time=1700086400.000", body)

	f := flags(false)
	f.params = &[]string{"max_source_resolution=0"}
	_, body, err = queryRequest(f)
	require.NoError(t, err)
	require.Equal(t, "end=1700086400.000&query=sum%28x%29&start=1700000000.000&step=60&max_source_resolution=0", body)

	f = flags(false)
	f.url = str("127.0.0.1:9201")
	_, _, err = queryRequest(f)
	require.ErrorContains(t, err, "--url")
	f = flags(false)
	f.step = dur(0)
	_, _, err = queryRequest(f)
	require.ErrorContains(t, err, "--step")
}
