// Package apikeyfile reads and writes the demo's API key file and pepper
// file; the library itself ([identity.APIKeyStore]) takes records from
// anywhere.
//
// The API key file (JSON Lines): one record per line, UTF-8, "\n" line ends
// ("\r\n" accepted); blank lines and lines whose first non-space byte is "#"
// are ignored. Each record is one JSON object with these members (plan and
// created optional, nothing else):
//
//		{"id":"4fZbq1Xk0aTe","tenant":"acme","account":"alice","hmac_sha256":"<43 base64url chars>","created":"2026-03-04T12:00:00Z"}
//
//	  - id: the public id (12 base62 characters), unique in the file;
//	  - tenant, account: see [identity.APIKeyRecord];
//	  - plan: optional, the key's plan (see [identity.APIKeyRecord]);
//	  - hmac_sha256: HMAC-SHA256(pepper, secret), unpadded base64url (RFC 4648
//	    §5) of its 32 bytes;
//	  - created: optional, RFC 3339 UTC.
//
// Unknown, missing, duplicate or case-variant members, and duplicate ids,
// are errors naming the line number (never the hash); the first 10 are
// reported, then how many more there are. The file is a regular file of at
// most 16 MiB (some 100 000 keys): a FIFO, a device or a directory is
// refused before it is opened. Errors start with "API key file" or
// "pepper file" (no package prefix: the caller prefixes its field). The
// file holds no
// secret, but it should still be readable only by the service (0600):
// with the pepper it allows offline guessing, and whoever can write it can
// mint principals. Revoke a key by deleting its line and reloading.
package apikeyfile

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ratekey/ratekey/identity"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/internal/regularfile"
	"github.com/ratekey/ratekey/internal/strictjson"
)

// MinPepperBytes is the shortest pepper identity accepts
// (identity.APIKeyConfig.Pepper), in bytes.
const MinPepperBytes = 32

// MaxFileBytes bounds an API key file: 16 MiB, some 100 000 keys of about
// 160 bytes a line.
const MaxFileBytes = 16 << 20

// maxErrors is how many bad lines Parse reports one by one.
const maxErrors = 10

// Load reads an API key file (format above): its records, each valid
// ([identity.APIKeyRecord.Validate]) with a unique id. A missing file is an
// error (create it with [Append]), and so is a file that is not regular or
// is larger than [MaxFileBytes] (stated before it is opened, so a FIFO
// cannot block a reload).
func Load(path string) ([]identity.APIKeyRecord, error) {
	b, err := regularfile.Read(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("API key file: %w", err)
	}
	recs, err := Parse(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("API key file %s: %w", path, err)
	}
	return recs, nil
}

// maxAPIKeyLine bounds one line of an API key file.
const maxAPIKeyLine = 4096

