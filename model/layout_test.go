package model

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// familyOptionFields are the only references to a family's types outside
// its files: Config's typed options of the research families (public API:
// cfg.RFA, cfg.BFT, … are read by callers), never switched on.
var familyOptionFields = map[string]bool{
	"config.go:RFAConfig": true, "config.go:SelRoPEConfig": true, "config.go:BFTConfig": true,
	"config.go:RTConfig": true, "config.go:AFAConfig": true, "config.go:DeltaNetConfig": true,
	"config.go:FalconH1Config": true,
}

// TestNothingSwitchesOnAFamily walks the AST of the package's non-test
// files and fails where a file refers to an Arch constant, or to a type
// declared in a family's files, outside that family's files (docs/
// families.md: a family is its own file, on shared building blocks). A
// family's files are those that share the stem (the name up to the first
// '_') of a file declaring a &family{…}: rfa.go and rfa_config.go. Every
// Arch constant must be declared in such a file.
func TestNothingSwitchesOnAFamily(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	stem := map[string]string{}
	family := map[string]bool{} // stems of family files
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
		stem[name], _, _ = strings.Cut(strings.TrimSuffix(name, ".go"), "_")
		ast.Inspect(f, func(n ast.Node) bool {
			if cl, ok := n.(*ast.CompositeLit); ok {
				if id, ok := cl.Type.(*ast.Ident); ok && id.Name == "family" {
					family[stem[name]] = true
				}
			}
			return true
		})
	}
	if len(family) < 10 {
		t.Fatalf("found the families' files %v: fewer than the package has; is the test reading model/?", family)
	}
	owner := map[string]string{} // identifier → the file declaring it
	for name, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, sp := range gd.Specs {
				switch s := sp.(type) {
				case *ast.TypeSpec:
					if family[stem[name]] {
						owner[s.Name.Name] = name
					}
				case *ast.ValueSpec:
					if id, ok := s.Type.(*ast.Ident); ok && id.Name == "Arch" {
						for _, n := range s.Names {
							if !family[stem[name]] {
								t.Errorf("%s declares %s outside a family's files", name, n.Name)
							}
							owner[n.Name] = name
						}
					}
				}
			}
		}
	}
	var bad []string
	for name, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			o, ok := owner[id.Name]
			if ok && stem[o] != stem[name] && !familyOptionFields[name+":"+id.Name] {
				bad = append(bad, fset.Position(id.Pos()).String()+": "+id.Name+" (declared in "+o+")")
			}
			return true
		})
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("%s: a family's name outside its files", b)
	}
}
