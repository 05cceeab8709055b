package fwd

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOwnershipConfined: in this package only layout.go changes where a
// UMEM unit is: no other file moves a unit between umem's states, recycles
// a frame, or takes an inline slot or frag block. The receive side's moves
// are rxring's (Refill, Next), the states' bookkeeping umem's. Teardown's
// Reclaim, which takes back whatever the closed sockets held, is exempt.
func TestOwnershipConfined(t *testing.T) {
	// Methods that hand a unit to a new owner or state.
	movers := map[string]bool{
		"Move": true, "Recycle": true, "RecycleChain": true, // umem.Zone, rxring.Ring
		"Inline": true, "InlineGather": true, "Pack": true, "Repack": true, // inline.Builder
	}
	states := map[string]bool{"Free": true, "KernelRX": true, "Held": true, "KernelTX": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "layout.go" {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if movers[sel.Sel.Name] {
				t.Errorf("%s: %s changes a UMEM unit's owner outside layout.go", fset.Position(call.Pos()), sel.Sel.Name)
			}
			if sel.Sel.Name == "Reclaim" {
				return true
			}
			for _, a := range call.Args {
				if s, ok := a.(*ast.SelectorExpr); ok && states[s.Sel.Name] {
					if x, ok := s.X.(*ast.Ident); ok && x.Name == "umem" {
						t.Errorf("%s: %s(…, umem.%s) outside layout.go", fset.Position(call.Pos()), sel.Sel.Name, s.Sel.Name)
					}
				}
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("only %d files checked: not run from the package directory?", checked)
	}
}

// TestTXRingOneWriter: in this package only lane.go writes a TX ring (or
// kicks one): no other file imports txring, and none reaches into a lane
// for its ring. Direct sends, the merge and the worker loop all go
// through a lane's methods.
func TestTXRingOneWriter(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "lane.go" {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			if strings.HasSuffix(imp.Path.Value, `/txring"`) {
				t.Errorf("%s: imports txring; only lane.go writes TX rings", fset.Position(imp.Pos()))
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "ring" {
				t.Errorf("%s: .ring outside lane.go: a TX ring written past its lane", fset.Position(sel.Pos()))
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("only %d files checked: not run from the package directory?", checked)
	}
}
