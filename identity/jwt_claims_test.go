package identity

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"testing"
)

func TestDecodeObject(t *testing.T) {
	tests := []struct {
		in string
		n  int // members; -1: error
	}{
		{`{}`, 0},
		{` { } `, 0},
		{`{"a":1}`, 1},
		{`{"a":{"b":1,"c":[1,2,{"d":","}]},"e":"x,\"y"}`, 2},
		{`{"a\"":1,"b\\":2}`, 2},
		{`{"a":1,"a":2}`, -1},
		{`{"sub":1,"s\u0075b":2}`, -1},
		{`{"a":1}{}`, -1},
		{`{"a":1}x`, -1},
		{`null`, -1},
		{`[]`, -1},
		{`"x"`, -1},
		{`{"a":}`, -1},
		{`{"a":1,}`, -1},
		{``, -1},
	}
	for _, tt := range tests {
		obj, err := decodeObject([]byte(tt.in))
		if tt.n < 0 {
			if err == nil {
				t.Errorf("decodeObject(%s) = %v, want error", tt.in, obj)
			}
			continue
		}
		if err != nil || len(obj) != tt.n {
			t.Errorf("decodeObject(%s) = %d members, %v; want %d", tt.in, len(obj), err, tt.n)
		}
	}
}

// referenceDecodeObject is a slow, obviously correct decodeObject built on
// json.Decoder's token stream.
func referenceDecodeObject(data []byte) (map[string]json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	obj := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		k, ok := t.(string)
		if _, dup := obj[k]; !ok || dup {
			return nil, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		obj[k] = raw
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return obj, true
}

// FuzzDecodeObject cross-checks decodeObject against the reference.
func FuzzDecodeObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `{"a":{"b":[1,"]"]},"c":"\""}`, `{"s\u0075b":1,"sub":2}`, `null`, `{"a":1} `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeObject(data)
		want, ok := referenceDecodeObject(data)
		if (err == nil) != ok {
			t.Fatalf("decodeObject(%q) err = %v, reference ok = %v", data, err, ok)
		}
		if ok && !maps.EqualFunc(got, want, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
			t.Fatalf("decodeObject(%q) = %q, reference %q", data, got, want)
		}
	})
}
