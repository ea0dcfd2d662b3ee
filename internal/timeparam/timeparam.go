// Package timeparam reads the times of the HTTP API's parameters, once and
// for every endpoint: the query API, its frontend, the admin calls and the
// web UI's JSON. Prometheus's own parser lets NaN, ±Inf and numbers no
// int64 holds through, each becoming whatever the conversion leaves (NaN
// start on a delete meant every sample); here they are errors, so each
// endpoint answers 400 naming the parameter.
package timeparam

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
)

// Min and Max are the widest times whose RFC 3339 form still parses, the
// bounds Prometheus's HTTP API uses (and clients send back, as Grafana
// does). Every time in [Min, Max] is an int64 of milliseconds.
var (
	Min = time.Unix(math.MinInt64/1000+62135596801, 0).UTC()
	Max = time.Unix(math.MaxInt64/1000-62135596801, 999999999).UTC()

	MinText = Min.Format(time.RFC3339Nano)
	MaxText = Max.Format(time.RFC3339Nano)
)

// Parse reads a Unix time in (fractional) seconds, rounded to the
// millisecond as Prometheus rounds it, or an RFC 3339 time, or one of the
// texts of Min and Max. A number that is not finite, or a time outside
// [Min, Max], is an error.
func Parse(s string) (time.Time, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp: not a finite number", s)
		}
		// Checked before the conversion to int64, which is undefined
		// beyond its range; the exact bounds are checked below.
		if math.Abs(f) > 1e16 {
			return time.Time{}, outside(s)
		}
		sec, frac := math.Modf(f)
		ms := math.Round(frac * 1000)
		t := time.Unix(int64(sec), int64(ms)*int64(time.Millisecond)).UTC()
		if t.Before(Min) || t.After(Max) {
			return time.Time{}, outside(s)
		}
		return t, nil
	} else if errors.Is(err, strconv.ErrRange) {
		return time.Time{}, outside(s)
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil // four-digit years: always within [Min, Max]
	}
	switch s {
	case MinText:
		return Min, nil
	case MaxText:
		return Max, nil
	}
	return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp", s)
}

func outside(s string) error {
	return fmt.Errorf("cannot parse %q to a valid timestamp: outside %s to %s", s, MinText, MaxText)
}

// FloorMilli and CeilMilli are t in ms, rounded down and up: the inward
// ends of a range to delete, so that a time given to the nanosecond never
// widens it by a sample (Parse already rounds Unix seconds to the ms).
func FloorMilli(t time.Time) int64 {
	return t.Unix()*1000 + int64(t.Nanosecond())/1e6
}

func CeilMilli(t time.Time) int64 {
	ms := FloorMilli(t)
	if t.Nanosecond()%1e6 != 0 {
		ms++
	}
	return ms
}

// Steps is the number of evaluation times start, start+step, ..., up to
// end (ms, step > 0, start <= end), computed without overflow: the span of
// [Min, Max] in ms does not fit an int64, and time.Time.Sub saturates at
// 292 years, so that Prometheus's own check of its 11,000 points lets
// 2·10^10 of them through.
func Steps(start, end, step int64) uint64 {
	if end < start || step <= 0 {
		return 0
	}
	// end-start is in [0, 2^64): exact in uint64 arithmetic.
	n := (uint64(end) - uint64(start)) / uint64(step)
	if n == math.MaxUint64 {
		return n
	}
	return n + 1
}

// ParseDuration reads seconds (fractional allowed) or a Prometheus
// duration such as 5m or 1h30m, as Prometheus's API does; a number whose
// nanoseconds no int64 holds, or NaN, is an error.
func ParseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		ns := f * float64(time.Second)
		// float64(math.MaxInt64) is 2^63, itself out of range.
		if ns >= math.MaxInt64 || ns < math.MinInt64 || math.IsNaN(ns) {
			return 0, fmt.Errorf("cannot parse %q to a valid duration. It overflows int64", s)
		}
		return time.Duration(ns), nil
	}
	if d, err := model.ParseDuration(s); err == nil {
		return time.Duration(d), nil
	}
	return 0, fmt.Errorf("cannot parse %q to a valid duration", s)
}
