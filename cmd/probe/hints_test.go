package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// flagRef finds a flag named in text: --name, not part of a longer word
// (models--org--name).
// externalArgs are string literals that are arguments of other programs
// the commands run (npm pack --silent in probe setup), not hints.
var externalArgs = map[string]bool{"--silent": true}

var flagRef = regexp.MustCompile(`(?:^|[^A-Za-z0-9-])--([a-z][a-z0-9-]*)`)

// helpFlags returns the flags `probe <cmd...> --help` lists, plus help.
func helpFlags(t *testing.T, cmd ...string) map[string]bool {
	t.Helper()
	code, out, errs := probe(t, append(cmd, "--help")...)
	if code != 0 || errs != "" {
		t.Fatalf("probe %s --help: exit %d, stderr %q", strings.Join(cmd, " "), code, errs)
	}
	flags := map[string]bool{"help": true}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "  --"); ok {
			flags[strings.Fields(rest)[0]] = true
		}
	}
	return flags
}

// checkRefs reports every flag text names that the command cmd does not
// accept. Flags after "probe <other command>" in text belong to that
// command.
func checkRefs(t *testing.T, where, cmd, text string, flagsOf func(string) map[string]bool) {
	t.Helper()
	names := map[string]bool{}
	for _, c := range testCommands() {
		names[strings.Fields(c.name)[0]] = true
	}
	parts := strings.Split(text, "probe ")
	for i, part := range parts {
		owner := cmd
		if i > 0 {
			if f := strings.Fields(part); len(f) > 0 && names[f[0]] {
				owner = f[0]
				if owner == "report" && len(f) > 1 && f[1] == "attention" {
					owner = "report attention"
				}
			} else if i > 0 {
				owner = cmd
			}
		}
		for _, m := range flagRef.FindAllStringSubmatch(part, -1) {
			if !flagsOf(owner)[m[1]] {
				t.Errorf("%s: %q names --%s, which probe %s does not accept", where, text, m[1], owner)
			}
		}
	}
}

