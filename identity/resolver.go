package identity

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekey/ratekey/internal/quote"
)

// ErrUnknownIssuer is what an [IssuerResolver] returns (possibly wrapped)
// for an issuer it does not know; the token is then refused with 401
// invalid_token. It is also wrapped by the [*AuthError] of a token whose
// `iss` names no record. Compare with errors.Is.
var ErrUnknownIssuer = errors.New("identity: token issuer is not accepted")

// IssuerResolver supplies issuer records at run time, for deployments whose
// issuers are not all known at start-up (one identity provider per
// customer). It is consulted only for an unverified `iss` that no static
// record of [JWTConfig.Issuers] names; the `iss` only selects the record,
// and is compared with the record's Issuer again after the signature
// checked out.
//
// Contract for implementations:
//   - Return a complete record (JWKSURL or Keys, Algorithms, Audiences,
//     Tenant or TenantClaim with Tenants) whose Issuer equals issuer
//     exactly; it is validated like a static record, and a record that
//     fails validation, names another issuer, or vouches for a tenant
//     another issuer already vouches for is refused (logged; 503 for an
//     invalid record, 401 for the others).
//   - Return an error wrapping [ErrUnknownIssuer] for an issuer that is not
//     accepted: 401. Any other error means "cannot tell now": 503.
//   - issuer is attacker-controlled: it is any string of at most
//     8192 bytes from an unverified token. Answer unknown
//     issuers cheaply and without fetching anything the issuer names;
//     ratekey does not cache negative answers, so floods of random issuers
//     reach the resolver (put a network-keyed limit before authentication).
//   - ctx carries a deadline (JWKSOptions.Timeout); concurrent tokens of
//     one issuer share one call and wait for it at most that long (then
//     503). A resolver that ignores ctx and hangs keeps the request that
//     called it waiting, and its issuer's other tokens failing with 503,
//     until it returns.
//   - Safe for concurrent use.
//
// One tenant, one issuer, at all times: while a resolved record is in
// force, no other issuer may vouch for its tenants. Once it has expired
// another issuer may take a tenant over, and the first one is then refused
// when the resolver confirms it again (401, its entry dropped) or fails
// (503, it is not kept for the outage).
//
// Resolved records are cached for JWTConfig.ResolverTTL; when it expires
// the resolver is asked again, an unchanged record keeps its cached JWK Set,
// an error other than ErrUnknownIssuer keeps the old record for at most one
// more TTL past the resolver's last confirmation of it (however long the
// resolver stays down), and ErrUnknownIssuer drops it.
type IssuerResolver interface {
	ResolveIssuer(ctx context.Context, issuer string) (IssuerRecord, error)
}

// resolverCache holds resolved records. Safe for concurrent use.
type resolverCache struct {
	r            IssuerResolver
	ttl          time.Duration
	max          int
	staticOwners map[string]string // tenant → static issuer; read-only

	mu      sync.Mutex
	entries map[string]*resolvedEntry
	calls   map[string]*resolveCall
}

type resolvedEntry struct {
	rec       IssuerRecord
	st        *issuerState
	expires   time.Time // guarded by resolverCache.mu
	confirmed time.Time // when the resolver last returned rec; guarded by resolverCache.mu

	// Lock-free view for the verification cache, which must not serve a
	// token of a record that the uncached path would no longer use:
	// until mirrors expires, gone is set once the entry left the map
	// (dropped, replaced or evicted) and is never cleared.
	until atomic.Pointer[time.Time]
	gone  atomic.Bool
}

// newResolvedEntry returns the entry holding st and points st at it.
func newResolvedEntry(rec IssuerRecord, st *issuerState, expires time.Time) *resolvedEntry {
	e := &resolvedEntry{rec: rec, st: st}
	e.setExpires(expires)
	st.res = e
	return e
}

// setExpires updates expires and its lock-free copy (under resolverCache.mu).
func (e *resolvedEntry) setExpires(t time.Time) {
	e.expires = t
	e.until.Store(&t)
}

