package redis

// Redis Cluster places a key in one of 16384 hash slots: CRC16 (XMODEM:
// polynomial 0x1021, initial value 0, no reflection) of the key's hash tag
// (the bytes between its first '{' and the first '}' after it, if not
// empty) or of the whole key, modulo 16384 (Redis Cluster specification,
// "Keys distribution model"). go-redis computes the same thing in an
// internal package; this file computes it so that a call's requests can be
// grouped by slot before any round trip.

// slots is the number of Redis Cluster hash slots.
const slots = 16384

// crcTable is the byte-wise table of CRC16/XMODEM.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// crc16 returns the CRC16/XMODEM of s (crc16("123456789") = 0x31C3, the
// check value the specification gives).
func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^s[i]]
	}
	return c
}

// tagLen is the length of the hash tag ratekey writes after the prefix:
// '{', 8 lower-case hex digits, '}'.
const tagLen = 10

// tagText returns the 8 hex digits of a tag hash: the bytes between the
// braces of the key's hash tag.
func tagText(h uint32) [8]byte {
	const hexDigits = "0123456789abcdef"
	var b [8]byte
	for i := 7; i >= 0; i-- {
		b[i] = hexDigits[h&15]
		h >>= 4
	}
	return b
}

// slotOf returns the Redis Cluster slot of every key whose hash tag is the
// text of h.
func slotOf(h uint32) int {
	t := tagText(h)
	return int(crc16(string(t[:])) % slots)
}

// keyHash is a 32-bit hash of s: 64-bit FNV-1a, then the SplitMix64
// finalizer (FNV alone mixes the last bytes of short strings poorly), keeping
// the low 32 bits. It is the same in every process (no seed): every
// process that shares budgets must name a bucket alike. It places load,
// nothing else: anyone can compute it, and two keys with one hash share a
// slot, never a bucket.
func keyHash(s string) uint32 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return uint32(h)
}
