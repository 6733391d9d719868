package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/filterlens/probe/analysis"
)

// TestHelpOnStdout: probe --help, probe help <cmd> and probe <cmd> --help
// print to stdout with exit 0: the one-line description, the synopsis,
// every flag and an example; a bare probe prints the list to stderr with
// exit 2; a mistyped command gets the closest name.
func TestHelpOnStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errs := probe(t, args...)
		if code != 0 || errs != "" || !strings.Contains(out, "commands:") || !strings.Contains(out, "  capture    run one forward pass") {
			t.Errorf("probe %v: exit %d, stderr %q\n%s", args, code, errs, out)
		}
	}
	if code, out, errs := probe(t); code != 2 || out != "" || !strings.Contains(errs, "commands:") {
		t.Errorf("bare probe: exit %d, stdout %q", code, out)
	}
	for _, c := range testCommands() {
		if c.example == "" && !strings.HasPrefix(c.name, "completion") {
			t.Errorf("probe %s has no example", c.name)
		}
		for _, args := range [][]string{append(strings.Fields(c.name), "--help"), append([]string{"help"}, strings.Fields(c.name)...)} {
			code, out, errs := probe(t, args...)
			if code != 0 || errs != "" {
				t.Errorf("probe %v: exit %d, stderr %q", args, code, errs)
				continue
			}
			for _, want := range []string{"probe " + c.name + " — " + c.summary, "usage: " + c.usage, "example:\n  " + c.example} {
				if !strings.Contains(out, want) && (c.example != "" || !strings.HasPrefix(want, "example")) {
					t.Errorf("probe %v lacks %q:\n%s", args, want, out)
				}
			}
		}
	}
	code, out, _ := probe(t, "help", "capture")
	for _, f := range []string{"--model string", "--revision string", "--ids string", "--text string", "--tokenizer string", "--max-tokens int", "--hook name", "--out string"} {
		if code != 0 || !strings.Contains(out, "\n  "+f+"\n") {
			t.Errorf("help capture lacks flag %q:\n%s", f, out)
		}
	}
	if _, out, _ := probe(t, "report", "--help"); !strings.Contains(out, "probe report attention --capture") {
		t.Errorf("report --help does not mention report attention:\n%s", out)
	}
	if code, out, _ := probe(t, "help", "report", "attention"); code != 0 || !strings.Contains(out, "flags of probe report attention:") || !strings.Contains(out, "--capture string") {
		t.Errorf("help report attention: exit %d\n%s", code, out)
	}
	if code, _, errs := probe(t, "captrue"); code != 2 || !strings.Contains(errs, `unknown command "captrue" (did you mean "capture"?)`) {
		t.Errorf("mistyped command: exit %d, %q", code, errs)
	}
}

// testCmd is one command of probe's tree as its help shows it.
type testCmd struct {
	name, summary, usage, example string // name: the path below probe ("report attention")
}

// testCommands lists every command of probe's tree (but help), depth
// first.
func testCommands() []testCmd {
	var out []testCmd
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			if s.Name() == "help" {
				continue
			}
			out = append(out, testCmd{strings.TrimPrefix(s.CommandPath(), "probe "), s.Short, s.UseLine(), s.Example})
			walk(s)
		}
	}
	walk(newRootCmd())
	return out
}

// TestVersion: probe version prints the module and either the VCS
// revision with the modified state or the reason there is none (test
// binaries never carry it); --json is the manifests' tool record.
func TestVersion(t *testing.T) {
	code, out, errs := probe(t, "version")
	if code != 0 || !strings.HasPrefix(out, "probe ") || !strings.Contains(out, "(module github.com/filterlens/probe)") {
		t.Fatalf("version: exit %d %s\n%s", code, errs, out)
	}
	tool := analysis.Tool()
	if tool.Revision == "" {
		if !strings.Contains(out, "revision: unknown: the build recorded no VCS revision") || tool.Modified != nil {
			t.Errorf("no VCS info, but:\n%s (modified %v)", out, tool.Modified)
		}
	} else if !strings.Contains(out, tool.Revision) {
		t.Errorf("version lacks the revision %s:\n%s", tool.Revision, out)
	}
	_, js, _ := probe(t, "version", "--json")
	var got map[string]any
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got["vcs_modified"]; !ok || got["module"] != "github.com/filterlens/probe" || got["go"] == "" {
		t.Errorf("version --json: %s", js)
	}
	if code, out2, _ := probe(t, "--version"); code != 0 || out2 != out {
		t.Errorf("--version differs from version: %q", out2)
	}
}

