package codec

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchKey is a typical Prometheus series: a handful of tags, one escape.
var benchKey = RowKey{
	Metric:   "node_cpu_seconds_total",
	RowTime:  1698278400000,
	DataType: TypeDouble,
	Tags: tags(
		"cpu", "3",
		"instance", "node-17.example.com:9100",
		"job", "node",
		"mode", "idle",
		"region", "eu-west-1",
	),
}

// benchTags are ~10 tag names in no particular order.
var benchTags = tags(
	"region", "eu", "job", "node", "instance", "a:1", "mode", "idle", "cpu", "3",
	"zone", "b", "env", "prod", "team", "core", "__meta", "x", "😀", "y",
)

func TestNoAllocs(t *testing.T) {
	dst := make([]byte, 0, 512)
	tg := slices.Clone(benchTags)
	for _, tc := range []struct {
		name string
		fn   func()
	}{
		{"AppendRowKey", func() { dst = AppendRowKey(dst[:0], benchKey) }},
		{"AppendLegacyIndexBound", func() { dst = AppendLegacyIndexBound(dst[:0], "m", 1, true) }},
		{"AppendColumn", func() { dst = AppendColumn(dst[:0], 7) }},
		{"AppendDouble", func() { dst = AppendDouble(dst[:0], 1.5) }},
		{"decodeDouble", func() { _, _ = decodeDouble(dst[:8]) }},
		{"AppendLong", func() { dst = AppendLong(dst[:0], -123456789) }},
		{"decodeLong", func() { _, _ = decodeLong(AppendLong(dst[:0], -123456789)) }},
		{"decodeKairosLegacy", func() { _, _ = decodeKairosLegacy([]byte{0, 0xf6, 0x01}) }},
		{"decodeLegacyCell", func() { _, _ = decodeLegacyCell(0, []byte{1, 0x2c}) }},
		{"DecodeValue", func() { _, _, _ = DecodeValue(TypeNull, false, 0, AppendDouble(dst[:0], 1)) }},
		{"AppendString", func() { dst, _ = AppendString(dst[:0], "hé😀\x00") }},
		{"javaLess", func() { _ = javaLess("instance😀", "instance\uffff") }},
		{"SortTags", func() { copy(tg, benchTags); SortTags(tg) }},
		{"TagCollectionHash", func() { _ = TagCollectionHash(benchKey.Tags) }},
	} {
		require.Zero(t, testing.AllocsPerRun(100, tc.fn), tc.name)
	}
}

func BenchmarkAppendRowKey(b *testing.B) {
	b.ReportAllocs()
	dst := make([]byte, 0, 256)
	for b.Loop() {
		dst = AppendRowKey(dst[:0], benchKey)
	}
}

func BenchmarkParseRowKey(b *testing.B) {
	b.ReportAllocs()
	key := AppendRowKey(nil, benchKey)
	for b.Loop() {
		if _, err := ParseRowKey(key); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendDouble(b *testing.B) {
	b.ReportAllocs()
	dst := make([]byte, 0, 8)
	for b.Loop() {
		dst = AppendDouble(dst[:0], 13.2)
	}
}

func BenchmarkDecodeDouble(b *testing.B) {
	b.ReportAllocs()
	v := AppendDouble(nil, 13.2)
	for b.Loop() {
		if _, err := decodeDouble(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendLong(b *testing.B) {
	b.ReportAllocs()
	dst := make([]byte, 0, 10)
	for b.Loop() {
		dst = AppendLong(dst[:0], 1700000000123)
	}
}

func BenchmarkDecodeLong(b *testing.B) {
	b.ReportAllocs()
	v := AppendLong(nil, 1700000000123)
	for b.Loop() {
		if _, err := decodeLong(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJavaLess(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		for i := 1; i < len(benchTags); i++ {
			javaLess(benchTags[i-1].Name, benchTags[i].Name)
		}
	}
}

func BenchmarkSortTags(b *testing.B) {
	b.ReportAllocs()
	tg := make([]Tag, len(benchTags))
	for b.Loop() {
		copy(tg, benchTags)
		SortTags(tg)
	}
}

func BenchmarkTagCollectionHash(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		TagCollectionHash(benchKey.Tags)
	}
}
