// Package tree holds the repository's own hygiene tests: what git tracks must
// be source, not leftovers of a merge or a build.
package tree

import (
	"bufio"
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTracked is the largest file the repository may track (the zoo's
// checkpoints are about 4.5 MB; a built binary is 70 MB and more).
const maxTracked = 10 << 20

// tracked returns the repository root and the files git tracks, or skips
// the test where git or the repository is absent (a module zip).
func tracked(t *testing.T) (string, []string) {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git work tree (%v): nothing to check", err)
	}
	root := strings.TrimSpace(string(out))
	ls, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range bytes.Split(ls, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	return root, files
}

// TestNoLargeFiles fails on a tracked file over maxTracked bytes: a binary
// built in the tree and committed by accident.
func TestNoLargeFiles(t *testing.T) {
	root, files := tracked(t)
	for _, f := range files {
		fi, err := os.Lstat(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the work tree, not yet committed
		}
		if fi.Size() > maxTracked {
			t.Errorf("%s is tracked and %d bytes (limit %d): a build output? remove it with `git rm --cached` and ignore it", f, fi.Size(), maxTracked)
		}
	}
}

// TestNoConflictMarkers fails on a tracked text file holding a line that
// starts a merge conflict's side or its divider.
func TestNoConflictMarkers(t *testing.T) {
	root, files := tracked(t)
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil || bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0 {
			continue // deleted, or binary
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, len(data)+1)
		for n := 1; sc.Scan(); n++ {
			if conflictLine(sc.Text()) {
				t.Errorf("%s:%d: merge-conflict marker %q", f, n, sc.Text())
			}
		}
	}
}

// conflictLine reports whether line is one of git's conflict markers:
// "<<<<<<< ", ">>>>>>> " or "||||||| " followed by a label, or "=======" alone.
func conflictLine(line string) bool {
	if line == "=======" {
		return true
	}
	for _, p := range []string{"<<<<<<< ", ">>>>>>> ", "||||||| "} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

func TestConflictLine(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{
		{"<<<<<<< HEAD", true}, {">>>>>>> main", true}, {"=======", true}, {"||||||| base", true},
		{"== setup", false}, {"========", false}, {"a <<<<<<< b", false}, {"", false},
	} {
		if got := conflictLine(c.line); got != c.want {
			t.Errorf("conflictLine(%q) = %v, want %v", c.line, got, c.want)
		}
	}
}

// maxCommandFunc is the longest function cmd/ may hold: a command's run
// function calls the library, and what grows past this belongs in a
// helper of its own or in the library.
const maxCommandFunc = 80

// TestThinCommands fails on a function in cmd/ (tests aside) longer than
// maxCommandFunc lines.
func TestThinCommands(t *testing.T) {
	root, files := tracked(t)
	fset := token.NewFileSet()
	for _, f := range files {
		if !strings.HasPrefix(f, "cmd/") || !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, filepath.Join(root, f), nil, 0)
		if err != nil {
			if os.IsNotExist(errors.Unwrap(err)) {
				continue // deleted in the work tree, not yet committed
			}
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxCommandFunc {
					t.Errorf("%s: %s is %d lines (at most %d in cmd/): move its parts into helpers or the library", f, fd.Name.Name, n, maxCommandFunc)
				}
			}
		}
	}
}
