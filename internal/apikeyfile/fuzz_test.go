package apikeyfile

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse: whatever an API key file holds, Parse neither panics nor
// returns a record it would not write back: every record is valid, its id
// unique, and Marshal's line parses to the same record. A refusal reports
// at most maxErrors lines, a count and a scanner error, and never quotes a
// line's hmac_sha256 value (the file's one sensitive member: with the
// pepper it allows offline guessing).
func FuzzParse(f *testing.F) {
	const h = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	for _, s := range []string{
		`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","hmac_sha256":"` + h + `"}`,
		"# comment\n\n" + `{"id":"0123456789ab","tenant":"t","account":"a","plan":"pro","hmac_sha256":"` + h + `","created":"2026-03-04T12:00:00Z"}` + "\r\n",
		`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","hmac_sha256":"` + h + `","Tenant":"x"}`,
		`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","hmac_sha256":"secretsecretsecret"}`,
		`{"id":"abcdefABCDEF","tenant":"acme","account":"alice","hmac_sha256":"` + h + `"}` + "\n" + `{"id":"abcdefABCDEF","tenant":"b","account":"c","hmac_sha256":"` + h + `"}`,
		`{"id":"short","tenant":"","account":"a\u0000","hmac_sha256":"` + h + `"}`,
		strings.Repeat("{\n", 12),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := Parse(bytes.NewReader(data))
		if err != nil {
			if recs != nil {
				t.Fatalf("records beside error %v", err)
			}
			if n := strings.Count(err.Error(), "\n") + 1; n > maxErrors+2 {
				t.Fatalf("%d error lines, want at most %d", n, maxErrors+2)
			}
			for _, hash := range hashValues(data) {
				if len(hash) >= 8 && strings.Contains(err.Error(), hash) {
					t.Fatalf("error quotes an hmac_sha256 value: %v", err)
				}
			}
			return
		}
		ids := map[string]bool{}
		for _, rec := range recs {
			if err := rec.Validate(); err != nil {
				t.Fatalf("record %q returned invalid: %v", rec.ID, err)
			}
			if ids[rec.ID] {
				t.Fatalf("id %q returned twice", rec.ID)
			}
			ids[rec.ID] = true
			line, err := Marshal(rec)
			if err != nil {
				t.Fatalf("Marshal(%q): %v", rec.ID, err)
			}
			again, err := Parse(bytes.NewReader(line))
			if err != nil || len(again) != 1 || !reflect.DeepEqual(again[0], rec) {
				t.Fatalf("record %+v: its line %q parses to %+v, %v", rec, line, again, err)
			}
		}
	})
}

// hashValues returns the string values of every hmac_sha256 member data's
// lines hold (as encoding/json reads them, whatever else is wrong), and
// their base64url decodings re-encoded, for the leak check.
func hashValues(data []byte) []string {
	var out []string
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		var m map[string]json.RawMessage
		if json.Unmarshal(bytes.TrimSpace(line), &m) != nil {
			continue
		}
		var s string
		if json.Unmarshal(m["hmac_sha256"], &s) == nil && s != "" {
			out = append(out, s)
			if b, err := base64.RawURLEncoding.DecodeString(s); err == nil {
				out = append(out, base64.RawURLEncoding.EncodeToString(b))
			}
		}
	}
	return out
}