// TestTokenIO: tokenize reads stdin and prints token strings with
// --tokens; its output is accepted as it is by every --ids (capture, diag,
// sweep, ppl, bench), also from stdin; diag takes --text.
func TestTokenIO(t *testing.T) {
	needGolden(t)
	withProgress(t)
	tmp := t.TempDir()
	tok := filepath.Join(goldenDir, "tokenizers", "gpt2", "tokenizer.json")
	setStdin := func(s string) {
		old := stdin
		stdin = strings.NewReader(s)
		t.Cleanup(func() { stdin = old })
	}
	setStdin("Hello world<|endoftext|> again")
	code, out, errs := probe(t, "tokenize", "--tokenizer", tok, "--text", "-", "--tokens")
	if code != 0 || strings.TrimSpace(out) != `["Hello","Ġworld","<|endoftext|>","Ġagain"]` {
		t.Errorf("tokenize --tokens from stdin: exit %d %s\n%s", code, errs, out)
	}
	if code, _, errs := probe(t, "tokenize", "--tokenizer", tok, "hello.txt"); code != 1 || !strings.Contains(errs, `unexpected argument "hello.txt" (the text is given with --text <file>, or --text - for standard input)`) {
		t.Errorf("positional text: exit %d, %q", code, errs)
	}
	// tokenize loads no model: it has no arithmetic to choose
	if code, _, errs := probe(t, "tokenize", "--tokenizer", tok, "--text", "-", "--compute", "bf16"); code != 1 || !strings.Contains(errs, "unknown flag: --compute") {
		t.Errorf("tokenize --compute: exit %d, %q", code, errs)
	}

	ck := filepath.Join(tmp, "ck")
	if code, _, errs := probe(t, "generate", "--arch", "gpt2", "--layers", "1", "--d-model", "16", "--heads", "2",
		"--kv-heads", "2", "--vocab", "50257", "--max-pos", "64", "--out", ck); code != 0 {
		t.Fatal(errs)
	}
	data, _ := os.ReadFile(tok)
	os.WriteFile(filepath.Join(ck, "tokenizer.json"), data, 0o644)
	text := filepath.Join(tmp, "t.txt")
	os.WriteFile(text, []byte("The jury said it did find that many of the problems were real, and that the city should act."), 0o644)
	code, ids, errs := probe(t, "tokenize", "--model", ck, "--text", text, "--no-special-tokens")
	if code != 0 {
		t.Fatal(errs)
	}
	idsFile := filepath.Join(tmp, "ids.json")
	os.WriteFile(idsFile, []byte(ids), 0o644)
	for _, args := range [][]string{
		{"capture", "--model", ck, "--ids", idsFile, "--hook", "logits", "--out", filepath.Join(tmp, "c.safetensors")},
		{"diag", "--model", ck, "--ids", idsFile, "--out", filepath.Join(tmp, "d.csv")},
		{"diag", "--model", ck, "--text", text, "--max-tokens", "7", "--out", filepath.Join(tmp, "d7.csv")},
		{"sweep", "--model", ck, "--ids", idsFile, "--lengths", "8", "--samples", "2", "--bootstrap", "0", "--out", filepath.Join(tmp, "sw")},
		{"ppl", "--model", ck, "--ids", idsFile, "--lengths", "8", "--samples", "1", "--out", filepath.Join(tmp, "ppl")},
		{"bench", "--model", ck, "--ids", idsFile, "--reps", "1"},
		{"bench", "--model", ck, "--ids", "-", "--reps", "1"},
		{"capture", "--model", ck, "--ids", "-", "--hook", "logits", "--out", filepath.Join(tmp, "c2.safetensors")},
	} {
		setStdin(ids)
		if code, out, errs := probe(t, args...); code != 0 {
			t.Errorf("probe %s: exit %d %s\n%s", strings.Join(args, " "), code, errs, out)
		}
	}
	csv, _ := os.ReadFile(filepath.Join(tmp, "d7.csv"))
	if n := strings.Count(string(csv), "\n"); n != 1+1*2*7 { // header + 1 layer × 2 heads × 7 queries
		t.Errorf("diag --text --max-tokens 7 wrote %d lines", n)
	}
	if m, err := analysis.ReadManifest(filepath.Join(tmp, "sw", "manifest.json")); err != nil || m.Source.Kind != "ids" || m.Source.File.Path != idsFile {
		t.Errorf("sweep source: %+v %v", m, err)
	}

	// A text longer than the positions names --max-tokens (capture and diag).
	long := filepath.Join(tmp, "long.txt")
	os.WriteFile(long, []byte(strings.Repeat("the city said ", 40)), 0o644)
	for _, cmd := range [][]string{
		{"capture", "--model", ck, "--text", long, "--hook", "logits", "--out", filepath.Join(tmp, "x.safetensors")},
		{"diag", "--model", ck, "--text", long, "--out", filepath.Join(tmp, "x.csv")},
	} {
		code, _, errs := probe(t, cmd...)
		if code != 1 || !strings.Contains(errs, "gives 121 tokens, more than the model's max_position_embeddings 64: pass --max-tokens 64 to keep the first 64 (the learned positions of gpt2 cannot extrapolate)") {
			t.Errorf("%s of a long text: exit %d, %q", cmd[0], code, errs)
		}
	}
}

