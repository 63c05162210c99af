package identity

import (
	"context"
	"errors"
	"fmt"
)

// memoryStore is the immutable in-memory [APIKeyStore] of
// [NewMemoryAPIKeyStore].
type memoryStore struct {
	byID map[string]storedKey
}

// storedKey is a record as the memory store keeps it: its Hash in a
// secretBytes (rec.Hash is zero), so that a dump of the store, through any
// fmt verb or log/slog, shows no hash.
type storedKey struct {
	rec  APIKeyRecord
	hash secretBytes
}

var _ APIKeyStore = (*memoryStore)(nil)

// NewMemoryAPIKeyStore validates recs (each [APIKeyRecord.Validate], ids
// unique) and returns an immutable in-memory [APIKeyStore] holding copies
// of them, whose LookupAPIKey never fails. The error joins every problem
// found, each naming the record by its index in recs and then the field,
// with no package prefix: `[2].tenant: is empty`, `[3].id: 4fZbq1Xk0aTe
// duplicate of [0]`. The store is safe for concurrent use; to change the
// keys, build a new store (and authenticator).
func NewMemoryAPIKeyStore(recs []APIKeyRecord) (APIKeyStore, error) {
	s := &memoryStore{byID: make(map[string]storedKey, len(recs))}
	var errs []error
	first := make(map[string]int, len(recs)) // id → the index of its first record
	for i, r := range recs {
		if field, err := r.validate(); err != nil {
			errs = append(errs, fmt.Errorf("[%d].%s: %w", i, field, err))
			continue
		}
		if j, dup := first[r.ID]; dup {
			errs = append(errs, fmt.Errorf("[%d].id: %s duplicate of [%d]", i, r.ID, j)) // a valid id is 12 base62 characters
			continue
		}
		first[r.ID] = i
		k := storedKey{rec: r}
		k.hash.set(string(r.Hash[:]))
		k.rec.Hash = [len(r.Hash)]byte{}
		s.byID[r.ID] = k
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// LookupAPIKey implements [APIKeyStore]; it never fails.
func (s *memoryStore) LookupAPIKey(_ context.Context, id string) (APIKeyRecord, bool, error) {
	k, ok := s.byID[id]
	if !ok {
		return APIKeyRecord{}, false, nil
	}
	r := k.rec
	copy(r.Hash[:], k.hash.bytes())
	return r, true, nil
}
