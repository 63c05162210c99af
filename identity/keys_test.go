package identity

import (
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekey/ratekey/internal/jwkey"
)

func TestParsePublicKeyPEM(t *testing.T) {
	k := getKeys(t)
	p224 := must(ecdsa.GenerateKey(elliptic.P224(), rand.Reader))
	rsa8192 := rsaModulus(t, 8192)
	x25519 := must(ecdh.X25519().GenerateKey(rand.Reader))
	tests := []struct {
		name string
		pem  []byte
		want any    // expected key (compared with Equal) or nil on error
		err  string // substring of the error
	}{
		{"PKIX Ed25519", pkixPEM(t, k.ed.Public()), k.ed.Public(), ""},
		{"PKIX ECDSA P-256", pkixPEM(t, &k.es.PublicKey), &k.es.PublicKey, ""},
		{"PKIX ECDSA P-384", pkixPEM(t, &k.es384.PublicKey), &k.es384.PublicKey, ""},
		{"PKIX RSA", pkixPEM(t, &k.rsa.PublicKey), &k.rsa.PublicKey, ""},
		{"PKCS1 RSA", pemBytes(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)), &k.rsa.PublicKey, ""},
		{"trailing newline ok", append(pkixPEM(t, k.ed.Public()), "\n\n"...), k.ed.Public(), ""},
		{"PKIX RSA 1024", pkixPEM(t, &k.rsa1024.PublicKey), nil, "RSA key is 1024 bits, need at least 2048"},
		{"PKCS1 RSA 1024", pemBytes(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&k.rsa1024.PublicKey)), nil, "1024 bits"},
		{"PKIX RSA 8192", pkixPEM(t, rsa8192), rsa8192, ""},
		{"PKIX RSA 8193", pkixPEM(t, rsaModulus(t, 8193)), nil, "RSA key is 8193 bits, at most 8192 are accepted (each verification would cost milliseconds)"},
		{"PKIX RSA exponent 2^40+1", pkixPEM(t, &rsa.PublicKey{N: k.rsa.N, E: 1<<40 + 1}), nil, "RSA public exponent is larger than 2^31-1"},
		{"PKCS1 RSA 16384", pemBytes(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(rsaModulus(t, 16384))), nil, "16384 bits, at most 8192"},
		{"P-224", pkixPEM(t, &p224.PublicKey), nil, "not on P-256, P-384 or P-521"},
		{"X25519", pkixPEM(t, x25519.PublicKey()), nil, "unsupported public key type"},
		{"private key block", pemBytes(t, "PRIVATE KEY", must(x509.MarshalPKCS8PrivateKey(k.ed))), nil, "unsupported PEM block type"},
		{"certificate block", pemBytes(t, "CERTIFICATE", []byte{0x30}), nil, "unsupported PEM block type"},
		{"two blocks", append(pkixPEM(t, k.ed.Public()), pkixPEM(t, &k.es.PublicKey)...), nil, "data after the first PEM block"},
		{"garbage DER", pemBytes(t, "PUBLIC KEY", []byte("nope")), nil, "parsing public key"},
		{"not PEM", []byte("hello"), nil, "no PEM block"},
		{"empty", nil, nil, "no PEM block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePublicKeyPEM(tt.pem)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.(interface{ Equal(crypto.PublicKey) bool }).Equal(tt.want) {
				t.Fatalf("parsed key differs")
			}
		})
	}
}

func TestParsePrivateKeyPEM(t *testing.T) {
	k := getKeys(t)
	ecDER := must(x509.MarshalECPrivateKey(k.es))
	tests := []struct {
		name string
		pem  []byte
		alg  string
		pub  crypto.PublicKey
		err  string
	}{
		{"PKCS8 Ed25519", pemBytes(t, "PRIVATE KEY", must(x509.MarshalPKCS8PrivateKey(k.ed))), "EdDSA", k.ed.Public(), ""},
		{"PKCS8 ECDSA", pemBytes(t, "PRIVATE KEY", must(x509.MarshalPKCS8PrivateKey(k.es))), "ES256", &k.es.PublicKey, ""},
		{"SEC1 ECDSA", pemBytes(t, "EC PRIVATE KEY", ecDER), "ES256", &k.es.PublicKey, ""},
		{"PKCS8 RSA", pemBytes(t, "PRIVATE KEY", must(x509.MarshalPKCS8PrivateKey(k.rsa))), "RS256", &k.rsa.PublicKey, ""},
		{"PKCS1 RSA", pemBytes(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(k.rsa)), "PS256", &k.rsa.PublicKey, ""},
		{"PKCS1 RSA 1024", pemBytes(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(k.rsa1024)), "", nil, "1024 bits"},
		{"public key block", pkixPEM(t, k.ed.Public()), "", nil, "unsupported PEM block type"},
		{"wrong DER for type", pemBytes(t, "RSA PRIVATE KEY", ecDER), "", nil, "parsing private key"},
		{"not PEM", []byte("x"), "", nil, "no PEM block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := jwkey.ParsePrivateKeyPEM(tt.pem)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !s.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(tt.pub) {
				t.Fatal("public half differs")
			}
			// The signer mints a token that the public key verifies.
			m := must(jwkey.SigningMethodFor(tt.alg))
			sig, err := m.Sign("a.b", s)
			if err != nil {
				t.Fatalf("sign: %v", err)
			}
			if err := m.Verify("a.b", sig, tt.pub); err != nil {
				t.Fatalf("verify: %v", err)
			}
		})
	}
}

