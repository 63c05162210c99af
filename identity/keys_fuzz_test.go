package identity

import (
	"crypto/x509"
	"testing"

	"github.com/ratekey/ratekey/internal/jwkey"
)

// FuzzParsePublicKeyPEM: whatever a key file holds, ParsePublicKeyPEM
// neither panics nor returns a key that jwkey.CheckPublicKey refuses (an
// RSA key outside 2048-8192 bits, an unsupported curve, a private key):
// it returns a key and no error, or an error and no key.
func FuzzParsePublicKeyPEM(f *testing.F) {
	k := getKeys(f)
	for _, seed := range [][]byte{
		pkixPEM(f, k.ed.Public()),
		pkixPEM(f, &k.es.PublicKey),
		pkixPEM(f, &k.rsa1024.PublicKey),
		pkixPEM(f, rsaModulus(f, 8200)),
		pemBytes(f, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)),
		pemBytes(f, "PRIVATE KEY", must(x509.MarshalPKCS8PrivateKey(k.ed))),
		append(pkixPEM(f, k.ed.Public()), pkixPEM(f, &k.es.PublicKey)...),
		[]byte("-----BEGIN PUBLIC KEY-----\n!!!\n-----END PUBLIC KEY-----\n"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		key, err := ParsePublicKeyPEM(data)
		if (key == nil) == (err == nil) {
			t.Fatalf("key %T and error %v: want exactly one", key, err)
		}
		if err == nil {
			if cerr := jwkey.CheckPublicKey(key); cerr != nil {
				t.Fatalf("returned a %T that CheckPublicKey refuses: %v", key, cerr)
			}
		}
	})
}
