// Package strictjson decodes JSON the way ratekey reads untrusted or
// hand-edited JSON (JWT headers and claims, JWK Sets, API key files): an
// object with duplicate members, or a string that is not valid UTF-8, is
// refused instead of silently resolved.
package strictjson

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Object splits a JSON object into its members. It fails on invalid JSON, a
// value other than an object, duplicate keys (compared after JSON
// unescaping, so "sub" and "s\u0075b" are duplicates) and trailing data.
//
// json.Unmarshal validates the whole input and keeps the last of duplicate
// keys; duplicates are detected by comparing the number of distinct keys
// with the number of members counted on the (now known valid) text.
func Object(data []byte) (map[string]json.RawMessage, bool) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return nil, false
	}
	if topLevelMembers(data) != len(obj) {
		return nil, false
	}
	return obj, true
}

// topLevelMembers counts the members of the JSON object in data, which must
// be valid JSON whose top-level value is an object.
func topLevelMembers(data []byte) int {
	depth, commas := 0, 0
	inString, escaped, nonEmpty := false, false, false
	for _, c := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			if depth == 1 {
				nonEmpty = true
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				commas++
			}
		}
	}
	if !nonEmpty {
		return 0
	}
	return commas + 1
}

// String decodes raw as a JSON string. It refuses other JSON types and
// strings that are not valid UTF-8 or contain U+FFFD after unescaping (lone
// surrogate escapes and invalid bytes both decode to U+FFFD, so two
// different encodings would otherwise yield one value).
func String(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || !utf8.Valid(raw) {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	if strings.ContainsRune(s, utf8.RuneError) {
		return "", false
	}
	return s, true
}
