package ratekey_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// TestDocsPackageLayout: the package list of docs/library.md ("The
// packages") names every public package of the module, once, with exactly
// the module's packages it imports (non-test files, internal/ aside).
func TestDocsPackageLayout(t *testing.T) {
	page, err := os.ReadFile("docs/library.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(page), "## The packages\n")
	section, _, _ = strings.Cut(section, "\n## ")
	line := regexp.MustCompile("(?m)^- `([a-z/]+)`[^\\n]*? Imports: ([a-z/, ]+)\\.$")
	documented := map[string]string{}
	for _, m := range line.FindAllStringSubmatch(section, -1) {
		dir := m[1]
		if dir == "ratekey" {
			dir = "."
		}
		if _, dup := documented[dir]; dup {
			t.Errorf("%s listed twice", m[1])
		}
		documented[dir] = m[2]
	}
	actual := moduleImports(t)
	for dir, imports := range actual {
		doc, ok := documented[dir]
		if !ok {
			t.Errorf("package %s is not in docs/library.md's list", dir)
			continue
		}
		if doc != imports {
			t.Errorf("docs/library.md says %s imports %q; the code imports %q", dir, doc, imports)
		}
	}
	for dir := range documented {
		if _, ok := actual[dir]; !ok {
			t.Errorf("docs/library.md lists %s, which is not a package of the module", dir)
		}
	}
}

// moduleImports returns, for each public package directory of the module
// ("." for the root), the module packages its non-test files import,
// sorted and joined with ", " ("none" for none).
func moduleImports(t *testing.T) map[string]string {
	const module = "github.com/ratekey/ratekey/"
	out := map[string]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "internal" || d.Name() == "cmd" || d.Name() == "bench" || d.Name() == "docs" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		files, _ := filepath.Glob(filepath.Join(path, "*.go"))
		seen := map[string]bool{}
		any := false
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			any = true
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, im := range file.Imports {
				p := strings.Trim(im.Path.Value, `"`)
				if rest, ok := strings.CutPrefix(p, module); ok && !strings.HasPrefix(rest, "internal") {
					seen[rest] = true
				}
			}
		}
		if any {
			list := slices.Sorted(maps.Keys(seen))
			if len(list) == 0 {
				list = []string{"none"}
			}
			out[path] = strings.Join(list, ", ")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
