package codec

import (
	"encoding/hex"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/stretchr/testify/require"
)

var testExemplarLabels = []labels.Labels{
	labels.EmptyLabels(),
	labels.FromStrings("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"),
	labels.FromStrings("span_id", "00f067aa0ba902b7", "trace_id", "4bf92f3577b34da6a3ce929d0e0e4736", "été", "😀 a:b=c"),
	labels.FromStrings("empty", ""),
}

func TestExemplarValueRoundTrip(t *testing.T) {
	for _, ls := range testExemplarLabels {
		for _, v := range []float64{0, 1.5, -1e300, math.Inf(-1), math.Copysign(0, -1), math.NaN(), math.Float64frombits(value.StaleNaN)} {
			b := AppendExemplarValue([]byte("pre"), ls, v)
			require.Equal(t, "pre", string(b[:3]))
			gotLabels, gotValue, err := DecodeExemplarValue(b[3:])
			require.NoError(t, err, ls.String())
			require.Equal(t, ls, gotLabels)
			require.Equal(t, math.Float64bits(v), math.Float64bits(gotValue))
		}
	}
	// The worked example of docs/histogram-encoding.md.
	require.Equal(t, "01"+"3ff8000000000000"+"01"+"08"+hex.EncodeToString([]byte("trace_id"))+"03"+hex.EncodeToString([]byte("abc")),
		hex.EncodeToString(AppendExemplarValue(nil, labels.FromStrings("trace_id", "abc"), 1.5)))
}

func TestExemplarValueRejects(t *testing.T) {
	valid := AppendExemplarValue(nil, testExemplarLabels[2], 2)
	for n := range len(valid) {
		_, _, err := DecodeExemplarValue(valid[:n])
		require.Error(t, err, "truncated to %d bytes", n)
	}
	const v = "3ff0000000000000"
	for _, tc := range []struct{ name, hex, err string }{
		{"unknown version", "02" + v + "00", "unknown version 2"},
		{"trailing byte", "01" + v + "00" + "00", "1 trailing bytes"},
		{"padded count", "01" + v + "8000", "not minimal"},
		{"count too big", "01" + v + "05" + "0161" + "0162", "does not fit"},
		{"string beyond the value", "01" + v + "01" + "0561" + "00", "does not fit"},
		{"empty name", "01" + v + "01" + "00" + "0161", "empty exemplar label name"},
		{"out of order", "01" + v + "02" + "0162" + "00" + "0161" + "00", `"a" repeated or out of order`},
		{"repeated", "01" + v + "02" + "0161" + "00" + "0161" + "00", `"a" repeated or out of order`},
		{"invalid UTF-8", "01" + v + "01" + "0161" + "01ff", "not valid UTF-8"},
	} {
		_, _, err := DecodeExemplarValue(unhex(t, tc.hex))
		require.ErrorContains(t, err, tc.err, tc.name)
	}
}

// FuzzExemplarValue: decoding never panics, and whatever decodes encodes
// to the same bytes.
func FuzzExemplarValue(f *testing.F) {
	for _, ls := range testExemplarLabels {
		f.Add(AppendExemplarValue(nil, ls, 1.25))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ls, v, err := DecodeExemplarValue(b)
		if err != nil {
			return
		}
		require.Equal(t, b, AppendExemplarValue(nil, ls, v))
	})
}
