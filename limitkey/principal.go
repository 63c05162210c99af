package limitkey

// Method names how a [Principal] was authenticated.
type Method string

// Authentication methods.
const (
	// MethodJWT: a bearer JWT verified by an identity.JWTAuthenticator.
	MethodJWT Method = "jwt"
	// MethodAPIKey: an API key of the form rk_<id>_<secret><checksum>,
	// checked by an identity.APIKeyAuthenticator against a keyed hash of its
	// secret.
	MethodAPIKey Method = "api_key"
	// MethodAnonymous: no credential was presented and the deployment
	// configured anonymous access. Never the result of an invalid credential.
	MethodAnonymous Method = "anonymous"
)

// Principal is who a verified credential says the caller is: the subject
// whose tenant, account, plan and credential id fill a key's dimensions of
// those names.
//
// A Principal is produced only by authenticators (package identity), and only from verified
// input: for a JWT, after the signature, issuer, audience and expiry checks
// passed, and only from the issuer record whose keys verified it (tenant A's
// key never vouches for tenant B). Code outside authenticators must not
// build one from request data. No field ever holds a secret, so a Principal
// may be logged and its fields used as key values.
type Principal struct {
	// Issuer is the exact `iss` of the issuer record that verified the token
	// (for API keys, identity.APIKeyConfig.Issuer, by default "urn:ratekey:api-key").
	Issuer string `json:"issuer"`
	// Tenant is the record's fixed tenant, or the value of the record's tenant
	// claim after it was checked against the record's tenant list (for API
	// keys, the stored record's tenant).
	Tenant string `json:"tenant"`
	// Plan is the record's fixed plan, or the value of the record's plan claim
	// after it was checked against the record's plan list (for API keys, the
	// stored record's plan); "" when the record names none. Like the tenant,
	// never taken from anything the verifier did not vouch for, so a limit
	// chosen by plan cannot be bought by a claim.
	Plan string `json:"plan,omitempty"`
	// Account is the verified subject (`sub`, RFC 7519 §4.1.2), or the stored
	// account of an API key; never empty for MethodJWT and MethodAPIKey.
	Account string `json:"account"`
	// CredentialID is a public credential identifier (`client_id`, else `azp`,
	// for JWTs; the key id for API keys); "" when the token names none. Never
	// a secret.
	CredentialID string `json:"credential_id"`
	// Method is how the principal was authenticated.
	Method Method `json:"method"`
}
