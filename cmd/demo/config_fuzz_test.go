package main

import (
	"testing"
)

// FuzzParseConfig: whatever a config file holds, parseConfig neither
// panics (demo check and a reload read files an operator may have
// half-written) nor answers with an error of the input's size: its errors
// name lines, they do not quote the source. A config it accepts has its
// defaults filled in.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		string(defaultConfig),
		"listen: 127.0.0.1:9090\npolicies:\n  - name: p\n    rate: 10/s\n    burst: 5\n",
		"policies: [{name: p, rate: 1/s, burst: 1}]\n",
		"a: &x 1\nb: *x\n",
		"---\n---\n",
		"policies:\n  - name: \"unclosed\n    rate: 1/s\n",
		"policies: [[[[[[[[[[\n",
		"listen: 0x10\n",
		"\xef\xbb\xbflisten: :8080\n",
		"? [a, b]\n: c\n",
		"policies:\n\t- name: tab\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseConfig(data, "/nonexistent")
		if err != nil {
			if c != nil {
				t.Fatalf("a config beside error %v", err)
			}
			if n := len(err.Error()); n > 4096 {
				t.Fatalf("error of %d bytes for %d bytes of input: %.200q", n, len(data), err)
			}
			return
		}
		if c.Listen == "" || c.Debug.Path == "" {
			t.Fatalf("accepted config without its defaults: listen %q, debug path %q", c.Listen, c.Debug.Path)
		}
		if c.dir != "/nonexistent" {
			t.Fatalf("accepted config with directory %q, want the one given", c.dir)
		}
	})
}
