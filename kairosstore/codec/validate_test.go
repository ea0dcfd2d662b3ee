package codec

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Validate reports, for the tests, whether k can be written by AppendRowKey and read back by
// ParseRowKey unchanged. KairosDB checks none of this (§2.1), so a key that
// fails here is one KairosDB would store but could not read back.
func (k RowKey) Validate() error {
	switch {
	case CheckMetric(k.Metric) != nil:
		return errors.New("kairosstore: metric name contains NUL")
	case !utf8.ValidString(k.Metric):
		return errors.New("kairosstore: metric name is not valid UTF-8")
	case len(k.DataType) > MaxTypeLen:
		return fmt.Errorf("kairosstore: data type name is %d bytes, more than %d", len(k.DataType), MaxTypeLen)
	case !utf8.ValidString(k.DataType):
		return errors.New("kairosstore: data type name is not valid UTF-8")
	}
	for i, t := range k.Tags {
		if !utf8.ValidString(t.Name) || !utf8.ValidString(t.Value) {
			return fmt.Errorf("kairosstore: tag %q is not valid UTF-8", t.Name)
		}
		if i > 0 && javaCompare(k.Tags[i-1].Name, t.Name) >= 0 {
			return fmt.Errorf("kairosstore: tags not sorted or not unique at %q", t.Name)
		}
	}
	// §2.3: a legacy key's tag string must not start with 0x00, which the
	// parser would take for a type block marker.
	if k.DataType == TypeLegacy && len(k.Tags) > 0 && strings.HasPrefix(k.Tags[0].Name, "\x00") {
		return errors.New("kairosstore: legacy key whose first tag name starts with NUL")
	}
	return nil
}
