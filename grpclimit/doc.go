// Package grpclimit limits gRPC calls with ratekey: unary and stream
// server interceptors that run every call through the same chain as the
// HTTP front door (ratekey.New's Middleware, or any [Front]), so that one
// process limits its HTTP and gRPC traffic against the same buckets. It is
// a package of its own so that programs that import only the HTTP front
// door never link google.golang.org/grpc.
//
// A gRPC call is an HTTP/2 request on the wire (gRPC over HTTP/2,
// github.com/grpc/grpc doc/PROTOCOL-HTTP2.md: a POST to "/" Service-Name
// "/" method name, the metadata as header fields), and the interceptors
// hand the chain exactly that request:
//
//   - client: the call's peer (google.golang.org/grpc/peer) is the TCP
//     peer; forwarding metadata (x-forwarded-for, forwarded (RFC 7239),
//     x-real-ip, ...) is read only when the peer is a trusted proxy, by
//     the same rules as HTTP header fields; nginx's grpc_set_header
//     X-Forwarded-For $proxy_add_x_forwarded_for writes it.
//   - credential: the authorization (and x-api-key) metadata, verified by
//     the same authenticators (JWT, API keys). Binary ("-bin") metadata is
//     never read.
//   - operation: the full method name, "/pkg.Service/Method"; a policy's
//     operations list such names beside HTTP route templates. A method
//     the server does not serve (reaching an UnknownServiceHandler) is
//     UNMATCHED, as an HTTP request no route serves is: a client cannot
//     mint fresh buckets by naming methods.
//   - a call of an operation no policy applies to is passed to its
//     handler untouched (no client address, no credential check, no
//     allocation); give it a policy (one without operations applies to
//     every call) to have it authenticated.
//   - a stream is one request at its start: it spends its tokens then,
//     and holds its in-flight slots until its handler returns; unary
//     calls and streams settle alike when their handler returns
//     (middleware.ReportCost on the handler's context).
//
// Admitted calls carry the RateLimit and RateLimit-Policy values
// (draft-ietf-httpapi-ratelimit-headers-10) as response header metadata
// "ratelimit" and "ratelimit-policy" (and "ratelimit-decision" with
// Config.DecisionHeader), and refused calls too. A refusal is the status
// of this table, by the problem type the HTTP side answers with (the
// contract: compare the ErrorInfo's "type", never the message):
//
//	problem type (urn:ratekey:problem:...)  HTTP         gRPC code
//	rate-limited                            429          RESOURCE_EXHAUSTED + RetryInfo + QuotaFailure
//	cost-exceeds-burst                      429          RESOURCE_EXHAUSTED + QuotaFailure (no RetryInfo: no wait admits it)
//	concurrency-limited                     429          RESOURCE_EXHAUSTED + QuotaFailure (+ RetryInfo with retry_after)
//	overloaded                              503          UNAVAILABLE + RetryInfo
//	delay-abandoned                         503          UNAVAILABLE
//	store-unavailable                       503          UNAVAILABLE + RetryInfo
//	key-source-unavailable                  503          UNAVAILABLE + RetryInfo (5 s)
//	invalid-forwarding-chain                400 (500)    INVALID_ARGUMENT (INTERNAL: an unusable peer address)
//	invalid-token                           401          UNAUTHENTICATED
//	unauthenticated                         401          UNAUTHENTICATED
//	invalid-request                         400          INVALID_ARGUMENT
//	invalid-cost                            400          INVALID_ARGUMENT
//	missing-dimension                       401/403/500  UNAUTHENTICATED / PERMISSION_DENIED / INTERNAL
//
// The details are those of google.rpc's error model (AIP-193; Google's
// client libraries honour RetryInfo); a refusal with a Retry-After also
// carries the trailer grpc-retry-pushback-ms (gRFC A6), which grpc-go's
// retry policy honours. Every refusal carries a google.rpc.ErrorInfo (reason "RATE_LIMITED" and
// so on, domain "ratekey", metadata "type": the problem type's URN, and
// "policy"); RetryInfo's delay is the Retry-After, whole seconds; each
// QuotaFailure violation has subject "policy:<name>" and quota_id the
// policy's name, never its key. The policy's own HTTP status (Policy.Status,
// nginx's 503) does not change the gRPC code. A Config.Deny body is not
// read: its HTTP status maps (400 INVALID_ARGUMENT, 401 UNAUTHENTICATED,
// 403 PERMISSION_DENIED, 429 RESOURCE_EXHAUSTED, 500 INTERNAL, 503
// UNAVAILABLE, any other UNKNOWN). Metadata over 1 MiB (net/http's default
// bound on a request's header) is refused with INVALID_ARGUMENT.
//
// [Limiter.Check] is the debug view of a call from Go code: the Record of
// the debug endpoint for a method and a context's peer and metadata.
package grpclimit
