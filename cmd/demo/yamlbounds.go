package main

import (
	"fmt"

	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/token"
)

// Bounds on a config file, checked before the YAML parser sees it. The
// parser's memory grows with the square of the nesting depth before its own
// depth check fires (a 40 KB file nested 10 000 deep took 1.9 GB, 250 KB
// took 24 GB), so a file an operator can point -config or a reload at would
// take the process down. The tokenizer is linear, so the file is tokenized
// first and refused when it is too large, too deep or too long.
const (
	// maxConfigBytes bounds the config file (the embedded default is under
	// 2 KiB; long range lists belong in trusted_proxies rules' files).
	maxConfigBytes = 64 << 10
	// maxConfigTokens bounds its YAML tokens (the default has about 200).
	maxConfigTokens = 8192
	// maxConfigDepth bounds its nesting (the deepest field of this config,
	// a trusted_proxies rule's from list, is 5 levels down).
	maxConfigDepth = 16
)

// coreTags are the YAML 1.2 core schema's tags: a value may say what it is
// with one of them. Any other tag (!foo, !!binary, !!timestamp) names a type
// this config does not have; the decoder would accept it silently.
var coreTags = map[string]bool{"!!str": true, "!!int": true, "!!float": true, "!!bool": true, "!!null": true, "!!seq": true, "!!map": true}

// checkYAMLBounds refuses YAML text larger than maxConfigBytes, of more
// than maxConfigTokens tokens, nested deeper than maxConfigDepth, or
// carrying a tag outside coreTags, naming the line (never quoting it). The
// depth counted is close to the parser's: flow collections open, plus the
// block lines enclosing the token's (each less indented than the next),
// plus the block entries ("- ", "? ") that open on its line before it
// (- - - x nests three sequences). A sequence written at its key's column
// is not counted, so deep block nesting needs ever longer indentation: the
// size bound keeps it to a few hundred levels, which the parser handles in
// linear memory; it is flow and same-line nesting that cost quadratically.
func checkYAMLBounds(data []byte) error {
	if len(data) > maxConfigBytes {
		return fmt.Errorf("config: %d bytes, at most %d", len(data), maxConfigBytes)
	}
	tokens := lexer.Tokenize(string(data))
	if len(tokens) > maxConfigTokens {
		return fmt.Errorf("config: %d YAML tokens, at most %d", len(tokens), maxConfigTokens)
	}
	flow, line, entries := 0, 0, 0
	var indents []int // the columns of the block lines enclosing this one
	for _, tk := range tokens {
		if tk.Position == nil {
			continue
		}
		if tk.Position.Line != line {
			line, entries = tk.Position.Line, 0
			if flow == 0 && tk.Type != token.CommentType {
				for len(indents) > 0 && indents[len(indents)-1] >= tk.Position.Column {
					indents = indents[:len(indents)-1]
				}
				indents = append(indents, tk.Position.Column)
			}
		}
		switch tk.Type {
		case token.SequenceStartType, token.MappingStartType:
			flow++
		case token.SequenceEndType, token.MappingEndType:
			flow = max(flow-1, 0)
		case token.SequenceEntryType, token.MappingKeyType:
			if flow == 0 {
				entries++
			}
		case token.TagType:
			if !coreTags[tk.Value] {
				return fmt.Errorf("config: line %d: YAML tags other than the core schema's (!!str, !!int, ...) are not accepted; remove the tag", line)
			}
		}
		if depth := flow + len(indents) + entries; depth > maxConfigDepth {
			return fmt.Errorf("config: line %d: nested more than %d levels deep", line, maxConfigDepth)
		}
	}
	return nil
}
