package ratekey_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fzipp/gocyclo"
)

// Functions a reader can hold in their head (issue 26): no function of the
// library or the demo is longer than maxFuncLines lines (from its func
// keyword to its closing brace) or above cyclomatic complexity
// maxComplexity (gocyclo's count, pinned in go.mod); tests, bench/ (its own
// module), docs/ and testdata/ aside.
const (
	maxFuncLines  = 80
	maxComplexity = 20
)

// notChecked matches the paths outside the rule.
var notChecked = regexp.MustCompile(`(_test\.go$|^bench/|^docs/|/testdata/|^testdata/)`)

// TestFunctionsFitInAHead fails naming every function over either bound.
func TestFunctionsFitInAHead(t *testing.T) {
	for _, s := range gocyclo.Analyze([]string{"."}, notChecked) {
		if s.Complexity > maxComplexity {
			t.Errorf("%s: %s has cyclomatic complexity %d; at most %d", s.Pos, s.FuncName, s.Complexity, maxComplexity)
		}
	}
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || notChecked.MatchString(path+"/")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || notChecked.MatchString(path) {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			checked++
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines long; at most %d", fset.Position(fn.Pos()), fn.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 500 {
		t.Fatalf("checked %d functions; the walk missed the tree", checked)
	}
}
