package identity

import (
	"context"
	"errors"
	"fmt"
)

// memoryStore is the immutable in-memory [APIKeyStore] of
// [NewMemoryAPIKeyStore].
type memoryStore struct {
	byID map[string]APIKeyRecord
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
	s := &memoryStore{byID: make(map[string]APIKeyRecord, len(recs))}
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
		s.byID[r.ID] = r
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// LookupAPIKey implements [APIKeyStore]; it never fails.
func (s *memoryStore) LookupAPIKey(_ context.Context, id string) (APIKeyRecord, bool, error) {
	r, ok := s.byID[id]
	return r, ok, nil
}