// retire marks e as removed and stops its JWK Set (under resolverCache.mu).
func (e *resolvedEntry) retire() {
	e.gone.Store(true)
	if e.st.jwks != nil {
		e.st.jwks.close()
	}
}

// inForce reports whether the resolver cache would still hand out e's
// state at now (the clock of resolve): e is the current entry of its
// issuer and has not expired. Safe for concurrent use.
func (e *resolvedEntry) inForce(now time.Time) bool {
	return !e.gone.Load() && now.Before(*e.until.Load())
}

type resolveCall struct {
	done chan struct{}
	st   *issuerState
	err  error
}

// resolve returns the state for an issuer no static record names.
func (a *JWTAuthenticator) resolve(ctx context.Context, iss string) (*issuerState, error) {
	c := a.env.resolver
	now := a.env.now()
	c.mu.Lock()
	if e := c.entries[iss]; e != nil && now.Before(e.expires) {
		c.mu.Unlock()
		return e.st, nil
	}
	if call := c.calls[iss]; call != nil {
		c.mu.Unlock()
		// Wait no longer than the resolver was given (its ctx deadline):
		// a resolver that ignores ctx then holds up only the request that
		// called it, not every token of the issuer.
		timeout := time.NewTimer(a.env.jwks.timeout)
		defer timeout.Stop()
		select {
		case <-call.done:
			return call.st, call.err
		case <-ctx.Done():
			return nil, ErrKeySourceUnavailable
		case <-timeout.C:
			return nil, ErrKeySourceUnavailable
		}
	}
	call := &resolveCall{done: make(chan struct{}), err: ErrKeySourceUnavailable}
	c.calls[iss] = call
	old := c.entries[iss]
	c.mu.Unlock()
	// Ended even if the resolver panics: the waiters get 503 and the
	// next token of this issuer asks again.
	defer func() {
		c.mu.Lock()
		delete(c.calls, iss)
		c.mu.Unlock()
		close(call.done)
	}()
	call.st, call.err = a.resolveSlow(iss, old)
	return call.st, call.err
}

// resolveSlow asks the resolver and updates the cache. A client's cancelled
// request does not cancel a call other requests may share.
func (a *JWTAuthenticator) resolveSlow(iss string, old *resolvedEntry) (*issuerState, error) {
	c := a.env.resolver
	log := a.env.logger
	ctx, cancel := context.WithTimeout(a.env.ctx, a.env.jwks.timeout)
	defer cancel()
	rec, err := c.r.ResolveIssuer(ctx, iss)
	now := a.env.now()
	switch {
	case errors.Is(err, ErrUnknownIssuer):
		if old != nil {
			c.drop(iss, old)
		}
		return nil, ErrUnknownIssuer
	case err != nil:
		if old != nil && c.extendAfterFailure(iss, old, now) {
			log.Warn("ratekey: issuer resolver failed; keeping the previous record", "issuer", logIssuer(iss), "error", err.Error())
			return old.st, nil
		}
		log.Warn("ratekey: issuer resolver failed", "issuer", logIssuer(iss), "error", err.Error())
		return nil, ErrKeySourceUnavailable
	case rec.Issuer != iss:
		log.Warn("ratekey: issuer resolver returned a record for another issuer", "issuer", logIssuer(iss))
		return nil, ErrUnknownIssuer
	}
	if old != nil && reflect.DeepEqual(old.rec, rec) {
		if t, owner := c.extend(iss, old, now.Add(c.ttl), now); owner != "" {
			log.Warn("ratekey: issuer resolver returned a tenant another issuer vouches for", "issuer", logIssuer(iss), "tenant", t, "owner", owner)
			return nil, ErrUnknownIssuer
		}
		return old.st, nil
	}
	rec = cloneRecord(rec)
	st, errs := compileRecord(fmt.Sprintf("issuer %s", quote.Value(iss)), rec, a.env)
	if len(errs) > 0 {
		log.Warn("ratekey: issuer resolver returned an invalid record", "issuer", logIssuer(iss), "error", errors.Join(errs...).Error())
		if st != nil && st.jwks != nil {
			st.jwks.close()
		}
		return nil, ErrKeySourceUnavailable
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, owner := c.conflict(iss, rec, now); owner != "" {
		log.Warn("ratekey: issuer resolver returned a tenant another issuer vouches for", "issuer", logIssuer(iss), "tenant", t, "owner", owner)
		return nil, ErrUnknownIssuer
	}
	if c.entries[iss] == nil && len(c.entries) >= c.max { // new, or evicted while the resolver answered
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
				e.retire()
			}
		}
		if len(c.entries) >= c.max {
			log.Warn("ratekey: too many resolved issuers; refusing a new one", "issuer", logIssuer(iss), "max", c.max)
			return nil, ErrKeySourceUnavailable
		}
	}
	if cur := c.entries[iss]; cur != nil {
		cur.retire()
	}
	e := newResolvedEntry(rec, st, now.Add(c.ttl))
	e.confirmed = now
	c.entries[iss] = e
	return st, nil
}

