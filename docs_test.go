package ratekey_test

import (
	"os"
	"strings"
	"testing"
)

// TestDocsCompleteProgram: the complete program of docs/library.md is
// docs/program/main.go, byte for byte (which go vet ./... and the build
// compile), so the page shows code that compiles.
func TestDocsCompleteProgram(t *testing.T) {
	page, err := os.ReadFile("docs/library.md")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile("docs/program/main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "## A complete program\n")
	if !ok {
		t.Fatal(`docs/library.md has no "## A complete program" section`)
	}
	_, rest, ok = strings.Cut(rest, "```go\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("the section has no ```go block")
	}
	if block != string(prog) {
		t.Errorf("docs/library.md's complete program differs from docs/program/main.go: edit both")
	}
}
