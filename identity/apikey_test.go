package identity

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ratekey/ratekey/limitkey"
)

var testPepper = []byte("pepper-for-tests-0123456789abcdef")

// apiKeyRef is the obviously correct reference for the key shape.
var apiKeyRef = regexp.MustCompile(`^rk_([0-9A-Za-z]{12})_([0-9A-Za-z]{32})([0-9A-Za-z]{6})$`)

// countingStore wraps a store and counts lookups; fail makes it error.
type countingStore struct {
	APIKeyStore
	lookups atomic.Int64
	fail    bool
}

func (s *countingStore) LookupAPIKey(ctx context.Context, id string) (APIKeyRecord, bool, error) {
	s.lookups.Add(1)
	if s.fail {
		return APIKeyRecord{}, false, errors.New("store offline")
	}
	return s.APIKeyStore.LookupAPIKey(ctx, id)
}

// newAPIKeyFixture returns an authenticator over one fresh key for
// (acme, alice), the key, and the counting store.
func newAPIKeyFixture(tb testing.TB) (*APIKeyAuthenticator, string, APIKeyRecord, *countingStore) {
	tb.Helper()
	key, rec, err := NewAPIKey(testPepper, "acme", "alice")
	if err != nil {
		tb.Fatal(err)
	}
	mem, err := NewMemoryAPIKeyStore([]APIKeyRecord{rec})
	if err != nil {
		tb.Fatal(err)
	}
	store := &countingStore{APIKeyStore: mem}
	a, err := NewAPIKeyAuthenticator(APIKeyConfig{Store: store, Pepper: testPepper})
	if err != nil {
		tb.Fatal(err)
	}
	return a, key, rec, store
}

func TestNewAPIKey(t *testing.T) {
	a, key, rec, _ := newAPIKeyFixture(t)
	m := apiKeyRef.FindStringSubmatch(key)
	if m == nil || len(key) != apiKeyLen {
		t.Fatalf("key shape: %d bytes", len(key))
	}
	if m[1] != rec.ID || checksum(key[:len(key)-apiKeyChecksumLen]) != m[3] {
		t.Fatal("id or checksum mismatch")
	}
	if rec.Hash != hashSecret(testPepper, m[2]) {
		t.Fatal("stored hash is not HMAC-SHA256(pepper, secret)")
	}
	if id, err := apiKeyID(key); err != nil || id != rec.ID {
		t.Fatalf("apiKeyID = %q, %v", id, err)
	}
	p, err := a.verifyKey(context.Background(), key)
	want := limitkey.Principal{Issuer: defaultAPIKeyIssuer, Tenant: "acme", Account: "alice", CredentialID: rec.ID, Method: limitkey.MethodAPIKey}
	if err != nil || p != want {
		t.Fatalf("Verify = %+v, %v", p, err)
	}
	// Keys are distinct.
	k2, r2, _ := NewAPIKey(testPepper, "acme", "alice")
	if k2 == key || r2.ID == rec.ID {
		t.Fatal("two keys collide")
	}
	for _, bad := range []struct{ pepper, tenant, account string }{
		{"short", "t", "a"}, {string(testPepper), "", "a"}, {string(testPepper), "t", ""},
		{string(testPepper), "t\n", "a"}, {string(testPepper), "t", "a\x7f"}, {string(testPepper), strings.Repeat("t", 257), "a"},
		{string(testPepper), "t", "\xff"},
	} {
		if _, _, err := NewAPIKey([]byte(bad.pepper), bad.tenant, bad.account); err == nil {
			t.Errorf("NewAPIKey(%q, %q) accepted", bad.tenant, bad.account)
		}
	}
}

// TestAPIKeyChecksumCatchesTypos: every single-character substitution and
// every adjacent transposition of a key is refused by the checksum, before
// any store lookup (CRC-32 detects all bursts up to 32 bits).
func TestAPIKeyChecksumCatchesTypos(t *testing.T) {
	a, key, _, store := newAPIKeyFixture(t)
	checked := 0
	try := func(k string) {
		checked++
		if _, _, err := parseAPIKey(k); err == nil {
			t.Fatalf("typo accepted at a checksum-covered position")
		}
		if _, err := a.verifyKey(context.Background(), k); !isDesc(err, "API key is malformed") {
			t.Fatalf("typo: err = %v", err)
		}
	}
	for i := 0; i < len(key); i++ {
		for j := 0; j < len(base62); j++ {
			if c := base62[j]; c != key[i] && key[i] != '_' {
				try(key[:i] + string(c) + key[i+1:])
			}
		}
		if i+1 < len(key) && key[i] != key[i+1] {
			try(key[:i] + string(key[i+1]) + string(key[i]) + key[i+2:])
		}
	}
	if store.lookups.Load() != 0 {
		t.Fatalf("typos reached the store %d times", store.lookups.Load())
	}
	t.Logf("%d typos refused", checked)
}