// TestHintsNameAcceptedFlags: every flag a message, usage line or example
// names is a flag of the command that prints it. Messages in cmd/probe are
// attributed to the commands whose code reaches them (a call graph of the
// package by function name); messages of the library packages to the
// commands listed in libraryHints.
func TestHintsNameAcceptedFlags(t *testing.T) {
	cache := map[string]map[string]bool{}
	flagsOf := func(cmd string) map[string]bool {
		if cache[cmd] == nil {
			cache[cmd] = helpFlags(t, strings.Fields(cmd)...)
		}
		return cache[cmd]
	}
	for _, c := range testCommands() {
		checkRefs(t, "usage of "+c.name, c.name, c.usage, flagsOf)
		checkRefs(t, "example of "+c.name, c.name, c.example, flagsOf)
	}

	// cmd/probe: string literals per function, and who calls whom.
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	lits := map[string][]string{}         // function → string literals naming a flag
	calls := map[string]map[string]bool{} // function → functions it calls
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil {
				// a command's options type declares its flags in a method
				// every options type has (flags): it is that command's
				rt := fd.Recv.List[0].Type
				if st, ok := rt.(*ast.StarExpr); ok {
					rt = st.X
				}
				if id, ok := rt.(*ast.Ident); ok && strings.HasSuffix(id.Name, "Options") {
					name = id.Name + "." + name
				}
			}
			if calls[name] == nil {
				calls[name] = map[string]bool{}
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if n.Kind == token.STRING {
						if s, err := strconv.Unquote(n.Value); err == nil && flagRef.MatchString(s) {
							lits[name] = append(lits[name], s)
						}
					}
				case *ast.CallExpr:
					switch fn := n.Fun.(type) {
					case *ast.Ident:
						calls[name][fn.Name] = true
					case *ast.SelectorExpr:
						calls[name][fn.Sel.Name] = true
					}
				}
				return true
			})
		}
	}
	// The commands that reach each function; a command's function called
	// by another command (demo runs sweep, ppl, …) prints its own flags.
	// A command's functions are, by name, NewCmdX, runX and XOptions'
	// methods (flags), X its path without spaces in any case.
	cmdFuncs := map[string]string{}
	for _, c := range testCommands() {
		x := strings.ReplaceAll(c.name, " ", "")
		for fn := range calls {
			for _, prefix := range []string{"newcmd", "run"} {
				if strings.EqualFold(fn, prefix+x) {
					cmdFuncs[fn] = c.name
				}
			}
			if typ, _, ok := strings.Cut(fn, "."); ok && strings.EqualFold(typ, x+"options") {
				cmdFuncs[fn] = c.name
			}
		}
	}
	reach := map[string]map[string]bool{}
	var visit func(fn, cmd string)
	visit = func(fn, cmd string) {
		if reach[fn] == nil {
			reach[fn] = map[string]bool{}
		}
		if reach[fn][cmd] {
			return
		}
		reach[fn][cmd] = true
		for callee := range calls[fn] {
			if owner, isCmd := cmdFuncs[callee]; isCmd && owner != cmd {
				continue
			}
			if _, ok := calls[callee]; ok {
				visit(callee, cmd)
			}
		}
	}
	for fn, cmd := range cmdFuncs {
		// demo runs the other commands with argument lists it writes
		// itself ("--model", …): those literals are arguments, not hints.
		if cmd != "demo" {
			visit(fn, cmd)
		}
	}
	if len(reach["runDiag"]) == 0 || len(reach["readText"]) < 4 {
		t.Fatalf("call graph: runDiag reached by %v, readText by %v", reach["runDiag"], reach["readText"])
	}
	for fn, ss := range lits {
		var cmds []string
		for c := range reach[fn] {
			cmds = append(cmds, c)
		}
		sort.Strings(cmds)
		for _, c := range cmds {
			for _, s := range ss {
				if externalArgs[s] {
					continue // an argument of another program, not a hint
				}
				checkRefs(t, fn+" (reached by probe "+c+")", c, s, flagsOf)
			}
		}
	}

	// Library packages: each flag their messages name, and the commands
	// that can print those messages.
	libraryHints := map[string][]string{
		"allow-unexpected":    {"capture", "diag", "sweep", "ppl", "bench", "params", "figures"},                                     // model.Load
		"allow-extrapolation": {"capture", "diag", "sweep", "figures"},                                                               // Forward, ValidateSweepOptions (ppl and bench always allow)
		"disjoint":            {"sweep", "ppl"},                                                                                      // PlanChunks
		"on-nonfinite":        {"sweep", "diag"},                                                                                     // Sweep.Run, Diagnose
		"kernel":              {"diag"},                                                                                              // Diagnose
		"sink-rows":           {"diag"},                                                                                              // Diagnose
		"out":                 {"sweep", "diag", "gdn", "sinks", "massive", "experts", "retrieval", "ppl"},                           // Sweep.Run, runStream: a pass file of another plan
		"force":               {"diag", "gdn", "sinks", "massive", "experts", "retrieval", "ppl"},                                    // runStream: a folder of another plan; DiagRun.Run: a CSV without a run folder
		"deviation-tokens":    {"diag"},                                                                                              // DiagRun.Run
		"revision":            {"capture", "diag", "sweep", "ppl", "bench", "params", "inspect", "tokenize", "figures"},              // checkpoint.ResolveModel
		"model":               {"capture", "diag", "sweep", "bench", "hooks"},                                                        // Model.Forward: a hook the model does not issue
		"steps":               {"retrieval"},                                                                                         // RetrievalRun.Run
		"compute":             {"capture", "diag", "sweep", "ppl", "bench", "params", "hooks", "gdn", "sinks", "massive", "experts"}, // model.Load: bf16 for a family with its own pass
		"memory-check":        {"capture", "diag", "sweep", "ppl", "bench", "gdn", "sinks", "massive", "retrieval", "experts"},       // Model.Forward: a pass that cannot fit
	}
	for _, pkg := range []string{"analysis", "checkpoint", "model", "probes", "hooks", "tokenizer"} {
		files, _ := filepath.Glob(filepath.Join("..", "..", pkg, "*.go"))
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				for _, m := range flagRef.FindAllStringSubmatch(s, -1) {
					cmds, ok := libraryHints[m[1]]
					if !ok {
						t.Errorf("%s: %q names --%s: add it to libraryHints with the commands that can print it", fset.Position(lit.Pos()), s, m[1])
					}
					for _, c := range cmds {
						if !flagsOf(c)[m[1]] {
							t.Errorf("%s: %q names --%s, which probe %s (which can print it) does not accept", fset.Position(lit.Pos()), s, m[1], c)
						}
					}
				}
				return true
			})
		}
	}
}