// Parse parses API key file text (format above). Problems are reported
// joined, each with its line number: the first 10, then "and N more bad
// lines".
func Parse(r io.Reader) ([]identity.APIKeyRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1024), maxAPIKeyLine)
	var recs []identity.APIKeyRecord
	var errs []error
	more := 0 // bad lines past maxErrors
	fail := func(err error) {
		if len(errs) < maxErrors {
			errs = append(errs, err)
		} else {
			more++
		}
	}
	seen := map[string]int{}
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		rec, err := parseAPIKeyLine(line)
		if err != nil {
			fail(fmt.Errorf("line %d: %w", n, err))
			continue
		}
		if first, dup := seen[rec.ID]; dup {
			fail(fmt.Errorf("line %d: id %s already on line %d", n, rec.ID, first))
			continue
		}
		seen[rec.ID] = n
		if len(errs) == 0 { // once a line is bad, no record is returned
			recs = append(recs, rec)
		}
	}
	if more > 0 {
		errs = append(errs, fmt.Errorf("and %d more bad lines", more))
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("after line %d: %w", n, err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return recs, nil
}

var apiKeyFields = [...]string{"id", "tenant", "account", "plan", "hmac_sha256", "created"}

func parseAPIKeyLine(line []byte) (identity.APIKeyRecord, error) {
	obj, ok := strictjson.Object(line)
	if !ok {
		return identity.APIKeyRecord{}, errors.New("not one JSON object with unique members")
	}
	for k := range obj {
		known := false
		for _, f := range apiKeyFields {
			known = known || k == f
		}
		if !known {
			return identity.APIKeyRecord{}, fmt.Errorf("unknown member %s", quote.Value(k))
		}
	}
	str := func(name string, required bool) (string, error) {
		raw, ok := obj[name]
		if !ok {
			if required {
				return "", fmt.Errorf("member %s is missing", quote.Value(name))
			}
			return "", nil
		}
		s, ok := strictjson.String(raw)
		if !ok {
			return "", fmt.Errorf("member %s is not a string", quote.Value(name))
		}
		return s, nil
	}
	var rec identity.APIKeyRecord
	var hash, created string
	var err error
	for _, f := range []struct {
		name     string
		dst      *string
		required bool
	}{{"id", &rec.ID, true}, {"tenant", &rec.Tenant, true}, {"account", &rec.Account, true},
		{"plan", &rec.Plan, false}, {"hmac_sha256", &hash, true}, {"created", &created, false}} {
		if *f.dst, err = str(f.name, f.required); err != nil {
			return identity.APIKeyRecord{}, err
		}
	}
	h, err := base64.RawURLEncoding.Strict().DecodeString(hash)
	if err != nil || len(h) != len(rec.Hash) {
		return identity.APIKeyRecord{}, errors.New(`member "hmac_sha256" is not 32 bytes of unpadded base64url`)
	}
	copy(rec.Hash[:], h)
	if created != "" {
		if rec.Created, err = time.Parse(time.RFC3339, created); err != nil {
			return identity.APIKeyRecord{}, errors.New(`member "created" is not an RFC 3339 time`)
		}
	}
	if err := rec.Validate(); err != nil {
		return identity.APIKeyRecord{}, err // "tenant: is empty"
	}
	return rec, nil
}

// Marshal returns rec as one line of an API key file, with its
// trailing "\n".
func Marshal(rec identity.APIKeyRecord) ([]byte, error) {
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	line := struct {
		ID      string `json:"id"`
		Tenant  string `json:"tenant"`
		Account string `json:"account"`
		Plan    string `json:"plan,omitempty"`
		HMAC    string `json:"hmac_sha256"`
		Created string `json:"created,omitempty"`
	}{rec.ID, rec.Tenant, rec.Account, rec.Plan, base64.RawURLEncoding.EncodeToString(rec.Hash[:]), ""}
	if !rec.Created.IsZero() {
		line.Created = rec.Created.UTC().Format(time.RFC3339)
	}
	b, err := json.Marshal(line)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Append appends rec to the API key file at path, creating it
// with mode 0600 if needed. The existing file must parse, and must not hold
// rec.ID already. It is not safe against concurrent writers of the same
// file (the demo's `apikey` command is run by hand).
func Append(path string, rec identity.APIKeyRecord) error {
	line, err := Marshal(rec)
	if err != nil {
		return err
	}
	// Stat before opening, as Load does: opening a FIFO blocks.
	if info, err := os.Stat(path); err == nil && !info.Mode().IsRegular() {
		return fmt.Errorf("API key file: %s: not a regular file", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("API key file: %w", err)
	}
	defer f.Close()
	existing, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return fmt.Errorf("API key file %s: %w", path, err)
	}
	if len(existing) > MaxFileBytes {
		return fmt.Errorf("API key file %s: larger than %d bytes", path, MaxFileBytes)
	}
	recs, err := Parse(bytes.NewReader(existing))
	if err != nil {
		return fmt.Errorf("API key file %s: %w", path, err)
	}
	for _, r := range recs {
		if r.ID == rec.ID {
			return fmt.Errorf("API key file %s: id %s already present", path, rec.ID)
		}
	}
	if len(existing) > 0 && existing[len(existing)-1] != '\n' {
		line = append([]byte{'\n'}, line...)
	}
	if _, err := f.Write(line); err != nil {
		return fmt.Errorf("API key file %s: %w", path, err)
	}
	return f.Close()
}

// maxPepperFileBytes bounds a pepper file (a pepper is 32 to a few hundred
// bytes).
const maxPepperFileBytes = 4096

// ReadPepperFile reads a pepper: the file's bytes without one trailing
// "\n" or "\r\n", at least 32 long. The file must be a
// regular file of at most 4096 bytes (a device such as /dev/urandom is
// refused, not read until memory runs out). The error never contains the
// file's content. Generate one with [GeneratePepper].
func ReadPepper(path string) ([]byte, error) {
	b, err := regularfile.Read(path, maxPepperFileBytes)
	if err != nil {
		return nil, fmt.Errorf("pepper file: %w", err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) < MinPepperBytes {
		return nil, fmt.Errorf("pepper file %s: %d bytes, need at least %d", path, len(b), MinPepperBytes)
	}
	return b, nil
}

// GeneratePepper returns a new random pepper as text suitable for a pepper
// file: 52 random base32 characters (crypto/rand.Text twice, 260 bits) and
// a newline.
func GeneratePepper() string {
	return rand.Text() + rand.Text() + "\n"
}
