package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// watched is a process (the adapter, Cassandra) whose CPU time and memory a
// run reports: on a shared machine, CPU seconds per million samples say more
// than samples/s alone.
type watched struct {
	name string
	pid  int
	// peak asks for the peak RSS too. It resets the process's peak counter,
	// so it is only set for the adapter this session started.
	peak bool

	cpuStart   time.Duration
	hwmReset   bool // VmHWM was reset at the start, so it is this run's peak
	startRSSkB int64
	mu         sync.Mutex
	peakRSSkB  int64
	stop, done chan struct{}
}

// start records the CPU time. With peak, it also resets the peak RSS
// counter when the kernel lets us (writing 5 to clear_refs, Linux 4.0+), and
// polls VmRSS every 20 ms to catch the peak where the reset is not allowed.
func (w *watched) start() error {
	cpu, err := procCPU(w.pid)
	if err != nil {
		return fmt.Errorf("%s pid %d: %w", w.name, w.pid, err)
	}
	w.cpuStart = cpu
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	if !w.peak {
		close(w.done)
		return nil
	}
	if st, err := procStatus(w.pid); err == nil {
		w.startRSSkB = st["VmRSS"]
	}
	w.hwmReset = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", w.pid), []byte("5"), 0) == nil
	go func() {
		defer close(w.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if st, err := procStatus(w.pid); err == nil {
				w.mu.Lock()
				w.peakRSSkB = max(w.peakRSSkB, st["VmRSS"])
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// finish stops polling and returns key=value pairs for the result line.
func (w *watched) finish(samples int64) []any {
	close(w.stop)
	<-w.done
	var kv []any
	if cpu, err := procCPU(w.pid); err == nil {
		used := cpu - w.cpuStart
		kv = append(kv, w.name+"_cpu_s", fmt.Sprintf("%.1f", used.Seconds()))
		if samples > 0 {
			kv = append(kv, w.name+"_cpu_s_per_Msamples", fmt.Sprintf("%.2f", used.Seconds()/float64(samples)*1e6))
		}
	}
	if !w.peak {
		return kv
	}
	peak := w.peakRSSkB
	if st, err := procStatus(w.pid); err == nil && w.hwmReset {
		peak = max(peak, st["VmHWM"])
	}
	kv = append(kv, w.name+"_rss_start_MiB", w.startRSSkB/1024, w.name+"_peak_rss_MiB", peak/1024)
	if !w.hwmReset {
		kv = append(kv, w.name+"_peak_rss_source", "polled_20ms")
	}
	return kv
}

// procStatus reads the kB fields of /proc/PID/status.
func procStatus(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasSuffix(rest, " kB") {
			continue
		}
		if v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(rest, " kB")), 10, 64); err == nil {
			out[name] = v
		}
	}
	return out, nil
}

// procCPU is user+system time of pid from /proc/PID/stat (fields 14 and 15,
// counted after the parenthesised command name, which may hold spaces).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	// USER_HZ is 100 on every Linux this runs on.
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// selfCPU is this process's user+system time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg is the 1-minute load average, printed next to every figure.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func startWatch(ws []watched) error {
	for i := range ws {
		if err := ws[i].start(); err != nil {
			return err
		}
	}
	return nil
}

func finishWatch(ws []watched, samples int64) []any {
	var kv []any
	for i := range ws {
		kv = append(kv, ws[i].finish(samples)...)
	}
	return kv
}
