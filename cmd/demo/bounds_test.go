package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// demoArgsEnv, when set, makes the test binary run the demo with its
// arguments, separated by U+001F, instead of the tests: a child process whose
// memory the parent can measure.
const demoArgsEnv = "RATEKEY_DEMO_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(demoArgsEnv); args != "" {
		os.Exit(run(strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// maxCheckRSS bounds the peak resident memory of a `demo check` child
// refusing a hostile file. The test binary itself (race detector included)
// starts at about 30 MB; before the bounds, the deep files below took
// 0.5 to 24 GB and /dev/zero grew until the process died.
const maxCheckRSS = 150 << 20

// runDemoChild runs `demo args...` in a child process, killed after 20 s,
// and returns its exit code, its output and its peak RSS in bytes.
func runDemoChild(t *testing.T, args ...string) (int, string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), demoArgsEnv+"="+strings.Join(args, "\x1f"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("demo %v still running after 20 s", args)
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10 // Linux reports KiB
	return cmd.ProcessState.ExitCode(), out.String(), rss
}

// TestCheckHostileFilesBounded: a config (or a file it names) built to
// exhaust memory is refused, naming the field, in a child whose peak
// memory stays under maxCheckRSS.
func TestCheckHostileFilesBounded(t *testing.T) {
	keys, err := filepath.Abs("../../testdata/keys")
	if err != nil {
		t.Fatal(err)
	}
	issuerWith := func(key string) string {
		return "auth:\n  issuers:\n    - issuer: https://a.invalid\n      tenant: a\n      audiences: [x]\n      algorithms: [EdDSA]\n" +
			"      keys:\n        - kid: k\n" + key + "\npolicies:\n  - {name: p, key: [network], rate: 1/s, burst: 2}\n"
	}
	tests := []struct{ name, config, want string }{
		{"flow nested 20 000 deep (40 KB)", "x: " + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "\n",
			"config: 40002 YAML tokens, at most 8192"},
		{"flow nested 4 000 deep (8 KB)", "x: " + strings.Repeat("[", 4000) + strings.Repeat("]", 4000) + "\n",
			"config: line 1: nested more than 16 levels deep"},
		{"block sequences nested on one line", "x:\n  " + strings.Repeat("- ", 8000) + "a\n",
			"config: line 2: nested more than 16 levels deep"},
		{"the issue's 100 KB file nested 50 000 deep", "x: " + strings.Repeat("[", 50000) + strings.Repeat("]", 50000) + "\n",
			"file too large: 100004 bytes, at most 65536"},
		{"flat list of 30 000 items", "x: [" + strings.Repeat("1,", 30000) + "1]\n",
			"YAML tokens, at most 8192"},
		{"public key /dev/zero", issuerWith("          public_key_file: /dev/zero"),
			"public_key_file: /dev/zero: not a regular file (a device)"},
		{"private key /dev/urandom", issuerWith("          public_key_file: " + keys + "/demo-ed25519.pub.pem\n          private_key_file: /dev/urandom"),
			"private_key_file: /dev/urandom: not a regular file (a device)"},
		{"secret /dev/zero", strings.Replace(issuerWith("          secret_file: /dev/zero"), "EdDSA", "HS256", 1),
			"secret_file: /dev/zero: not a regular file (a device)"},
		{"pepper /dev/zero", "auth:\n  api_keys: {file: keys.jsonl, pepper_file: /dev/zero}\npolicies:\n  - {name: p, key: [tenant, account], rate: 1/s, burst: 2}\n",
			"auth.api_keys.pepper_file: pepper file: /dev/zero: not a regular file (a device)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, rss := runDemoChild(t, "check", "-config", writeConfig(t, tt.config))
			if code != 1 || !strings.Contains(out, tt.want) {
				t.Fatalf("exit %d, want 1 and %q in:\n%.2000s", code, tt.want, out)
			}
			t.Logf("peak RSS %d MB", rss>>20)
			if rss > maxCheckRSS {
				t.Errorf("peak RSS %d MB, want at most %d MB", rss>>20, maxCheckRSS>>20)
			}
			if len(out) > 2000 {
				t.Errorf("%d bytes of output", len(out))
			}
		})
	}
	t.Run("config /dev/zero", func(t *testing.T) {
		code, out, rss := runDemoChild(t, "check", "-config", "/dev/zero")
		if code != 1 || !strings.Contains(out, "config: /dev/zero: not a regular file (a device)") || rss > maxCheckRSS {
			t.Fatalf("exit %d, peak RSS %d MB:\n%s", code, rss>>20, out)
		}
	})
	t.Run("config a named pipe", func(t *testing.T) {
		fifo := filepath.Join(t.TempDir(), "ratekey.yaml")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, _ := runDemoChild(t, "check", "-config", fifo) // opened, it would block forever
		if code != 1 || !strings.Contains(out, "not a regular file (a named pipe)") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
}

// TestCheckLongValueQuotedBounded: a 60 KB policy name (a 1 MB one is now
// a file too large) is quoted by its first 64 bytes and its length, not
// whole.
func TestCheckLongValueQuotedBounded(t *testing.T) {
	name := strings.Repeat("A", 60<<10)
	code, _, errOut := runDemo(t, "check", "-config", writeConfig(t, "policies:\n  - {name: "+name+", key: [network], rate: 1/s, burst: 2}\n"))
	want := `policies[0].name: "` + strings.Repeat("A", 64) + `"… (61440 bytes) must be 1-64 letters, digits, '.', '_' or '-'`
	if code != 1 || !strings.Contains(errOut, want) || len(errOut) > 1000 {
		t.Fatalf("exit %d, %d bytes, want %q in:\n%.1000s", code, len(errOut), want, errOut)
	}
}

// TestReloadOfHostileFileKeepsServing: a reload of a file nested 40 000
// deep (80 KB; one like it killed a running demo before the bounds), of
// smaller deep ones and of an empty one is refused, and the running
// configuration keeps answering.
func TestReloadOfHostileFileKeepsServing(t *testing.T) {
	s, path, logs := reloadServer(t, reloadBase)
	defer s.close()
	for _, hostile := range []string{
		"x: " + strings.Repeat("[", 40000) + strings.Repeat("]", 40000) + "\n",
		"x: " + strings.Repeat("[", 16000) + strings.Repeat("]", 16000) + "\n",
		"x: " + strings.Repeat("[", 4000) + strings.Repeat("]", 4000) + "\n",
		"",
	} {
		if err := os.WriteFile(path, []byte(hostile), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := s.reload(); err == nil {
			t.Fatalf("reload of a %d-byte hostile file succeeded", len(hostile))
		}
		// The running policy "kept" (burst 2) still decides.
		if code, decision := hit(s, http.MethodGet, "/v1/reports/1"); decision != "PASSED" && decision != "REJECTED" {
			t.Fatalf("after a refused reload: %d %q", code, decision)
		}
	}
	for _, want := range []string{
		`file too large: 80004 bytes, at most 65536"]`,
		`"errors":["config: 32002 YAML tokens, at most 8192"]`,
		`"errors":["config: line 1: nested more than 16 levels deep"]`,
		`"errors":["policies: at least one policy is required (none is configured, so nothing would be limited)"]`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%.3000s", want, logs.String())
		}
	}
}

// TestCheckLineEndsAndBOM: the embedded default, written with CRLF or CR
// line ends or after a UTF-8 byte order mark (all of which YAML allows),
// is as valid as with LF.
func TestCheckLineEndsAndBOM(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	lf := strings.ReplaceAll(string(defaultConfig), "testdata/", root+"/testdata/")
	for name, config := range map[string]string{
		"CRLF": strings.ReplaceAll(lf, "\n", "\r\n"),
		"CR":   strings.ReplaceAll(lf, "\n", "\r"),
		"BOM":  "\xef\xbb\xbf" + lf,
	} {
		path := writeConfig(t, config)
		code, out, errOut := runDemo(t, "check", "-config", path)
		if want := "configuration " + path + " is valid: 6 policies, 1 issuer\n" + defaultAdaptive; code != 0 || out != want {
			t.Errorf("%s: exit %d, %q %q; want 0 and %q", name, code, out, errOut, want)
		}
	}
}