func isDesc(err error, desc string) bool {
	var ae *AuthError
	return errors.As(err, &ae) && ae.Code == codeInvalidToken && ae.Description == desc
}

// TestAPIKeyUnknownIDAndWrongSecretLookAlike: an unknown id and a wrong
// secret (both with valid checksums) get the same error after the same
// work (one lookup, one HMAC, one constant-time comparison).
func TestAPIKeyUnknownIDAndWrongSecretLookAlike(t *testing.T) {
	a, key, rec, store := newAPIKeyFixture(t)
	other, _, _ := NewAPIKey(testPepper, "acme", "alice") // unknown id
	wrongSecret := func() string {
		s := []byte(key[:len(key)-apiKeyChecksumLen])
		s[20] = 'A' + (s[20]-'A'+1)%26
		if s[20] == key[20] {
			s[20] = 'z'
		}
		return string(s) + checksum(string(s))
	}()
	if id, _ := apiKeyID(wrongSecret); id != rec.ID {
		t.Fatal("fixture: wrong-secret key must keep the id")
	}
	var texts []string
	for _, k := range []string{other, wrongSecret} {
		before := store.lookups.Load()
		_, err := a.verifyKey(context.Background(), k)
		if !isDesc(err, "API key is invalid") || !errors.Is(err, errAPIKeyInvalid) {
			t.Fatalf("err = %v", err)
		}
		if store.lookups.Load() != before+1 {
			t.Fatal("not exactly one lookup")
		}
		texts = append(texts, err.Error())
	}
	if texts[0] != texts[1] {
		t.Fatalf("distinguishable errors: %q vs %q", texts[0], texts[1])
	}
	store.fail = true
	_, err := a.verifyKey(context.Background(), key)
	if !errors.Is(err, ErrKeySourceUnavailable) {
		t.Fatalf("store failure: %v", err)
	}
	var ae *AuthError
	if errors.As(err, &ae) {
		t.Fatal("a store failure must not be an AuthError (401)")
	}
}

func TestAPIKeyMalformed(t *testing.T) {
	a, key, _, store := newAPIKeyFixture(t)
	for _, k := range []string{
		"", "rk_", key[:len(key)-1], key + "0", "RK_" + key[3:], "rk-" + key[3:],
		strings.Replace(key, "_", "-", 2), key[:15] + "." + key[16:], strings.ToUpper(key),
		"rk_" + strings.Repeat("0", 12) + "_" + strings.Repeat("0", 38),
		"eyJhbGciOiJub25lIn0.e30.", strings.Repeat("A", apiKeyLen),
		key[:20] + "é" + key[22:],
	} {
		if _, err := a.verifyKey(context.Background(), k); !isDesc(err, "API key is malformed") {
			t.Errorf("%q: err = %v", k, err)
		}
	}
	if store.lookups.Load() != 0 {
		t.Fatal("malformed keys reached the store")
	}
}

