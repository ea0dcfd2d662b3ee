package codec

import (
	"math/bits"
)

// MurmurHash3 x86_32 constants.
const (
	murmurC1 = 0xcc9e2d51
	murmurC2 = 0x1b873593
)

// murmur32 is a streaming MurmurHash3 x86_32, so that the tag hash can be
// fed name and value strings one after the other without building the
// concatenation (§6.2), as Guava's Hasher does.
type murmur32 struct {
	h      uint32
	tail   [4]byte
	ntail  int
	length int
}

// murmurWrite feeds p to m.
func murmurWrite[T string | []byte](m *murmur32, p T) {
	m.length += len(p)
	i := 0
	for m.ntail > 0 && m.ntail < 4 && i < len(p) {
		m.tail[m.ntail] = p[i]
		m.ntail++
		i++
	}
	if m.ntail == 4 {
		m.block(uint32(m.tail[0]) | uint32(m.tail[1])<<8 | uint32(m.tail[2])<<16 | uint32(m.tail[3])<<24)
		m.ntail = 0
	}
	for ; i+4 <= len(p); i += 4 {
		m.block(uint32(p[i]) | uint32(p[i+1])<<8 | uint32(p[i+2])<<16 | uint32(p[i+3])<<24) // little-endian
	}
	for ; i < len(p); i++ {
		m.tail[m.ntail] = p[i]
		m.ntail++
	}
}

func (m *murmur32) block(k uint32) {
	m.h ^= mixK(k)
	m.h = bits.RotateLeft32(m.h, 13)
	m.h = m.h*5 + 0xe6546b64
}

func mixK(k uint32) uint32 {
	k *= murmurC1
	k = bits.RotateLeft32(k, 15)
	return k * murmurC2
}

func (m *murmur32) sum() uint32 {
	var k uint32
	for i := m.ntail - 1; i >= 0; i-- {
		k = k<<8 | uint32(m.tail[i])
	}
	h := m.h
	if m.ntail > 0 {
		h ^= mixK(k)
	}
	h ^= uint32(m.length)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// murmur3x86_32 is MurmurHash3 x86_32 of data with the given seed.
func murmur3x86_32(data []byte, seed uint32) uint32 {
	m := murmur32{h: seed}
	murmurWrite(&m, data)
	return m.sum()
}

// TagCollectionHash is tag_collection_hash (§6.2): MurmurHash3 x86_32, seed
// 0, over name1||value1||name2||value2... of tags with no separators. tags
// must be the indexed tags only, in Java order. No tags hash to 0.
func TagCollectionHash(tags []Tag) int32 {
	var m murmur32
	for _, t := range tags {
		murmurWrite(&m, t.Name)
		murmurWrite(&m, t.Value)
	}
	return int32(m.sum())
}

// SingleTagPair is single_tag_pair (§6.2): the raw, unescaped "name=value".
func SingleTagPair(t Tag) string { return t.Name + "=" + t.Value }