func (c *resolverCache) drop(iss string, old *resolvedEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries[iss] == old {
		delete(c.entries, iss)
		old.retire()
	}
}

// conflict returns a tenant of rec that an issuer other than iss vouches
// for at now, and that issuer: a static record's, or a resolved entry's
// still in force. owner is "" when there is none. One tenant, one issuer:
// otherwise two issuers' accounts would share every (tenant, account)
// bucket. c.mu is held.
func (c *resolverCache) conflict(iss string, rec IssuerRecord, now time.Time) (tenant, owner string) {
	for _, t := range recordTenants(rec) {
		if o, ok := c.staticOwners[t]; ok && o != iss {
			return t, o
		}
		for other, e := range c.entries {
			if other != iss && now.Before(e.expires) && slices.Contains(recordTenants(e.rec), t) {
				return t, other
			}
		}
	}
	return "", ""
}

// extend keeps old (the resolver confirmed it at now) until until, unless
// one of its tenants has passed to another issuer while old was expired:
// then old is dropped, and the tenant and its owner are returned (owner
// "" otherwise). An entry evicted while the resolver was asked (to make
// room for another issuer, perhaps the one that took its tenant) is not
// stored again; the answer still depends on its tenants' owners now.
func (c *resolverCache) extend(iss string, old *resolvedEntry, until, now time.Time) (tenant, owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tenant, owner = c.conflict(iss, old.rec, now); owner != "" {
		if c.entries[iss] == old {
			delete(c.entries, iss)
			old.retire()
		}
		return tenant, owner
	}
	if c.entries[iss] == old {
		old.setExpires(until)
		old.confirmed = now
	}
	return "", ""
}

// extendAfterFailure keeps old after a resolver failure, but never longer
// than one TTL past the resolver's last confirmation of it: an issuer
// removed from the resolver's source must not live on for as long as the
// resolver stays down. It reports whether old may still be used.
func (c *resolverCache) extendAfterFailure(iss string, old *resolvedEntry, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until := now.Add(c.ttl)
	if limit := old.confirmed.Add(2 * c.ttl); limit.Before(until) {
		until = limit
	}
	if c.entries[iss] != old || !now.Before(until) {
		return false
	}
	if _, owner := c.conflict(iss, old.rec, now); owner != "" {
		return false // a tenant of old has passed to another issuer
	}
	old.setExpires(until)
	return true
}

// cloneRecord copies the slices of rec (key values are shared, as for
// static records).
func cloneRecord(rec IssuerRecord) IssuerRecord {
	rec.Tenants = slices.Clone(rec.Tenants)
	rec.Plans = slices.Clone(rec.Plans)
	rec.Audiences = slices.Clone(rec.Audiences)
	rec.Algorithms = slices.Clone(rec.Algorithms)
	rec.Keys = slices.Clone(rec.Keys)
	return rec
}

// logIssuer bounds an unverified issuer for a log line: an attacker chooses
// it (up to maxTokenBytes), and resolver failures are logged per request.
func logIssuer(iss string) string {
	const max = 200
	if len(iss) <= max {
		return iss
	}
	return iss[:max] + "...(truncated)"
}
