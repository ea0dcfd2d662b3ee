package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/alecthomas/units"
	"gopkg.in/yaml.v3"
)

// Bytes is a size in bytes. It is written with Prometheus's base-2 units
// (512MiB, 1GiB, as units.Base2Bytes reads them) or as a plain number of
// bytes, which is how the byte flags were given before they took units.
type Bytes int64

// ParseBytes reads a size: a plain integer is bytes, anything else takes a
// unit (B, KiB or KB, MiB or MB, ..., each a power of 1024).
func ParseBytes(s string) (Bytes, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return Bytes(n), nil
	}
	n, err := units.ParseBase2Bytes(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size such as 512MiB or a number of bytes", s)
	}
	// ParseBase2Bytes converts through a float64: 8EiB and what rounds to
	// it wrap around to a negative int64.
	if n < 0 && !strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("%q is larger than 8EiB", s)
	}
	return Bytes(n), nil
}

// String writes the size in the largest units that hold it exactly
// (33554432 is 32MiB), as ParseBytes reads it.
func (b Bytes) String() string {
	if b == 0 {
		return "0"
	}
	return units.Base2Bytes(b).String()
}

// MarshalYAML writes the size with its units, so the status page's
// configuration reads as the flags are written.
func (b Bytes) MarshalYAML() (any, error) { return b.String(), nil }

// UnmarshalYAML reads a YAML integer as bytes and a string with units.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: cannot unmarshal %s into a size in bytes", n.Line, n.Tag)
	}
	v, err := ParseBytes(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: cannot unmarshal %w", n.Line, err)
	}
	*b = v
	return nil
}
