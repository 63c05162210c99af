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
	"strings"
	"time"

	"go4.org/netipx"

	"github.com/ratekey/ratekey/internal/httpsonly"
	"github.com/ratekey/ratekey/internal/quote"
	"github.com/ratekey/ratekey/internal/redact"
	"github.com/ratekey/ratekey/internal/regularfile"
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
// ips-v6 lists. A parse error names the file, the line and its entry
// (quoted, escaped, at most 64 bytes); the first 10 bad lines are reported,
// then how many more there are, and the whole load fails (no partial set).
// Errors start with "FileSource" (no package prefix: [New] nests them
// under the rule's path, "rules[0].sources[1]: FileSource ...").
type FileSource struct {
	// Path is the file to read. It must be a regular file (after following
	// symbolic links): a FIFO, a device or a directory is refused before it
	// is opened, so a FIFO cannot block New or Refresh forever and
	// /dev/zero cannot be read without end.
	Path string
	// MaxBytes is the largest file accepted, in bytes; 0 means 4 MiB
	// (4 << 20), ample for every published cloud range list.
	MaxBytes int64
}

// Load reads and parses the file. It honours ctx only before reading. A
// file that is not regular is an error (the text says "not a regular
// file"), and so is one larger than MaxBytes (wrapping nothing exported:
// the text says "file too large"); a missing file wraps os.ErrNotExist. A
// FileSource holds no state: Load is safe for concurrent use.
func (s FileSource) Load(ctx context.Context) (*netipx.IPSet, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	max := s.MaxBytes
	if max <= 0 {
		max = defaultMaxSourceBytes
	}
	body, err := regularfile.Read(s.Path, max) // names the path
	if err != nil {
		return nil, fmt.Errorf("FileSource: %w", err)
	}
	set, err := parseSetText(body)
	if err != nil {
		return nil, fmt.Errorf("FileSource %s: %w", s.Path, err)
	}
	return set, nil
}

// URLSource loads a trusted set with an HTTP GET on every Load. The body is
// in [FileSource]'s text format; the response must be 200 OK. JSON range
// documents (AWS ip-ranges.json, Google cloud.json) are not parsed: convert
// them, or use a [SourceFunc]. Errors start with "URLSource" and name the
// URL without its password (no package prefix, as for [FileSource]).
type URLSource struct {
	// URL is an https URL, or an http URL to a loopback host (localhost,
	// 127.0.0.0/8, ::1): over plain http, anyone on the network path could
	// add ranges.
	URL string
	// Client sends the request; nil means a client with no cookie jar that
	// follows at most 3 redirects, each to a URL URL may be (so never from
	// https down to http to another host). With a Client of your own, a
	// load whose last redirect led to such a URL fails (its request was
	// made: refuse such redirects in the Client to avoid that too).
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
		return nil, errors.New("URLSource: not an http or https URL") // the URL may hold a password
	}
	shown := redact.URL(s.URL)
	if err := httpsonly.Check(u); err != nil {
		// Whoever is on the path of a plain-http fetch could add ranges,
		// whose hosts may then name any client.
		return nil, fmt.Errorf("URLSource %s: %w", shown, err)
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = defaultSourceTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("URLSource %s: %w", shown, redact.Error(err))
	}
	req.Header.Set("Accept", "text/plain")
	c := s.Client
	if c == nil {
		c = defaultSourceClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("URLSource: %w", redact.Error(err)) // its text names the URL
	}
	defer resp.Body.Close()
	if err := httpsonly.Check(resp.Request.URL); err != nil {
		// A caller's client followed a redirect to plain http (the default
		// client refuses it).
		return nil, fmt.Errorf("URLSource %s: redirected: %w", shown, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("URLSource %s: status %s", shown, resp.Status)
	}
	body, err := readCapped(resp.Body, s.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("URLSource %s: %w", shown, err)
	}
	set, err := parseSetText(body)
	if err != nil {
		return nil, fmt.Errorf("URLSource %s: %w", shown, err)
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

// maxLineErrors is how many bad lines parseSetText reports one by one.
const maxLineErrors = 10

// parseSetText parses the FileSource text format.
func parseSetText(body []byte) (*netipx.IPSet, error) {
	var b netipx.IPSetBuilder
	var errs []error
	more := 0
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
			if len(errs) < maxLineErrors {
				errs = append(errs, fmt.Errorf("line %d %s: %v", line, quote.Value(s), err))
			} else {
				more++
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
	if more > 0 {
		errs = append(errs, fmt.Errorf("and %d more bad lines", more))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return b.IPSet()
}
