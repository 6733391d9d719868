package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMain lets the test binary stand in for probe itself (the completion
// scripts run `probe __complete …`) when PROBE_TEST_AS_PROBE is set.
func TestMain(m *testing.M) {
	if os.Getenv("PROBE_TEST_AS_PROBE") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// complete returns what probe __complete offers for the command line
// args (the last one being typed), without descriptions, and the
// directive line.
func complete(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	code, out, errs := probe(t, append([]string{"__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %v: exit %d: %s", args, code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var got []string
	for _, l := range lines[:len(lines)-1] {
		got = append(got, strings.SplitN(l, "\t", 2)[0])
	}
	return got, lines[len(lines)-1]
}

// TestCompletionBash: the script of probe completion bash, sourced in
// bash, completes probe capture --hook blocks.0.attn.hook_ with layer 0's
// attention hook points, from the hook registry (no model given).
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	code, script, errs := probe(t, "completion", "bash")
	if code != 0 || !strings.Contains(script, "__start_probe") {
		t.Fatalf("completion bash: exit %d %s", code, errs)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "probe")); err != nil {
		t.Fatal(err)
	}
	scriptFile := filepath.Join(dir, "probe.bash")
	if err := os.WriteFile(scriptFile, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	// cobra's script needs the bash-completion package's
	// _get_comp_words_by_ref; where it is not installed, a stand-in that
	// reads the words as bash gives them (no COMP_WORDBREAKS rejoining,
	// which this line does not need). Then what bash sets before calling
	// the completion function of probe.
	driver := `for f in /usr/share/bash-completion/bash_completion /etc/bash_completion; do
  [[ -r $f ]] && source "$f" && break
done
if ! declare -F _get_comp_words_by_ref >/dev/null; then
  _get_comp_words_by_ref() {
    while [[ $1 == -* ]]; do shift 2; done
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    words=("${COMP_WORDS[@]}")
    cword=$COMP_CWORD
  }
fi
source "$1"
COMP_WORDS=(probe capture --hook blocks.0.attn.hook_)
COMP_CWORD=3
COMP_LINE="${COMP_WORDS[*]}"
COMP_POINT=${#COMP_LINE}
__start_probe probe blocks.0.attn.hook_ --hook
printf '%s\n' "${COMPREPLY[@]}"`
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", driver, "bash", scriptFile)
	cmd.Env = append(os.Environ(), "PROBE_TEST_AS_PROBE=1", "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.Output() // stderr: compopt says it runs outside a completion
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	got := strings.Fields(string(out))
	for _, want := range []string{"blocks.0.attn.hook_pattern", "blocks.0.attn.hook_q", "blocks.0.attn.hook_z", "blocks.0.attn.hook_gate"} {
		if !slices.Contains(got, want) {
			t.Errorf("bash completion of --hook blocks.0.attn.hook_ lacks %s: %q", want, got)
		}
	}
	for _, g := range got {
		if !strings.HasPrefix(g, "blocks.0.attn.hook_") {
			t.Errorf("bash completion of --hook blocks.0.attn.hook_ offers %q", g)
		}
	}
}

// TestCompletionValues: the flags a person would otherwise look up
// complete from the registries, and --model from the folders that hold a
// config.json (a folder without one suggests nothing, without failing).
func TestCompletionValues(t *testing.T) {
	tmp := t.TempDir()
	for _, d := range []string{"a", "b/empty", "zoo/m1", "zoo/m2"} {
		os.MkdirAll(filepath.Join(tmp, d), 0o755)
	}
	for _, d := range []string{"a", "zoo/m1", "zoo/m2"} {
		os.WriteFile(filepath.Join(tmp, d, "config.json"), []byte("{}"), 0o644)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"capture", "--hook", "blocks.*.attn.hook_pat"}, []string{"blocks.*.attn.hook_pattern", "blocks.*.attn.hook_pattern_decayed"}},
		{[]string{"capture", "--hook", "logi"}, []string{"logits"}},
		{[]string{"capture", "--compute", "bf"}, []string{"bf16", "bf16-proj"}},
		{[]string{"generate", "--arch", "gemma"}, []string{"gemma2", "gemma3", "gemma", "gemma4_text"}},
		{[]string{"sweep", "--format", "parquet,"}, []string{"parquet,csv", "parquet,jsonl"}},
		{[]string{"figures", "--paper", "r"}, []string{"rfa", "rt"}},
		{[]string{"inspect", tmp + "/zoo/m"}, []string{tmp + "/zoo/m1", tmp + "/zoo/m2"}},
		{[]string{"capture", "--model", tmp + "/"}, []string{tmp + "/a", tmp + "/zoo/"}},
		{[]string{"capture", "--model", tmp + "/zoo/"}, []string{tmp + "/zoo/m1", tmp + "/zoo/m2"}},
		{[]string{"capture", "--model", tmp + "/b/"}, nil},
		{[]string{"capture", "--model", tmp + "/nosuch/"}, nil},
	} {
		got, directive := complete(t, c.args...)
		if !slices.Equal(got, c.want) {
			t.Errorf("complete %v: %q (%s), want %q", c.args, got, directive, c.want)
		}
	}
}