// TestRepoTestdataKeys parses the shared dev keys (testdata/keys, part of
// the repository: each public key with its private key) and checks they pair.
func TestRepoTestdataKeys(t *testing.T) {
	dir := filepath.Join("..", "testdata", "keys")
	pubs, _ := filepath.Glob(filepath.Join(dir, "*.pub.pem"))
	if len(pubs) == 0 {
		t.Fatalf("no shared test keys in %s (they are part of the repository)", dir)
	}
	for _, pub := range pubs {
		priv := strings.TrimSuffix(pub, ".pub.pem") + ".key.pem"
		pk, err := ParsePublicKeyPEM(must(os.ReadFile(pub)))
		if err != nil {
			t.Errorf("%s: %v", pub, err)
			continue
		}
		data, err := os.ReadFile(priv)
		if err != nil {
			t.Errorf("%s has no private key: %v", pub, err)
			continue
		}
		s, err := jwkey.ParsePrivateKeyPEM(data)
		if err != nil {
			t.Errorf("%s: %v", priv, err)
			continue
		}
		if !s.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(pk) {
			t.Errorf("%s and %s do not match", pub, priv)
		}
	}
}

func TestSigningMethodFor(t *testing.T) {
	for _, alg := range []string{"EdDSA", "ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "HS256", "HS384", "HS512"} {
		m, err := jwkey.SigningMethodFor(alg)
		if err != nil || m.Alg() != alg {
			t.Errorf("jwkey.SigningMethodFor(%q) = %v, %v", alg, m, err)
		}
	}
	// identity accepts exactly the algorithms the demo can sign with.
	if len(algorithms) != 13 {
		t.Errorf("identity supports %d algorithms; jwkey.SigningMethodFor knows 13", len(algorithms))
	}
	for alg := range algorithms {
		if _, err := jwkey.SigningMethodFor(alg); err != nil {
			t.Errorf("identity accepts %s, jwkey.SigningMethodFor refuses it: %v", alg, err)
		}
	}
	for _, alg := range []string{"none", "None", "", "hs256", "ES256K", "Ed25519", "RSA-OAEP"} {
		if m, err := jwkey.SigningMethodFor(alg); err == nil {
			t.Errorf("jwkey.SigningMethodFor(%q) = %v, want error", alg, m)
		}
	}
}

// TestCompatible pins the algorithm/key-type matrix that prevents algorithm
// confusion.
func TestCompatible(t *testing.T) {
	k := getKeys(t)
	p521 := must(ecdsa.GenerateKey(elliptic.P521(), rand.Reader))
	keyset := map[string]any{
		"ed": k.ed.Public(), "p256": &k.es.PublicKey, "p384": &k.es384.PublicKey, "p521": &p521.PublicKey,
		"rsa": &k.rsa.PublicKey, "hmac": k.hmac, "edpriv": k.ed, "rsapriv": k.rsa, "string": "secret",
	}
	want := map[string][]string{
		"EdDSA": {"ed"},
		"ES256": {"p256"}, "ES384": {"p384"}, "ES512": {"p521"},
		"RS256": {"rsa"}, "RS384": {"rsa"}, "RS512": {"rsa"},
		"PS256": {"rsa"}, "PS384": {"rsa"}, "PS512": {"rsa"},
		"HS256": {"hmac"}, "HS384": {"hmac"}, "HS512": {"hmac"},
		"none": nil,
	}
	for alg, oks := range want {
		for name, key := range keyset {
			exp := false
			for _, o := range oks {
				exp = exp || o == name
			}
			if got := compatible(alg, key); got != exp {
				t.Errorf("compatible(%s, %s) = %v, want %v", alg, name, got, exp)
			}
		}
	}
}
