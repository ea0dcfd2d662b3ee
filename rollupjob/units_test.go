package rollupjob

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kairos-remote/kairos-adapter/rollup"
)

const (
	m5 = rollup.Resolution(5 * time.Minute)
	h1 = rollup.Resolution(time.Hour)
	hr = int64(3600_000)
)

func TestUnitArithmetic(t *testing.T) {
	p := units{res: []rollup.Resolution{m5, h1}, unit: hr, delay: 10 * 60_000}
	// 100h + 15m: the unit ending at 100h closed at 100h10m.
	now := 100*hr + 15*60_000
	require.Equal(t, 100*hr, p.closed(now))
	require.Equal(t, 99*hr, p.closed(100*hr+9*60_000), "not before the delay")
	require.Equal(t, 100*hr, p.closed(100*hr+10*60_000), "at the delay")
	require.Equal(t, -hr, p.closed(-50*60_000+10*60_000-1), "before the epoch")

	// First start: the latest closed unit, then forward and backfill from there.
	e, ok := p.forward(m5, progress{}, 100*hr)
	require.True(t, ok)
	require.Equal(t, 100*hr, e)
	pr := p.extend(m5, progress{}, e)
	require.Equal(t, progress{from: 99*hr + 5*60_000, to: 100 * hr, ok: true}, pr)
	_, ok = p.forward(m5, pr, 100*hr)
	require.False(t, ok, "the next unit is not closed")
	e, ok = p.forward(m5, pr, 101*hr)
	require.True(t, ok)
	require.Equal(t, 101*hr, e)

	e, ok = p.backfill(m5, pr, 0)
	require.True(t, ok)
	require.Equal(t, 99*hr, e)
	pr = p.extend(m5, pr, e)
	require.Equal(t, progress{from: 98*hr + 5*60_000, to: 100 * hr, ok: true}, pr)
	_, ok = p.backfill(m5, pr, 98*hr+1)
	require.False(t, ok, "the unit ending at 98h holds nothing at or after the floor")
	e, ok = p.backfill(m5, pr, 98*hr)
	require.True(t, ok, "a sample at the floor is in the unit ending there")
	require.Equal(t, 98*hr, e)
	_, ok = p.backfill(m5, progress{}, 0)
	require.False(t, ok, "no backfill before the first unit")

	// 1h buckets: the unit is one bucket.
	ph := p.extend(h1, progress{}, 100*hr)
	require.Equal(t, progress{from: 100 * hr, to: 100 * hr, ok: true}, ph)
	require.True(t, p.covers(h1, ph, 100*hr))
	require.False(t, p.covers(h1, ph, 99*hr))
	require.True(t, p.covers(m5, pr, 99*hr))
	require.False(t, p.covers(m5, pr, 101*hr))

	// A progress not aligned to units (written under another largest
	// resolution) continues from the unit that holds its next bucket.
	e, ok = p.forward(m5, progress{from: 0, to: 100*hr + 30*60_000, ok: true}, 200*hr)
	require.True(t, ok)
	require.Equal(t, 101*hr, e)

	// Retention: cells expire a ttl after their bucket.
	require.Equal(t, int64(minTime), p.retentionFloor(now, 0))
	floor := p.retentionFloor(now, 10*time.Hour)
	require.Equal(t, 92*hr, floor, "the unit ending at 91h holds the bucket ending at 90h05, expired at 100h05")
	require.Equal(t, progress{from: 91*hr + 5*60_000, to: 100 * hr, ok: true}, p.raise(m5, progress{from: 0, to: 100 * hr, ok: true}, floor))
	require.Equal(t, progress{from: 95 * hr, to: 100 * hr, ok: true}, p.raise(m5, progress{from: 95 * hr, to: 100 * hr, ok: true}, floor), "already above")
}

func TestConfigCheck(t *testing.T) {
	rs := []rollup.Resolution{m5, h1}
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"defaults", Config{Resolutions: rs, Delay: 10 * time.Minute}, ""},
		{"disabled", Config{RawTTL: time.Hour}, ""},
		{"raw TTL long enough", Config{Resolutions: rs, Delay: 10 * time.Minute, RawTTL: 25*time.Hour + 10*time.Minute}, ""},
		{"raw TTL too short", Config{Resolutions: rs, Delay: 10 * time.Minute, RawTTL: 25 * time.Hour}, "could expire before they are rolled up"},
		{"rollup shorter than raw", Config{Resolutions: rs, RawTTL: 720 * time.Hour, Retention: map[rollup.Resolution]time.Duration{m5: 240 * time.Hour}}, "keeps 5m rollups 10d, less than raw samples live (30d"},
		{"rollup finite, raw forever", Config{Resolutions: rs, Retention: map[rollup.Resolution]time.Duration{h1: 240 * time.Hour}}, "(forever"},
		{"rollup forever", Config{Resolutions: rs, RawTTL: 720 * time.Hour, Retention: map[rollup.Resolution]time.Duration{m5: 8760 * time.Hour, h1: 0}}, ""},
		{"unknown resolution", Config{Resolutions: rs, Retention: map[rollup.Resolution]time.Duration{rollup.Resolution(15 * time.Minute): 0}}, "does not list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Check()
			if tc.err == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.err)
			}
		})
	}
}

func TestMarkKeys(t *testing.T) {
	k := markKey("a.b", -hr, 5*hr)
	require.Equal(t, "dirty.-3600000.18000000.a.b", k)
	m, err := parseMark(k, "1700000000000 delete")
	require.NoError(t, err)
	require.Equal(t, mark{metric: "a.b", from: -hr, to: 5 * hr, written: 1700000000000, cause: "delete", serviceID: k}, m)
	for _, bad := range [][2]string{{"dirty.1.2", "1 write"}, {"dirty.2.1.m", "1 write"}, {k, "x write"}, {k, "1"}} {
		_, err := parseMark(bad[0], bad[1])
		require.Error(t, err, bad)
	}
	owner, exp, ok := parseLease(formatLease("host a 1", 42))
	require.True(t, ok)
	require.Equal(t, "host a 1", owner)
	require.Equal(t, int64(42), exp)
}
