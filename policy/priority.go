package policy

// Class is the priority of a request under an adaptive cap (see
// [Priority]). The strings are a public contract: they appear in the
// debug JSON ("class"), the log and the demo's config.
type Class string

const (
	// ClassCritical: admitted while fewer requests than the cap's limit
	// run; refused only when the whole limit is held.
	ClassCritical Class = "critical"
	// ClassSheddable: the default class, refused first. Its requests may
	// hold the limit less the reserve ([Policy].Reserved) less what
	// critical work needed lately (the most critical requests in flight
	// at once over the last window or two of the cap).
	ClassSheddable Class = "sheddable"
)

// Priority sorts some of an adaptive policy's requests into a Class: those
// whose verified principal has the Tenant and the Plan, and whose
// operation is the Operation, of the entry (each when set; at least one
// is). The first entry of [Policy.Priorities] that matches gives the
// class; a request no entry matches is [ClassSheddable]. Tenant and Plan
// come from verified credentials only (an issuer record or an API key
// record vouched for them), so a client cannot make itself critical; a
// request without a principal (anonymous, or a PreAuth policy) matches on
// the operation only. The demo writes `priorities: [{plan: pro, class:
// critical}]`.
type Priority struct {
	// Tenant matches the principal's verified tenant.
	Tenant string
	// Plan matches the principal's verified plan.
	Plan string
	// Operation matches the request's operation ("GET /v1/reports/{id}").
	Operation string
	// Class is the class of the requests the entry matches.
	Class Class
}
