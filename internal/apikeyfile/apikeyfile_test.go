package apikeyfile

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ratekey/ratekey/identity"
)

var testPepper = []byte("pepper-for-tests-0123456789abcdef")

// apiKeyRef is the obviously correct reference for the key shape.
var apiKeyRef = regexp.MustCompile(`^rk_([0-9A-Za-z]{12})_([0-9A-Za-z]{32})([0-9A-Za-z]{6})$`)

// apiKeyRequest is a request presenting key in X-API-Key.
func apiKeyRequest(key string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", key)
	return r
}

// isDesc reports whether err is an invalid_token AuthError described desc.
func isDesc(err error, desc string) bool {
	var ae *identity.AuthError
	return errors.As(err, &ae) && ae.Code == "invalid_token" && ae.Description == desc
}

func TestAPIKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.jsonl")
	var keys []string
	for _, acct := range []string{"alice", "bob"} {
		key, rec, err := identity.NewAPIKey(testPepper, "acme", acct)
		if err != nil {
			t.Fatal(err)
		}
		if err := Append(path, rec); err != nil {
			t.Fatal(err)
		}
		if err := Append(path, rec); err == nil || !strings.Contains(err.Error(), "already present") {
			t.Fatalf("duplicate append: %v", err)
		}
		keys = append(keys, key)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v %v", fi.Mode(), err)
	}
	data, _ := os.ReadFile(path)
	for _, k := range keys {
		if bytes.Contains(data, []byte(k)) || bytes.Contains(data, []byte(apiKeyRef.FindStringSubmatch(k)[2])) {
			t.Fatal("the key file holds a secret")
		}
	}
	recs, err := Load(path)
	if err != nil || len(recs) != 2 {
		t.Fatalf("Load: %v", err)
	}
	store, err := identity.NewMemoryAPIKeyStore(recs)
	if err != nil {
		t.Fatal(err)
	}
	a, err := identity.NewAPIKeyAuthenticator(identity.APIKeyConfig{Store: store, Pepper: testPepper, Issuer: "demo-keys"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(apiKeyRequest(keys[1]))
	if err != nil || p.Account != "bob" || p.Issuer != "demo-keys" {
		t.Fatalf("%+v %v", p, err)
	}
	// A different pepper verifies nothing.
	b, _ := identity.NewAPIKeyAuthenticator(identity.APIKeyConfig{Store: store, Pepper: bytes.Repeat([]byte("x"), 32)})
	if _, err := b.Authenticate(apiKeyRequest(keys[0])); !isDesc(err, "API key is invalid") {
		t.Fatalf("other pepper: %v", err)
	}

	// Appending to a file without a final newline keeps lines apart.
	trunc := filepath.Join(dir, "trunc.jsonl")
	_, rec, _ := identity.NewAPIKey(testPepper, "acme", "carol")
	line, _ := Marshal(rec)
	_ = os.WriteFile(trunc, bytes.TrimSuffix(line, []byte("\n")), 0o600)
	_, rec2, _ := identity.NewAPIKey(testPepper, "acme", "dave")
	if err := Append(trunc, rec2); err != nil {
		t.Fatal(err)
	}
	if recs, err := Load(trunc); err != nil || len(recs) != 2 {
		t.Fatalf("after append to unterminated file: %v", err)
	}
}

func TestParse(t *testing.T) {
	const h = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" // 32 zero bytes
	good := `{"id":"abcdefABCDEF","tenant":"acme","account":"alice","hmac_sha256":"` + h + `"}`
	text := "# comment\n\n" + good + "\r\n" + `{"id":"0123456789ab","tenant":"t","account":"a","hmac_sha256":"` + h + `","created":"2026-03-04T12:00:00Z"}` + "\n"
	recs, err := Parse(strings.NewReader(text))
	if err != nil || len(recs) != 2 || recs[1].Created.IsZero() {
		t.Fatalf("%v %+v", err, recs)
	}
	bad := []struct{ line, want string }{ // want: the whole error text
		{`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","hmac_sha256":"` + h + `","extra":1}`, `line 2: unknown member "extra"`},
		{`{"ID":"abcdefABCDEF","tenant":"acme","account":"alice","hmac_sha256":"` + h + `"}`, `line 2: unknown member "ID"`},
		{`{"id":"abcdefABCDEF","id":"abcdefABCDEX","tenant":"acme","account":"alice","hmac_sha256":"` + h + `"}`, "line 2: not one JSON object with unique members"},
		{`{"id":"abcdef","tenant":"acme","account":"alice","hmac_sha256":"` + h + `"}`, "line 2: id: must be 12 base62 characters"},
		{`{"id":"abcdefABCDEF","tenant":"","account":"alice","hmac_sha256":"` + h + `"}`, "line 2: tenant: is empty"},
		{`{"id":"abcdefABCDEF","tenant":"a\u0007","account":"alice","hmac_sha256":"` + h + `"}`, "line 2: tenant: contains a control character"},
		{`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","hmac_sha256":"c2VjcmV0"}`, `line 2: member "hmac_sha256" is not 32 bytes of unpadded base64url`},
		{`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","hmac_sha256":"` + h + `="}`, `line 2: member "hmac_sha256" is not 32 bytes of unpadded base64url`},
		{`{"id":"abcdefABCDEF","tenant":"acme","account":"alice"}`, `line 2: member "hmac_sha256" is missing`},
		{`{"id":"abcdefABCDEF","tenant":1,"account":"alice","hmac_sha256":"` + h + `"}`, `line 2: member "tenant" is not a string`},
		{`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","hmac_sha256":"` + h + `","created":"yesterday"}`, `line 2: member "created" is not an RFC 3339 time`},
		{`[1]`, "line 2: not one JSON object with unique members"},
		{good, "line 2: id abcdefABCDEF already on line 1"},
	}
	for _, b := range bad {
		_, err := Parse(strings.NewReader(good + "\n" + b.line + "\n"))
		if err == nil || err.Error() != b.want {
			t.Errorf("%s: err = %v, want %q", b.line, err, b.want)
		}
		if err != nil && strings.Contains(err.Error(), h) {
			t.Errorf("error echoes the hash: %v", err)
		}
	}
	if _, err := Parse(strings.NewReader(strings.Repeat("x", maxAPIKeyLine+10))); err == nil {
		t.Error("overlong line accepted")
	}
}

func TestPepper(t *testing.T) {
	dir := t.TempDir()
	p := GeneratePepper()
	path := filepath.Join(dir, "pepper")
	_ = os.WriteFile(path, []byte(p), 0o600)
	got, err := ReadPepper(path)
	if err != nil || string(got) != strings.TrimSuffix(p, "\n") || len(got) != 52 {
		t.Fatalf("ReadPepper = %d bytes, %v", len(got), err)
	}
	_ = os.WriteFile(path, []byte("short\n"), 0o600)
	if _, err := ReadPepper(path); err == nil || strings.Contains(err.Error(), "short") {
		t.Fatalf("short pepper: %v", err)
	}
}

// TestLoadBounded: the many-bad-lines file of an attack pass (40 MB took
// 10.9 GB and printed 20 million lines) now gets at most 10 errors and a
// count; a file over MaxFileBytes is refused before it is read.
func TestLoadBounded(t *testing.T) {
	dir := t.TempDir()
	many := filepath.Join(dir, "many.jsonl")
	if err := os.WriteFile(many, bytes.Repeat([]byte("{}\n"), 100000), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(many)
	lines := strings.Split(fmt.Sprint(err), "\n")
	if len(lines) > 11 || lines[0] != "API key file "+many+`: line 1: member "id" is missing` ||
		lines[len(lines)-1] != "and 99990 more bad lines" {
		t.Errorf("%d error lines: %.2000s", len(lines), err)
	}
	big := filepath.Join(dir, "big.jsonl")
	if err := os.WriteFile(big, make([]byte, MaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || err.Error() != fmt.Sprintf("API key file: %s: file too large: %d bytes, at most %d", big, MaxFileBytes+1, MaxFileBytes) {
		t.Errorf("oversized file: %v", err)
	}
}

// TestPlanMember: plan is optional; Marshal writes it only when set, and
// Parse reads back what Marshal wrote.
func TestPlanMember(t *testing.T) {
	const h = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" // 32 zero bytes
	rec := identity.APIKeyRecord{ID: "abcdefABCDEF", Tenant: "acme", Account: "alice", Plan: "pro"}
	line, err := Marshal(rec)
	if want := `{"id":"abcdefABCDEF","tenant":"acme","account":"alice","plan":"pro","hmac_sha256":"` + h + `"}` + "\n"; err != nil || string(line) != want {
		t.Fatalf("Marshal = %q, %v; want %q", line, err, want)
	}
	rec.Plan = ""
	if line, _ := Marshal(rec); strings.Contains(string(line), "plan") {
		t.Errorf("Marshal without a plan = %q; want no plan member", line)
	}
	recs, err := Parse(strings.NewReader(`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","plan":"pro","hmac_sha256":"` + h + `"}` + "\n"))
	if err != nil || len(recs) != 1 || recs[0].Plan != "pro" {
		t.Fatalf("Parse = %+v, %v; want plan pro", recs, err)
	}
	for text, want := range map[string]string{
		`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","plan":"","hmac_sha256":"` + h + `"}`:       "",
		`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","plan":1,"hmac_sha256":"` + h + `"}`:        `line 1: member "plan" is not a string`,
		`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","plan":"\u0007","hmac_sha256":"` + h + `"}`: "line 1: plan: contains a control character",
	} {
		_, err := Parse(strings.NewReader(text + "\n"))
		if got := fmt.Sprint(err); (want == "" && err != nil) || (want != "" && got != want) {
			t.Errorf("Parse(%s) = %v; want %q", text, err, want)
		}
	}
}
