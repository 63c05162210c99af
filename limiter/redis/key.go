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
}

// name returns the Redis key of r's bucket:
//
//	prefix + Burst + "x" + Interval in ns + "ns:" + key part
//
// where the key part is r.Key itself if it has at most maxKey bytes, and
// otherwise its first maxKey-64 bytes, "#" and the hex HMAC-SHA256 of the
// whole Key under secret: exactly maxKey+1 bytes, so no hashed part equals
// a raw one.
func (n *keyNamer) name(r *limiter.Request) string {
	var b strings.Builder
	key := r.Key
	hashed := len(key) > n.maxKey
	kl := len(key)
	if hashed {
		kl = n.maxKey + 1
	}
	b.Grow(len(n.prefix) + 2*20 + 4 + kl)
	b.WriteString(n.prefix)
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], r.Limit.Burst, 10))
	b.WriteByte('x')
	b.Write(strconv.AppendInt(num[:0], int64(r.Limit.Rate.Interval()), 10))
	b.WriteString("ns:")
	if !hashed {
		b.WriteString(key)
		return b.String()
	}
	b.WriteString(key[:n.maxKey-hashHexLen])
	b.WriteByte('#')
	mac := hmac.New(sha256.New, n.secret)
	mac.Write([]byte(key))
	var sum [sha256.Size]byte
	var hx [hashHexLen]byte
	hex.Encode(hx[:], mac.Sum(sum[:0]))
	b.Write(hx[:])
	return b.String()
}

// hashTag reports whether prefix holds a Redis Cluster hash tag that
// decides the slot of every key starting with it: a "{" whose first "}"
// after it follows at least one byte later, both inside prefix.
func hashTag(prefix string) bool {
	i := strings.IndexByte(prefix, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(prefix[i+1:], '}')
	return j > 0
}
