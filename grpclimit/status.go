package grpclimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// problemPrefix starts every ratekey problem type (RFC 9457 type URNs).
const problemPrefix = "urn:ratekey:problem:"

// retryAfter returns the Retry-After of h in whole seconds (RFC 9110
// §10.2.3; the chain writes delay-seconds only), and false when it has
// none, or one out of range (0 to 2³¹-1 s).
func retryAfter(h http.Header) (secs int64, ok bool) {
	secs, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
	return secs, err == nil && secs >= 0 && secs < 1<<31
}

// problem is the part of the chain's RFC 9457 body a refusal maps.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Detail   string   `json:"detail"`
	Policy   string   `json:"policy"`
	Violated []string `json:"violated-policies"`
}

// codeOf returns the gRPC code of a refusal of problem type typ (its
// suffix after problemPrefix) answered with HTTP status httpStatus: by
// type, and by status for the types whose status varies
// (invalid-forwarding-chain, missing-dimension) and for a body that is no
// ratekey problem (a Config.Deny's).
func codeOf(typ string, httpStatus int) codes.Code {
	switch typ {
	case "rate-limited", "cost-exceeds-burst", "concurrency-limited":
		return codes.ResourceExhausted
	case "overloaded", "delay-abandoned", "store-unavailable", "key-source-unavailable":
		return codes.Unavailable
	case "invalid-token", "unauthenticated":
		return codes.Unauthenticated
	case "invalid-request", "invalid-cost":
		return codes.InvalidArgument
	}
	switch httpStatus {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusInternalServerError:
		return codes.Internal
	}
	return codes.Unknown
}

// quotaTypes are the problem types whose policy is a quota the client
// spent: their status carries a google.rpc.QuotaFailure.
var quotaTypes = map[string]bool{"rate-limited": true, "cost-exceeds-burst": true, "concurrency-limited": true}

// refusal returns the status error of a call the chain answered with
// httpStatus, header h and body (an RFC 9457 problem, or a Config.Deny's
// body, which only its status maps): the code of codeOf, the problem's
// detail as message (secret-free by construction: policy names and fixed
// texts), and the details:
//   - google.rpc.ErrorInfo: reason the problem type's suffix in upper
//     snake case ("RATE_LIMITED"), domain "ratekey", metadata "type" (the
//     full URN: compare it, never the message) and "policy";
//   - google.rpc.RetryInfo: the Retry-After, when the chain sent one;
//   - google.rpc.QuotaFailure: for a quota's refusal (rate-limited,
//     cost-exceeds-burst, concurrency-limited), one violation per refusing
//     policy, subject "policy:<name>" and quota_id the name (never its key).
func refusal(httpStatus int, h http.Header, body []byte) error {
	var p problem
	if json.Unmarshal(body, &p) != nil || !strings.HasPrefix(p.Type, problemPrefix) {
		p = problem{}
	}
	typ := strings.TrimPrefix(p.Type, problemPrefix)
	code := codeOf(typ, httpStatus)
	if code == codes.OK {
		code = codes.Unknown
	}
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	if msg == "" {
		msg = "ratekey: refused with HTTP status " + strconv.Itoa(httpStatus)
	}
	var details []protoadapt.MessageV1
	if p.Type != "" {
		info := &errdetails.ErrorInfo{Reason: strings.ToUpper(strings.ReplaceAll(typ, "-", "_")), Domain: "ratekey",
			Metadata: map[string]string{"type": p.Type}}
		if p.Policy != "" {
			info.Metadata["policy"] = p.Policy
		}
		details = append(details, info)
	}
	if secs, ok := retryAfter(h); ok {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(secs) * time.Second)})
	}
	if quotaTypes[typ] && p.Policy != "" {
		policies := p.Violated
		if len(policies) == 0 {
			policies = []string{p.Policy}
		}
		qf := &errdetails.QuotaFailure{}
		for _, name := range policies {
			v := &errdetails.QuotaFailure_Violation{Subject: "policy:" + name, QuotaId: name}
			if name == p.Policy {
				v.Description = msg // the detail describes the first refusing policy
			}
			qf.Violations = append(qf.Violations, v)
		}
		details = append(details, qf)
	}
	st := status.New(code, msg)
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}
