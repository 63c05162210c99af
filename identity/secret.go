package identity

import (
	"fmt"
	"log/slog"
	"unsafe"
)

// secretBytes is a copy of a secret: a bearer token the verification
// cache keeps for comparison, an API key authenticator's pepper. It never
// prints: the value itself renders as redacted through fmt (String,
// GoString, Format), encoding/json and log/slog, and inside any struct fmt
// prints (a slot, a shard, the cache, an authenticator) it is a pointer
// and two numbers, since fmt shows a nested pointer as its address (a
// []byte field would print its bytes: fmt calls no method of an
// unexported field). The zero value holds nothing.
type secretBytes struct {
	p    *byte // first byte of the copy's array, nil for none
	n, c int   // length and capacity of the copy's array
}

// redacted is what a secretBytes prints.
const redacted = "[REDACTED]"

func (secretBytes) String() string               { return redacted }
func (secretBytes) GoString() string             { return redacted }
func (secretBytes) Format(f fmt.State, _ rune)   { _, _ = f.Write([]byte(redacted)) }
func (secretBytes) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
func (secretBytes) LogValue() slog.Value         { return slog.StringValue(redacted) }

// equal reports whether b holds exactly token's bytes.
func (b *secretBytes) equal(token string) bool {
	return b.n == len(token) && unsafe.String(b.p, b.n) == token
}

// bytes returns b's bytes, for a caller that only reads them (an HMAC
// key). Valid until the next set.
func (b *secretBytes) bytes() []byte {
	if b.p == nil {
		return nil
	}
	return unsafe.Slice(b.p, b.n)
}

// set overwrites b's bytes with zeros and copies token in their place (in
// the same array when it is large enough).
func (b *secretBytes) set(token string) {
	if b.p != nil {
		clear(unsafe.Slice(b.p, b.c))
	}
	if len(token) > b.c {
		buf := make([]byte, len(token))
		b.p, b.c = unsafe.SliceData(buf), len(buf)
	}
	b.n = copy(unsafe.Slice(b.p, b.c), token)
}
