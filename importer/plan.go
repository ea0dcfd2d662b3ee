package importer

import (
	"fmt"
	"time"
)

// Span is a time range in ms, both ends included, as remote read's queries
// and the adapter's reads take them.
type Span struct{ Start, End int64 }

// MaxSlices bounds a remote-read import's plan: each slice is one request
// and one progress mark, so a slice length far too short for the range is
// refused before anything is read.
const MaxSlices = 1_000_000

// Slices is [start, end] cut at the multiples of step since the epoch, the
// first and last slice clipped to it. The cuts do not depend on start and
// end, so that a rerun with a later --end finds the slices done before under
// the same keys, all but the last. It returns the number of slices and a
// function giving the i-th; nothing is allocated per slice.
func Slices(start, end int64, step time.Duration) (int, func(i int) Span, error) {
	ms := step.Milliseconds()
	if ms <= 0 || step%time.Millisecond != 0 {
		return 0, nil, fmt.Errorf("the slice length %s must be a positive whole number of milliseconds", step)
	}
	if end < start {
		return 0, nil, fmt.Errorf("the end %s is before the start %s", fmtMillis(end), fmtMillis(start))
	}
	first := floorDiv(start, ms)
	last := floorDiv(end, ms)
	// Times are those of timeparam.Parse, within ±2^63 µs: the difference
	// of two indexes fits an int64.
	if n := last - first + 1; n > MaxSlices {
		return 0, nil, fmt.Errorf("%s to %s in slices of %s is %d slices, more than %d: give a longer slice length", fmtMillis(start), fmtMillis(end), step, n, MaxSlices)
	}
	n := int(last - first + 1)
	return n, func(i int) Span {
		k := first + int64(i)
		return Span{Start: max(k*ms, start), End: min(k*ms+ms-1, end)}
	}, nil
}

// floorDiv is a/b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func fmtMillis(t int64) string {
	return time.UnixMilli(t).UTC().Format(time.RFC3339Nano)
}