// TestFlagSpellings: Go's single-dash long flags (-model, -progress=false)
// still parse, values that start with a dash (-, -1) are left alone, and
// the flag relations cobra checks are refused naming the flags as typed.
func TestFlagSpellings(t *testing.T) {
	tmp := t.TempDir()
	nosuch := filepath.Join(tmp, "nosuch")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"capture", "-model", nosuch, "-ids", "-", "-hook", "logits", "-progress=false", "-out", "x"}, 1, nosuch},
		{[]string{"capture", "--model", nosuch, "--ids", "a", "--text", "b", "--hook", "logits", "--out", "x"}, 1, "give exactly one of --ids and --text (given: --ids and --text)"},
		{[]string{"capture", "--model", nosuch, "--ids", "a"}, 1, "--hook and --out are required"},
		{[]string{"capture", "--ids", "a", "--hook", "logits", "--out", "x"}, 1, "--model is required (a checkpoint folder or a hub model id org/name)"},
		{[]string{"capture", "--lenghts", "1k"}, 1, "unknown flag: --lenghts"},
		{[]string{"capture", "--hok", "logits"}, 1, "unknown flag: --hok (closest: --hook)"},
		{[]string{"capture", "extra", "--model", nosuch}, 1, `unexpected argument "extra"`},
		{[]string{"--bogus"}, 2, "commands:"},
		{[]string{"help", "captrue"}, 2, `unknown command "captrue" (did you mean "capture"?)`},
	} {
		code, _, errs := probe(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("probe %v: exit %d, %q; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
	got := rewriteLongFlags([]string{"-model", "m", "-tokens", "-1", "--text", "-", "-progress=false", "-x", "--", "-model"},
		func(n string) bool { return n == "model" || n == "tokens" || n == "progress" })
	if want := []string{"--model", "m", "--tokens", "-1", "--text", "-", "--progress=false", "-x", "--", "-model"}; !slices.Equal(got, want) {
		t.Errorf("rewriteLongFlags = %q, want %q", got, want)
	}
}
