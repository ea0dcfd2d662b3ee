package main

import (
	"math"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRelDiff(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct{ a, b, want float64 }{
		{1, 1, 0},
		{nan, nan, 0},
		{inf, inf, 0},
		{-inf, -inf, 0},
		{inf, -inf, inf},
		{nan, 1, inf},
		{1, nan, inf},
		{inf, 1e300, inf},
		{0, 1e-300, 1},
		{1e300, -1e300, 2},
		{math.MaxFloat64, -math.MaxFloat64, 2}, // no overflow
		{100, 99, 0.01},
	} {
		require.InDelta(t, c.want, relDiff(c.a, c.b), 1e-15, "%v %v", c.a, c.b)
	}
}

func TestCompareMatrices(t *testing.T) {
	a := answerMatrix{
		`{"job":"a"}`: {1000: 1, 2000: 2, 3000: math.NaN()},
		`{"job":"b"}`: {1000: 100},
	}
	b := answerMatrix{
		`{"job":"a"}`: {1000: 1 + 1e-12, 2000: 2.5, 4000: 7},
		`{"job":"c"}`: {1000: 5},
	}
	d := compareMatrices(a, b, 1e-9)
	require.Equal(t, 2, d.compared)
	require.Equal(t, 1, d.equal)
	require.Equal(t, 1, d.over2)
	require.Equal(t, 2, d.onlyA) // a's NaN at 3000, b has no job="b"
	require.Equal(t, 2, d.onlyB)
	require.Equal(t, int64(2000), d.worstT)
	require.Equal(t, `{"job":"a"}`, d.worstSeries)
	require.InDelta(t, 0.2, d.worst, 1e-12)
}

func TestDecodeMatrix(t *testing.T) {
	m, err := decodeMatrix(http.StatusOK, []byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"job":"a","__name__":"x"},"values":[[1.5,"1"],[2,"NaN"],[-9223372036.854,"-Inf"]]}]}}`))
	require.NoError(t, err)
	s := m[`{"__name__":"x","job":"a"}`]
	require.Len(t, s, 3)
	require.Equal(t, 1.0, s[1500])
	require.True(t, math.IsNaN(s[2000]))
	require.True(t, math.IsInf(s[-9223372036854], -1))
	_, err = decodeMatrix(http.StatusUnprocessableEntity, []byte(`{"status":"error","errorType":"execution","error":"too many samples"}`))
	require.ErrorContains(t, err, "status 422: execution: too many samples")
	_, err = decodeMatrix(http.StatusOK, []byte(`{"status":"success","data":{"resultType":"vector","result":[]}}`))
	require.ErrorContains(t, err, "want matrix")
	_, err = decodeMatrix(http.StatusOK, []byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"x"]]}]}}`))
	require.ErrorContains(t, err, "point value")
}
