package main

import (
	"math"
	"time"
)

// Latencies are kept in log-scale buckets, 16 per power of two from 1 µs to
// 2^32 µs (72 min; the last bucket is open-ended): a fixed 512-counter array
// whatever the run length, with every percentile within 4.4 % (one bucket,
// 2^(1/16)) of the exact value.
const (
	bucketsPerOctave = 16
	numBuckets       = 512
	histMin          = time.Microsecond
)

type latencyHist struct {
	counts [numBuckets]uint64
	total  uint64
	max    time.Duration
}

func bucketOf(d time.Duration) int {
	if d <= histMin {
		return 0
	}
	b := int(math.Log2(float64(d)/float64(histMin)) * bucketsPerOctave)
	return min(b, numBuckets-1)
}

// upper is the upper bound of bucket b.
func upper(b int) time.Duration {
	return time.Duration(float64(histMin) * math.Exp2(float64(b+1)/bucketsPerOctave))
}

func (h *latencyHist) observe(d time.Duration) {
	h.counts[bucketOf(d)]++
	h.total++
	h.max = max(h.max, d)
}

func (h *latencyHist) merge(o *latencyHist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile returns the upper bound of the bucket holding the q-quantile,
// capped by the largest observation; 0 when empty.
func (h *latencyHist) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = max(rank, 1)
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			if b == numBuckets-1 {
				return h.max // open-ended
			}
			return min(upper(b), h.max)
		}
	}
	return h.max
}
