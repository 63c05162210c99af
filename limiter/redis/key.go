package redis

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/ratekey/ratekey/limiter"
)

// hashHexLen is the length of the hex HMAC-SHA256 that ends a hashed key.
const hashHexLen = 2 * sha256.Size

// keyNamer builds Redis key names; see the package documentation.
type keyNamer struct {
	prefix string
	maxKey int
	secret []byte
	// dim is "|" + the HashTag dimension + "=", or "" for none.
	dim string
}

// tag returns the hash whose text is the hash tag of the Redis key of the
// bucket named key: the hash of the dimension's part "dim=value" (as
// encoded in key) when key has that dimension, else of the whole key.
// In an encoded key '|' and '=' occur only between fields (both are
// escaped inside one), so "|dim=" marks the part and the next '|' ends it.
func (n *keyNamer) tag(key string) uint32 {
	if n.dim != "" {
		if i := strings.Index(key, n.dim); i >= 0 {
			part := key[i+1:]
			if j := strings.IndexByte(part, '|'); j >= 0 {
				part = part[:j]
			}
			return keyHash(part)
		}
	}
	return keyHash(key)
}

// name returns the Redis key of r's bucket and the hash of its hash tag:
//
//	prefix + "{" + 8 hex digits of the tag hash + "}" + Burst + "x" + Interval in ns + "ns:" + key part
//
// or, for an in-flight cap (a sorted set of leases, named by the key alone):
//
//	prefix + "{" + 8 hex digits of the tag hash + "}" + "c:" + key part
//
// where the key part is r.Key itself if it has at most maxKey bytes, and
// otherwise its first maxKey-64 bytes, "#" and the hex HMAC-SHA256 of the
// whole Key under secret: exactly maxKey+1 bytes, so no hashed part equals
// a raw one. The prefix holds no brace, so the tag written right after it
// is the key's hash tag whatever the key part holds.
func (n *keyNamer) name(r *limiter.Request) (string, uint32) {
	var b strings.Builder
	key := r.Key
	hashed := len(key) > n.maxKey
	kl := len(key)
	if hashed {
		kl = n.maxKey + 1
	}
	h := n.tag(key)
	t := tagText(h)
	b.Grow(len(n.prefix) + tagLen + 2*20 + 4 + kl)
	b.WriteString(n.prefix)
	b.WriteByte('{')
	b.Write(t[:])
	b.WriteByte('}')
	if r.Limit.MaxInFlight != 0 {
		// An in-flight cap's sorted set of leases (inflight.go): named by
		// the key alone, and never a bucket's name (those start with a
		// digit after the tag).
		b.WriteString("c:")
	} else {
		var num [20]byte
		b.Write(strconv.AppendInt(num[:0], r.Limit.Burst, 10))
		b.WriteByte('x')
		b.Write(strconv.AppendInt(num[:0], int64(r.Limit.Rate.Interval()), 10))
		b.WriteString("ns:")
	}
	if !hashed {
		b.WriteString(key)
		return b.String(), h
	}
	b.WriteString(key[:n.maxKey-hashHexLen])
	b.WriteByte('#')
	mac := hmac.New(sha256.New, n.secret)
	mac.Write([]byte(key))
	var sum [sha256.Size]byte
	var hx [hashHexLen]byte
	hex.Encode(hx[:], mac.Sum(sum[:0]))
	b.Write(hx[:])
	return b.String(), h
}

// dimensionName reports whether s is a key dimension name as package
// identity defines them: ^[a-z][a-z0-9_]{0,31}$.
func dimensionName(s string) bool {
	if len(s) == 0 || len(s) > 32 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
