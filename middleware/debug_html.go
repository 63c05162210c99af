package middleware

import (
	"bytes"
	"encoding/json"
	"html/template"
	"net/http"
	"strconv"

	"github.com/ratekey/ratekey/decide"
)

// debugPage renders a Record for people: a section of tables per stage,
// server-side, no script. Each policy field of the JSON has a column (a
// JSON null shows as —), the record's round trips a row. html/template
// escapes every value (keys and header entries are client-influenced
// text).
var debugPage = template.Must(template.New("debug").Funcs(template.FuncMap{
	"str": func(p any) string {
		switch v := p.(type) {
		case *string:
			if v != nil {
				return *v
			}
		case string:
			return v
		}
		return "—"
	},
	"secs": func(p any) string {
		switch v := p.(type) {
		case *float64:
			if v != nil {
				return strconv.FormatFloat(*v, 'f', -1, 64) + " s"
			}
		case json.Number:
			if f, err := v.Float64(); err == nil {
				return strconv.FormatFloat(f, 'f', -1, 64) + " s"
			}
		}
		return "—"
	},
	"num": func(p any) string {
		if v, ok := p.(json.Number); ok {
			return v.String()
		}
		return "—"
	},
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>ratekey debug: {{.Operation}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #222; }
h1 { font-size: 1.3rem; } h2 { font-size: 1.1rem; margin-top: 1.5rem; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { border: 1px solid #ccc; padding: .25rem .6rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } code { font-family: ui-monospace, monospace; }
.PASSED { background: #e6f4e6; } .DELAYED, .DELAYED_DRY_RUN { background: #fff6d6; }
.REJECTED, .ERROR { background: #fbe3e3; } .REJECTED_DRY_RUN { background: #fdeede; } .SKIPPED { background: #eee; }
form { margin: 1rem 0; } input { font: inherit; }
</style>
</head>
<body>
<h1>ratekey: whose budget does this request spend?</h1>
<form method="get">
<label>method <input name="method" value="{{.FormMethod}}" size="7"></label>
<label>path <input name="path" value="{{.FormPath}}" size="40"></label>
<button type="submit">describe</button>
</form>

<h2>1. Client address</h2>
<table>
<tr><th>peer</th><td><code>{{.Peer}}</code></td></tr>
<tr><th>peer trusted</th><td>{{.Derivation.PeerTrusted}}</td></tr>
<tr><th>header read</th><td>{{if .Derivation.Header}}<code>{{.Derivation.Header}}</code>{{else}}—{{end}}</td></tr>
<tr><th>reason</th><td><code>{{.Derivation.Reason}}</code></td></tr>
<tr><th>client</th><td><code>{{str .Client}}</code></td></tr>
<tr><th>network key</th><td><code>{{str .Network}}</code></td></tr>
{{if .Derivation.Error}}<tr><th>error</th><td class="REJECTED">{{.Derivation.Error}}</td></tr>{{end}}
</table>
{{if .Derivation.Hops}}
<table>
<tr><th>position</th><th>entry</th><th>address</th><th>verdict</th></tr>
{{range .Derivation.Hops}}<tr><td>{{.Position}}</td><td><code>{{.Value}}</code></td><td><code>{{.Address}}</code></td><td>{{.Verdict}}</td></tr>
{{end}}</table>
{{end}}

<h2>2. Credential</h2>
<table>
<tr><th>outcome</th><td>{{.Authentication.Outcome}}</td></tr>
{{if .Authentication.Status}}<tr><th>status</th><td>{{.Authentication.Status}}</td></tr>{{end}}
{{if .Authentication.Detail}}<tr><th>detail</th><td>{{.Authentication.Detail}}</td></tr>{{end}}
{{with .Principal}}
<tr><th>issuer</th><td><code>{{.Issuer}}</code></td></tr>
<tr><th>tenant</th><td><code>{{.Tenant}}</code></td></tr>
<tr><th title="the verified plan, which overrides may match">plan</th><td>{{if .Plan}}<code>{{.Plan}}</code>{{else}}—{{end}}</td></tr>
<tr><th>account</th><td><code>{{.Account}}</code></td></tr>
<tr><th>credential id</th><td>{{if .CredentialID}}<code>{{.CredentialID}}</code>{{else}}—{{end}}</td></tr>
<tr><th>method</th><td>{{.Method}}</td></tr>
{{end}}
</table>

<h2>3. Operation</h2>
<table>
<tr><th>operation</th><td><code>{{.Operation}}</code></td></tr>
<tr><th>rate limited</th><td>{{.Limited}}</td></tr>
<tr><th>decision</th><td class="{{.Decision}}">{{if .Decision}}{{.Decision}}{{else}}—{{end}}</td></tr>
<tr><th>delay</th><td>{{secs .DelaySeconds}}</td></tr>
<tr><th title="round trips to the shared store, both phases">round trips</th><td>{{.RoundTrips}}</td></tr>
<tr><th title="processes sharing each budget, each enforcing its share">replicas</th><td>{{.Replicas}}</td></tr>
</table>

<h2>4. Policies</h2>
{{if .Policies}}
<table>
<tr><th>policy</th><th>key</th><th>decision</th><th>remaining</th><th>retry after</th><th>delay</th><th>note</th></tr>
{{range .Views}}<tr class="{{.decision}}">
<td>{{.name}}{{if .dry_run}} (dry run){{end}}</td><td><code>{{str .key}}</code></td><td>{{.decision}}</td><td>{{.remaining}}</td>
<td>{{secs .retry_after_seconds}}</td><td>{{secs .delay_seconds}}</td>
<td>{{with .skipped_reason}}{{.}}{{end}}{{with .error}}{{.}}{{end}}{{with .fail_mode}} (fail mode: {{.}}){{end}}</td>
</tr>
{{end}}</table>
<table>
<tr><th>policy</th><th title="the override whose limit applied">override</th><th>cost</th><th>rate</th><th>burst</th><th>delay after</th>
<th title="an in-flight cap's slots">max in flight</th><th title="the slots the key's requests hold now (more than max in flight after a reload lowered it)">in flight</th><th>store</th>
<th title="answered by the store's local deny cache, without a round trip">cached</th><th title="the Redis Cluster hash slot whose master decided">slot</th>
<th title="decided on the local fallback store while the shared store could not">fallback</th>
<th title="decided from tokens this process prefetched from Redis, without a round trip">prefetched</th>
<th title="a settling policy's reservation, charged at admission">reserved</th>
<th title="what the request settled at once its handler returned (never, for a would-be decision)">settled</th>
<th title="an adaptive cap's limit now (max_in_flight: auto)">adaptive limit</th><th title="the request's class under an adaptive cap">class</th></tr>
{{range .Views}}<tr class="{{.decision}}">
<td>{{.name}}{{if .dry_run}} (dry run){{end}}</td><td>{{with .override}}<code>{{.}}</code>{{else}}—{{end}}</td><td>{{.cost}}</td><td>{{str .rate}}</td><td>{{num .burst}}</td><td>{{num .delay_after}}</td>
<td>{{num .max_in_flight}}</td><td>{{num .in_flight}}</td><td>{{.store}}</td><td>{{.cached}}</td><td>{{num .slot}}</td><td>{{.fallback}}</td><td>{{.prefetched}}</td>
<td>{{num .reserved}}</td><td>{{num .settled}}</td>
<td>{{num .adaptive_limit}}</td><td>{{with .class}}{{.}}{{else}}—{{end}}</td>
</tr>
{{end}}</table>
{{else}}<p>No policy applies{{if not .Limited}}: the rate limiter does not run for this route{{end}}.</p>{{end}}
<p>Computed without spending any budget.</p>
</body>
</html>
`))

// writeDebugHTML renders rec, the Record of a request with the given
// method and path (which the page's form starts from), with debugPage. The
// page loads nothing and runs nothing: its CSP forbids every source but
// inline style.
func writeDebugHTML(w http.ResponseWriter, rec *Record, method, path string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	_ = debugPage.Execute(w, struct {
		*Record
		Views                []map[string]any // rec.Policies, as the JSON shows them
		FormMethod, FormPath string
	}{rec, policyViews(rec.Policies), method, path})
}

// policyViews returns the JSON objects of ps (decide.PolicyResult's
// MarshalJSON), numbers as json.Number, for the page to show each field
// as the JSON does (a null as —).
func policyViews(ps []decide.PolicyResult) []map[string]any {
	views := make([]map[string]any, len(ps))
	for i := range ps {
		b, _ := ps[i].MarshalJSON() // plain data: it cannot fail
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		_ = d.Decode(&views[i])
	}
	return views
}
