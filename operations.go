package ratekey

import (
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/ratekey/ratekey/internal/grpcmethod"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/middleware"
)

// operationHint says what an operation is, after each error about one.
const operationHint = ` (an operation is a route's method and full template as registered, e.g. "GET /v1/reports/{id}", a gRPC full method name, e.g. "/pkg.Service/Method", or ` + middleware.UnmatchedOperation + `)`

// malformedOperations refuses, in New, each operation of policies that
// router (a chi router or an *http.ServeMux) can never name, whatever
// routes it will have: no method and space before the template, a method
// that is not an HTTP token, for chi one in lower case (chi upper-cases
// methods) or a template not starting with "/". Whether a route serves a
// well-formed operation is checked at the first request (operationCheck):
// with chi the routes are registered after New. A gRPC full method name
// ("/pkg.Service/Method", see internal/grpcmethod) is an operation too:
// package grpclimit names calls by it, and checks it against the gRPC
// server's services.
func malformedOperations(router http.Handler, policies []Policy) []error {
	_, mux := router.(*http.ServeMux)
	var errs []error
	for i := range policies {
		for _, f := range operationFields(&policies[i]) {
			op := f.op
			if op == middleware.UnmatchedOperation || grpcmethod.Valid(op) {
				continue
			}
			why := ""
			method, target, ok := strings.Cut(op, " ")
			switch {
			case !ok || !token(method) || !strings.Contains(target, "/"):
				why = "write the method, a space and the route's template"
				if mux {
					why = "write the method, a space and the route's pattern"
				}
			case !mux && method != strings.ToUpper(method):
				why = "chi names methods in upper case"
			case !mux && !strings.HasPrefix(target, "/"):
				why = "a chi route's template starts with /"
			case mux && strings.TrimLeft(target, " \t") != target:
				why = "one space after the method"
			default:
				continue
			}
			errs = append(errs, fmt.Errorf("%s.%s: %s is not an operation: %s%s", policyRef(i, policies[i].Name), f.field, quote.Value(op), why, operationHint))
		}
	}
	return errs
}

// operationField is an operation a policy names, and its field:
// operations[j], or priorities[j].operation.
type operationField struct{ field, op string }

// operationFields returns the operations policy p names.
func operationFields(p *Policy) []operationField {
	var fs []operationField
	for j, op := range p.Operations {
		fs = append(fs, operationField{fmt.Sprintf("operations[%d]", j), op})
	}
	for j, pr := range p.Priorities {
		if pr.Operation != "" {
			fs = append(fs, operationField{fmt.Sprintf("priorities[%d].operation", j), pr.Operation})
		}
	}
	return fs
}

// token reports whether s is an HTTP token (RFC 9110 §5.6.2), as a
// method is.
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// policyNameRE is the rate limiter's rule for a policy name.
var policyNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// policyRef names policy i in an error as the rate limiter does:
// policies[i] ("name"), or policies[i] alone when the name is not valid.
func policyRef(i int, name string) string {
	if policyNameRE.MatchString(name) {
		return fmt.Sprintf("policies[%d] (%q)", i, name)
	}
	return fmt.Sprintf("policies[%d]", i)
}

// operationCheck checks, once, at the first request through the
// middleware, that a route serves each operation the policies name
// (middleware.ServesOperation): only then are the routes known (chi
// wants r.Use before the routes, so they come after New; a ServeMux may
// get its routes at any time before serving). An operation no route
// serves is logged as an error naming its field, as New names fields; the
// request is served as before. With chi, the tree is the root the request
// is routed through (so the templates are full ones, wherever the
// middleware is mounted); an operation served by a route outside the
// sub-router the middleware is mounted on is not reported. A route
// registered after the first request is not seen.
type operationCheck struct {
	router   http.Handler
	policies []namedOperations
	logger   *slog.Logger // nil: slog.Default() at the time of the check
	once     sync.Once
}

// namedOperations are a policy's name and the operations it names,
// copied from Config.
type namedOperations struct {
	name string
	ops  []operationField
}

// newOperationCheck returns the check of cfg's policies' operations, or
// nil when no policy names one (UnmatchedOperation aside).
func newOperationCheck(cfg Config) *operationCheck {
	c := &operationCheck{router: cfg.Router, logger: cfg.Logger}
	some := false
	for _, p := range cfg.Policies {
		ops := operationFields(&p)
		c.policies = append(c.policies, namedOperations{p.Name, ops})
		some = some || slices.ContainsFunc(ops, func(f operationField) bool { return f.op != middleware.UnmatchedOperation })
	}
	if !some {
		return nil
	}
	return c
}

// wrap returns next, checking the operations at its first request.
func (c *operationCheck) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.once.Do(func() { c.run(r) })
		next.ServeHTTP(w, r)
	})
}

// run checks the operations against the routes that serve r.
func (c *operationCheck) run(r *http.Request) {
	root := c.router
	if _, mux := root.(*http.ServeMux); !mux {
		if rc := chi.RouteContext(r.Context()); rc != nil {
			if h, ok := rc.Routes.(http.Handler); ok && !isNil(h) {
				root = h // the root chi routes r through
			}
		}
	}
	logger := c.logger
	if logger == nil {
		logger = slog.Default()
	}
	for i, p := range c.policies {
		for _, f := range p.ops {
			if grpcmethod.Valid(f.op) || middleware.ServesOperation(root, f.op) {
				continue // a gRPC method: package grpclimit checks it
			}
			what := "the policy never applies to it"
			if strings.HasPrefix(f.field, "priorities") {
				what = "the entry never matches"
			}
			err := fmt.Errorf("%s.%s: %s is served by no route of the router: %s%s", policyRef(i, p.name), f.field, quote.Value(f.op), what, operationHint)
			logger.ErrorContext(r.Context(), "ratekey operation served by no route", "policy", p.name, "operation", f.op, "error", err.Error())
		}
	}
}
