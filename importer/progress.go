package importer

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress shows how an import goes: on a terminal a bar redrawn in place
// (units, series and samples done, rate, time left), elsewhere a log line
// every LogEvery. A nil *Progress counts nothing.
type Progress struct {
	out   io.Writer // the terminal, or nil for log lines
	log   *slog.Logger
	every time.Duration
	unit  string // "blocks", "slices"
	names Names
	start time.Time

	series, samples, refused atomic.Int64
	units, skipped, total    atomic.Int64
	totalSamples             atomic.Int64  // 0: unknown
	fraction                 atomic.Uint64 // bits of the share done, when the caller knows it; 0: unknown

	stop chan struct{}
	wg   sync.WaitGroup
}

// Names are what a progress report calls its counts: an import's are
// "Import progress", series and samples.
type Names struct {
	Title, Series, Samples string
}

// NewProgress starts reporting: to term when it is a terminal (non-nil),
// else to log every interval.
func NewProgress(term io.Writer, log *slog.Logger, unit string, interval time.Duration) *Progress {
	return NewNamedProgress(term, log, unit, Names{"Import progress", "series", "samples"}, interval)
}

// NewNamedProgress is NewProgress with other names for its counts.
func NewNamedProgress(term io.Writer, log *slog.Logger, unit string, names Names, interval time.Duration) *Progress {
	p := &Progress{out: term, log: log, unit: unit, names: names, every: interval, start: time.Now(), stop: make(chan struct{})}
	if term != nil {
		p.every = 250 * time.Millisecond
	}
	p.wg.Go(func() {
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.report(false)
			}
		}
	})
	return p
}

// Stop ends the reports with a last one.
func (p *Progress) Stop() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	p.report(true)
}

// Plan sets the units to do and, when the source knows it, the samples.
func (p *Progress) Plan(units int, samples int64) {
	if p != nil {
		p.total.Store(int64(units))
		p.totalSamples.Store(samples)
	}
}

func (p *Progress) AddSeries(n int64) {
	if p != nil {
		p.series.Add(n)
	}
}

func (p *Progress) AddSamples(n int64) {
	if p != nil {
		p.samples.Add(n)
	}
}

// SetFraction sets the share of the whole work done, 0 to 1, for a caller
// that can estimate it better than by units (a copy, from its position in
// the biggest table).
func (p *Progress) SetFraction(f float64) {
	if p != nil && f > 0 && f <= 1 {
		p.fraction.Store(math.Float64bits(f))
	}
}

func (p *Progress) AddRefused(n int64) {
	if p != nil {
		p.refused.Add(n)
	}
}

func (p *Progress) UnitDone(skipped bool) {
	if p == nil {
		return
	}
	if skipped {
		p.skipped.Add(1)
	} else {
		p.units.Add(1)
	}
}

// left estimates the time still needed, from the samples when the total is
// known and from the units imported in this run otherwise; -1 is unknown.
func (p *Progress) left(elapsed time.Duration) time.Duration {
	if f := math.Float64frombits(p.fraction.Load()); f > 0 {
		return time.Duration(float64(elapsed) * (1 - f) / f)
	}
	done, total := p.samples.Load(), p.totalSamples.Load()
	if total <= 0 || done <= 0 {
		done = p.units.Load()
		total = p.total.Load() - p.skipped.Load()
	}
	if done <= 0 || total <= 0 {
		return -1
	}
	return time.Duration(float64(elapsed) * float64(max(total-done, 0)) / float64(done))
}

func (p *Progress) report(last bool) {
	elapsed := time.Since(p.start)
	samples := p.samples.Load()
	perSec := float64(samples) / max(elapsed.Seconds(), 1e-3)
	units := p.units.Load() + p.skipped.Load()
	left := p.left(elapsed)
	if p.out == nil {
		attrs := []any{p.unit, fmt.Sprintf("%d/%d", units, p.total.Load()), "skipped_done_before", p.skipped.Load(),
			p.names.Series, p.series.Load(), p.names.Samples, samples, p.names.Samples + "_per_second", int64(perSec), "elapsed", elapsed.Round(time.Second)}
		if n := p.refused.Load(); n > 0 {
			attrs = append(attrs, "refused", n)
		}
		if last {
			return // the caller logs the summary
		}
		if left >= 0 {
			attrs = append(attrs, "time_left", left.Round(time.Second))
		}
		p.log.Info(p.names.Title, attrs...)
		return
	}
	const width = 24
	frac := 0.0
	if t := p.total.Load(); t > 0 {
		frac = float64(units) / float64(t)
	}
	if ts := p.totalSamples.Load(); ts > 0 && !last {
		frac = max(frac, min(1, float64(samples)/float64(ts)))
	}
	frac = max(frac, math.Float64frombits(p.fraction.Load()))
	fill := int(frac * width)
	eta := "--"
	if left >= 0 {
		eta = left.Round(time.Second).String()
	}
	line := fmt.Sprintf("\r[%s%s] %3.0f%% %d/%d %s | %s %s | %s %s | %s/s | left %s",
		strings.Repeat("=", fill), strings.Repeat(" ", width-fill), 100*frac, units, p.total.Load(), p.unit,
		si(float64(p.series.Load())), p.names.Series, si(float64(samples)), p.names.Samples, si(perSec), eta)
	if n := p.refused.Load(); n > 0 {
		line += fmt.Sprintf(" | %d refused", n)
	}
	line += "\x1b[K" // clear what a longer line left
	if last {
		line += "\n"
	}
	fmt.Fprint(p.out, line)
}

// si prints n with a k, M or G suffix.
func si(n float64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fG", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", n/1e3)
	}
	return fmt.Sprintf("%.0f", n)
}
