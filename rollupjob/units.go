package rollupjob

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kairos-remote/kairos-adapter/rollup"
)

// The job's unit arithmetic: pure functions of the progress, the clock
// and the configuration. The job works in units of the largest resolution U: a
// unit (end-U, end] holds whole buckets of every resolution, because each
// divides U (Config.Check). All times are ms since the epoch.

// progress is one resolution's DoneKey: every bucket with end in [from, to]
// is written. ok is false before the first unit was.
type progress struct {
	from, to int64
	ok       bool
}

// units is the arithmetic of units for a configuration.
type units struct {
	res   []rollup.Resolution // ascending
	unit  int64               // U, ms
	delay int64               // ms
}

// unitOf is the end of the unit that holds t: units are the buckets of U.
func (p units) unitOf(t int64) int64 {
	return rollup.Resolution(time.Duration(p.unit) * time.Millisecond).Bucket(t)
}

// closed is the end of the latest unit closed at now: its end plus the
// delay for late samples has passed.
func (p units) closed(now int64) int64 {
	e := p.unitOf(now - p.delay)
	if e > now-p.delay {
		e -= p.unit
	}
	return e
}

// forward is the next unit after pr for r, if it is closed at now. Before
// the first unit it is the latest closed one: the job starts at the present
// and backfills from there.
func (p units) forward(r rollup.Resolution, pr progress, closed int64) (int64, bool) {
	if !pr.ok {
		return closed, true
	}
	e := p.unitOf(pr.to + r.Millis())
	return e, e <= closed
}

// backfill is the next unit before pr for r, if it can hold a sample at or
// after floor (the oldest sample, or the retention's limit).
func (p units) backfill(r rollup.Resolution, pr progress, floor int64) (int64, bool) {
	if !pr.ok {
		return 0, false
	}
	e := p.unitOf(pr.from - r.Millis())
	return e, e >= floor
}

// extend is pr once unit e is written for r. e is adjacent to pr (forward
// and backfill give only such units), so the range stays gapless.
func (p units) extend(r rollup.Resolution, pr progress, e int64) progress {
	lo := e - p.unit + r.Millis()
	if !pr.ok {
		return progress{from: lo, to: e, ok: true}
	}
	return progress{from: min(pr.from, lo), to: max(pr.to, e), ok: true}
}

// covers reports whether unit e's buckets of r are all inside pr.
func (p units) covers(r rollup.Resolution, pr progress, e int64) bool {
	return pr.ok && e-p.unit+r.Millis() >= pr.from && e <= pr.to
}

// retentionFloor is the lowest unit end worth writing for r at now with
// time to live ttl (0: forever): the job writes a bucket's cells to expire
// at the bucket's end plus ttl, so a unit older than that would be written
// expired. One unit of margin keeps the done range clear of cells about to
// expire for as long as a reader may hold a stale done range.
func (p units) retentionFloor(now int64, ttl time.Duration) int64 {
	if ttl <= 0 {
		return minTime
	}
	return p.unitOf(now-ttl.Milliseconds()) + p.unit
}

// minTime stands for "no lower limit" among unit ends: below Prometheus's
// minimum time (-292273086-05-16, about 2^63-6.2·10^13 ms before the
// epoch), which the layout holds, with room for the units' arithmetic.
// It was -2^62, above that time: history there was never rolled up, and
// the backfill walked towards -2^62 a span per step.
const minTime = math.MinInt64 + 1<<40

// raise drops from pr the buckets below floor's unit, which expire.
func (p units) raise(r rollup.Resolution, pr progress, floor int64) progress {
	lo := floor - p.unit + r.Millis()
	if pr.ok && pr.from < lo {
		pr.from = min(lo, pr.to)
	}
	return pr
}

// mark is a range of units [from, to] of one metric marked for
// recomputation, as kept in service_index: key "dirty.<from>.<to>.<metric>",
// value "<write time ms> <cause>". The write time is the mark's own, so
// that the job deletes it as of then and a mark made again later survives.
type mark struct {
	metric    string
	from, to  int64 // unit ends, inclusive
	written   int64
	cause     string
	serviceID string // the key in service_index
}

const markPrefix = "dirty."

func markKey(metric string, from, to int64) string {
	return markPrefix + strconv.FormatInt(from, 10) + "." + strconv.FormatInt(to, 10) + "." + metric
}

func parseMark(key, value string) (mark, error) {
	rest, ok := strings.CutPrefix(key, markPrefix)
	a, rest, ok2 := strings.Cut(rest, ".")
	b, metric, ok3 := strings.Cut(rest, ".")
	w, cause, ok4 := strings.Cut(value, " ")
	from, err1 := strconv.ParseInt(a, 10, 64)
	to, err2 := strconv.ParseInt(b, 10, 64)
	written, err3 := strconv.ParseInt(w, 10, 64)
	if !ok || !ok2 || !ok3 || !ok4 || err1 != nil || err2 != nil || err3 != nil || metric == "" || from > to {
		return mark{}, fmt.Errorf("rollup recomputation mark %q = %q: want dirty.<from>.<to>.<metric> = \"<ms> <cause>\"", key, value)
	}
	return mark{metric: metric, from: from, to: to, written: written, cause: cause, serviceID: key}, nil
}

// lease is the key of the job's lease: "<owner> <expiry ms>".
const leaseKey = "lease"

func formatLease(owner string, expiry int64) string {
	return owner + " " + strconv.FormatInt(expiry, 10)
}

func parseLease(v string) (owner string, expiry int64, ok bool) {
	i := strings.LastIndexByte(v, ' ')
	if i < 0 {
		return "", 0, false
	}
	e, err := strconv.ParseInt(v[i+1:], 10, 64)
	return v[:i], e, err == nil
}
