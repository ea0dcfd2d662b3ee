package rollup

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// ParseResolutions reads --rollup.resolutions: a comma-separated list,
// empty for none. Each must divide 24h and the largest, so that a unit of
// the largest holds whole buckets of each.
func ParseResolutions(s string) ([]Resolution, error) {
	var out []Resolution
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		r, err := ParseResolution(part)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	if len(out) > 0 {
		u := out[len(out)-1]
		for _, r := range out {
			if u%r != 0 {
				return nil, fmt.Errorf("rollup resolution %s does not divide the largest, %s", r, u)
			}
		}
	}
	return out, nil
}

// ParseRetention reads --rollup.retention: "<resolution>=<duration>,..."
// (0: forever). Resolutions not named keep their cells forever.
func ParseRetention(s string) (map[Resolution]time.Duration, error) {
	out := map[Resolution]time.Duration{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("rollup retention %q: want <resolution>=<duration>", part)
		}
		r, err := ParseResolution(strings.TrimSpace(k))
		if err != nil {
			return nil, err
		}
		md, err := model.ParseDuration(strings.TrimSpace(v))
		d := time.Duration(md)
		if err != nil || d < 0 || d%time.Second != 0 {
			return nil, fmt.Errorf("rollup retention of %s: %q is not a whole number of seconds", r, v)
		}
		out[r] = d
	}
	return out, nil
}