func TestAPIKeyAuthenticateHeaders(t *testing.T) {
	a, key, rec, _ := newAPIKeyFixture(t)
	ok := limitkey.Principal{Issuer: defaultAPIKeyIssuer, Tenant: "acme", Account: "alice", CredentialID: rec.ID, Method: limitkey.MethodAPIKey}
	tests := []struct {
		name   string
		h      http.Header
		status int // 0: success
		err    error
	}{
		{"X-API-Key", http.Header{"X-Api-Key": {key}}, 0, nil},
		{"Bearer rk_", http.Header{"Authorization": {"Bearer " + key}}, 0, nil},
		{"bearer lower case", http.Header{"Authorization": {"bearer " + key}}, 0, nil},
		{"none", http.Header{}, 0, ErrNoCredential},
		{"both", http.Header{"Authorization": {"Bearer " + key}, "X-Api-Key": {key}}, 400, nil},
		{"two X-API-Key lines", http.Header{"X-Api-Key": {key, key}}, 400, nil},
		{"empty X-API-Key", http.Header{"X-Api-Key": {""}}, 400, nil},
		{"X-API-Key with space", http.Header{"X-Api-Key": {key[:10] + " " + key[10:]}}, 400, nil},
		{"JWT in X-API-Key", http.Header{"X-Api-Key": {"eyJ.eyJ.sig"}}, 401, nil},
		{"JWT in Authorization", http.Header{"Authorization": {"Bearer eyJ.eyJ.sig"}}, 401, nil},
		{"Basic", http.Header{"Authorization": {"Basic YTpi"}}, 0, ErrUnsupportedScheme},
		{"Basic and X-API-Key", http.Header{"Authorization": {"Basic YTpi"}, "X-Api-Key": {key}}, 400, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := a.Authenticate(headerRequest(tt.h))
			switch {
			case tt.err != nil:
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
			case tt.status != 0:
				var ae *AuthError
				if !errors.As(err, &ae) || ae.Status() != tt.status {
					t.Fatalf("err = %v, want status %d", err, tt.status)
				}
			default:
				if err != nil || p != ok {
					t.Fatalf("= %+v, %v", p, err)
				}
			}
		})
	}
}

// TestAPIKeyConfigErrors: every problem of the config is reported, each
// naming its field.
func TestAPIKeyConfigErrors(t *testing.T) {
	if _, err := NewAPIKeyAuthenticator(APIKeyConfig{Pepper: []byte("x")}); err == nil ||
		err.Error() != "store: required\npepper: 1 bytes, need at least 32" {
		t.Fatalf("config errors: %v", err)
	}
}

// TestMemoryAPIKeyStoreErrors: every bad record is reported by its index
// and field; Validate names the field alone.
func TestMemoryAPIKeyStoreErrors(t *testing.T) {
	good := APIKeyRecord{ID: "4fZbq1Xk0aTe", Tenant: "acme", Account: "alice"}
	badID, noTenant, ctlAccount := good, good, good
	badID.ID = "short"
	noTenant.Tenant = ""
	ctlAccount.Account = "a\x1bb"
	_, err := NewMemoryAPIKeyStore([]APIKeyRecord{good, badID, noTenant, ctlAccount, good})
	want := "[1].id: must be 12 base62 characters\n[2].tenant: is empty\n[3].account: contains a control character\n[4].id: 4fZbq1Xk0aTe duplicate of [0]"
	if err == nil || err.Error() != want {
		t.Errorf("store errors:\n%v\nwant:\n%s", err, want)
	}
	if err := noTenant.Validate(); err == nil || err.Error() != "tenant: is empty" {
		t.Errorf("Validate: %v", err)
	}
	if _, _, err := NewAPIKey(testPepper, "acme", ""); err == nil || err.Error() != "identity: account: is empty" {
		t.Errorf("NewAPIKey: %v", err)
	}
}

// FuzzParseAPIKey cross-checks parseAPIKey against the regular-expression
// reference plus the checksum, and checks that accepted keys recompose.
func FuzzParseAPIKey(f *testing.F) {
	key, _, _ := NewAPIKey(testPepper, "t", "a")
	f.Add(key)
	f.Add(key[:len(key)-1] + "0")
	f.Add("rk_")
	f.Add("rk_000000000000_00000000000000000000000000000000000000")
	f.Add(strings.ToUpper(key))
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, err := parseAPIKey(s)
		m := apiKeyRef.FindStringSubmatch(s)
		want := m != nil && checksum(s[:len(s)-apiKeyChecksumLen]) == m[3]
		if (err == nil) != want {
			t.Fatalf("parseAPIKey(%q) err = %v, reference says %v", s, err, want)
		}
		if err != nil {
			if !errors.Is(err, errAPIKeyMalformed) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if body := apiKeyPrefix + id + "_" + secret; body+checksum(body) != s {
			t.Fatalf("accepted key does not recompose")
		}
	})
}

// apiKeyID returns the public id of key after checking its shape and
// checksum, without any lookup: for tooling that revokes or describes a
// key. The error never contains the key. Safe for concurrent use.
func apiKeyID(key string) (string, error) {
	id, _, err := parseAPIKey(key)
	return id, err
}
