package identity

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSecretsDoNotPrint: a dump of an API key authenticator or of a memory
// store, through fmt's verbs or a slog JSON handler, shows neither the
// pepper nor a stored Hash, in any of the forms fmt would give their bytes
// (text, a decimal list, hex); and the authenticator still verifies with
// the pepper it keeps.
func TestSecretsDoNotPrint(t *testing.T) {
	a, key, rec, counted := newAPIKeyFixture(t)
	store := counted.APIKeyStore // the memory store
	forms := func(b []byte) []string {
		return []string{string(b), fmt.Sprint(b), hex.EncodeToString(b), strings.Trim(fmt.Sprint(b), "[]")}
	}
	secrets := append(forms(testPepper), forms(rec.Hash[:])...)
	for name, v := range map[string]any{"authenticator": a, "authenticator value": *a, "store": store} {
		var dumps []string
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%q"} {
			dumps = append(dumps, fmt.Sprintf(verb, v))
		}
		var js bytes.Buffer
		slog.New(slog.NewJSONHandler(&js, nil)).Info("dump", "v", v)
		dumps = append(dumps, js.String())
		for _, d := range dumps {
			for _, s := range secrets {
				if strings.Contains(d, s) {
					t.Errorf("%s: a dump shows a secret (%.40q...): %.300s", name, s, d)
				}
			}
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", key)
	if _, err := a.Authenticate(r); err != nil {
		t.Errorf("the key no longer verifies: %v", err)
	}
}
