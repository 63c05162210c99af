package trustedproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ratekey/ratekey/internal/httpsonly"
	"github.com/ratekey/ratekey/internal/redact"
	"go4.org/netipx"
)

// Source supplies a trusted set that can change while the service runs (a
// CDN's published ranges, a file an orchestrator rewrites). A [Rule]'s
// trusted set is the union of its From entries and the latest set of each
// of its Sources.
//
// Contract:
//   - Load returns the complete current set, or an error. It is called by
//     [New] (once, for the initial set) and by [Resolver.Refresh]; never on
//     the request path, so it may block (honouring ctx) and do I/O.
//   - The returned set must not be modified afterwards (netipx.IPSet is
//     immutable when built with IPSetBuilder).
//   - A nil or empty set is treated as a failure: an emptied range list is
//     far more likely a broken download than a real change, and accepting
//     it would silently demote every proxy to a client.
//   - The set may hold IPv4-mapped IPv6 ranges ("::ffff:10.0.0.0/104"):
//     they trust the IPv4 addresses they map, as [ParseSet] entries do, and
//     count toward the every-address refusal (::ffff:0:0/96 is every IPv4
//     address).
//   - Load may be called from several goroutines, but never concurrently
//     for the same Resolver (Refresh serialises).
type Source interface {
	Load(ctx context.Context) (*netipx.IPSet, error)
}

// SourceFunc adapts a function to [Source]; the function carries the
// Source contract (complete set or error, may block, honours ctx). A set
// built once with [ParseSet] or netipx is
// SourceFunc(func(context.Context) (*netipx.IPSet, error) { return set, nil }),
// though listing its entries in Rule.From is simpler.
type SourceFunc func(ctx context.Context) (*netipx.IPSet, error)

// Load calls f(ctx).
func (f SourceFunc) Load(ctx context.Context) (*netipx.IPSet, error) { return f(ctx) }

// defaultMaxSourceBytes is the size limit, in bytes, of a FileSource or
// URLSource document when MaxBytes is 0: 4 MiB, ample for every published
// cloud range list in the text format below.
const defaultMaxSourceBytes = 4 << 20

// defaultSourceTimeout is the time limit of one URLSource load when
// Timeout is 0.
const defaultSourceTimeout = 10 * time.Second

// FileSource loads a trusted set from a text file on every Load: one
// [ParseSet] entry per line (CIDR, address or shorthand), blank lines and
// lines starting with '#' ignored, spaces and tabs around an entry trimmed.
// This is the format of Cloudflare's https://www.cloudflare.com/ips-v4 and
// ips-v6 lists. A parse error names the file and line; the whole load then
// fails (no partial set).
type FileSource struct {
	// Path is the file to read.
	Path string
	// MaxBytes is the largest file accepted, in bytes; 0 means 4 MiB
	// (4 << 20), ample for every published cloud range list.
	MaxBytes int64
}

// Load reads and parses the file. It honours ctx only before reading. A
// FileSource holds no state: Load is safe for concurrent use.
func (s FileSource) Load(ctx context.Context) (*netipx.IPSet, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, fmt.Errorf("trustedproxy: FileSource: %w", err)
	}
	defer f.Close()
	body, err := readCapped(f, s.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("trustedproxy: FileSource %s: %w", s.Path, err)
	}
	set, err := parseSetText(body)
	if err != nil {
		return nil, fmt.Errorf("trustedproxy: FileSource %s: %w", s.Path, err)
	}
	return set, nil
}

// URLSource loads a trusted set with an HTTP GET on every Load. The body is
// in [FileSource]'s text format; the response must be 200 OK. JSON range
// documents (AWS ip-ranges.json, Google cloud.json) are not parsed: convert
// them, or use a [SourceFunc].
type URLSource struct {
	// URL is an https URL, or an http URL to a loopback host (localhost,
	// 127.0.0.0/8, ::1): over plain http, anyone on the network path could
	// add ranges.
	URL string
	// Client sends the request; nil means a client with no cookie jar that
	// follows at most 3 redirects, each to a URL URL may be (so never from
	// https down to http to another host). A Client of your own must refuse
	// such redirects itself.
	Client *http.Client
	// Timeout bounds one whole load (connect, headers, body); 0 means 10
	// seconds.
	Timeout time.Duration
	// MaxBytes is the largest body accepted, in bytes; 0 means 4 MiB
	// (4 << 20). A larger body fails the load.
	MaxBytes int64
}

var defaultSourceClient = &http.Client{
	CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 3 {
			return errors.New("stopped after 3 redirects")
		}
		if err := httpsonly.Check(req.URL); err != nil {
			return fmt.Errorf("redirect refused: %w", err)
		}
		return nil
	},
}

// Load fetches and parses the document, within Timeout and ctx. A
// URLSource holds no state of its own: Load is safe for concurrent use as
// long as Client is.
func (s URLSource) Load(ctx context.Context) (*netipx.IPSet, error) {
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("trustedproxy: URLSource: not an http or https URL") // the URL may hold a password
	}
	shown := redact.URL(s.URL)
	if err := httpsonly.Check(u); err != nil {
		// Whoever is on the path of a plain-http fetch could add ranges,
		// whose hosts may then name any client.
		return nil, fmt.Errorf("trustedproxy: URLSource %s: %w", shown, err)
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = defaultSourceTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("trustedproxy: URLSource %s: %w", shown, redact.Error(err))
	}
	req.Header.Set("Accept", "text/plain")
	c := s.Client
	if c == nil {
		c = defaultSourceClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("trustedproxy: URLSource: %w", redact.Error(err)) // its text names the URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("trustedproxy: URLSource %s: status %s", shown, resp.Status)
	}
	body, err := readCapped(resp.Body, s.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("trustedproxy: URLSource %s: %w", shown, err)
	}
	set, err := parseSetText(body)
	if err != nil {
		return nil, fmt.Errorf("trustedproxy: URLSource %s: %w", shown, err)
	}
	return set, nil
}

// readCapped reads all of r, failing if it holds more than max bytes
// (defaultMaxSourceBytes when max <= 0).
func readCapped(r io.Reader, max int64) ([]byte, error) {
	if max <= 0 {
		max = defaultMaxSourceBytes
	}
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return b, nil
}

// parseSetText parses the FileSource text format.
func parseSetText(body []byte) (*netipx.IPSet, error) {
	var b netipx.IPSetBuilder
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 4096), len(body)+1)
	line := 0
	for sc.Scan() {
		line++
		s := strings.Trim(sc.Text(), " \t\r")
		if s == "" || s[0] == '#' {
			continue
		}
		ranges, err := parseSetEntry(s)
		if err != nil {
			if len(errs) < 10 {
				errs = append(errs, fmt.Errorf("line %d %q: %v", line, truncate(s), err))
			}
			continue
		}
		for _, rg := range ranges {
			b.AddRange(rg)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return b.IPSet()
}
