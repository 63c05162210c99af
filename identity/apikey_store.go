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
// found. The store is safe for concurrent use; to change the keys, build a
// new store (and authenticator).
func NewMemoryAPIKeyStore(recs []APIKeyRecord) (APIKeyStore, error) {
	s := &memoryStore{byID: make(map[string]APIKeyRecord, len(recs))}
	var errs []error
	for _, r := range recs {
		if err := r.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := s.byID[r.ID]; dup {
			errs = append(errs, fmt.Errorf("identity: API key id %s appears twice", r.ID))
			continue
		}
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
