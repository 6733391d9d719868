package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/model"
)

// TestGenerateKeepsExistingFolders: generate refuses an --out that holds
// anything, naming what is there; --force writes and lists what it left;
// an old sharded index, which would be read instead of the new weights,
// is refused even with --force.
func TestGenerateKeepsExistingFolders(t *testing.T) {
	tmp := t.TempDir()
	ck := filepath.Join(tmp, "trained")
	gen := func(extra ...string) (int, string, string) {
		return probe(t, append([]string{"generate", "--arch", "gpt2", "--layers", "1", "--d-model", "16", "--heads", "2",
			"--kv-heads", "2", "--vocab", "64", "--max-pos", "32", "--out", ck}, extra...)...)
	}
	if code, _, errs := gen(); code != 0 {
		t.Fatal(errs)
	}
	os.WriteFile(filepath.Join(ck, "tokenizer.json"), []byte("{}"), 0o644)
	weights, _ := os.ReadFile(filepath.Join(ck, "model.safetensors"))

	code, _, errs := gen("--seed", "2")
	want := "--out " + ck + " already holds 3 entries (config.json, model.safetensors, tokenizer.json); a random checkpoint (config.json, model.safetensors) would be written among them: choose another --out, or pass --force"
	if code != 1 || !strings.Contains(errs, want) {
		t.Errorf("generate into a checkpoint: exit %d, stderr %q\nwant %q", code, errs, want)
	}
	if now, _ := os.ReadFile(filepath.Join(ck, "model.safetensors")); !bytes.Equal(now, weights) {
		t.Fatal("the refused generate changed model.safetensors")
	}

	code, out, errs := gen("--seed", "2", "--force")
	if code != 0 || !strings.Contains(out, "left as they were (not from this checkpoint; remove them if they belonged to the one replaced): tokenizer.json") {
		t.Errorf("--force: exit %d %s\n%s", code, errs, out)
	}
	if now, _ := os.ReadFile(filepath.Join(ck, "model.safetensors")); bytes.Equal(now, weights) {
		t.Error("--force with another seed left the weights as they were")
	}

	os.WriteFile(filepath.Join(ck, "model.safetensors.index.json"), []byte(`{"weight_map":{}}`), 0o644)
	if code, _, errs := gen("--force"); code != 1 || !strings.Contains(errs, "holds model.safetensors.index.json, which would be read instead of the new model.safetensors") {
		t.Errorf("index left behind: exit %d, %q", code, errs)
	}

	file := filepath.Join(tmp, "file")
	os.WriteFile(file, nil, 0o644)
	if code, _, errs := probe(t, "generate", "--out", file); code != 1 || !strings.Contains(errs, "--out "+file+" is a file, not a folder") {
		t.Errorf("--out a file: exit %d, %q", code, errs)
	}
	if code, _, errs := probe(t, "generate", "--arch", "gpt3", "--out", filepath.Join(tmp, "new")); code != 1 ||
		!strings.Contains(errs, `--arch "gpt3": probe generate makes `+strings.Join(archNames(), ", ")) || !strings.Contains(errs, "qwen3_5") {
		t.Errorf("unknown arch: exit %d, %q", code, errs)
	}
}

// TestSweepFolderKeepsOtherPlans: a sweep refuses a folder that is not a
// sweep, and a finished sweep folder of another plan (a smaller one, other
// analysis options) with the differing manifest fields named, leaving
// its tables byte for byte; the same plan resumes; --force replaces.
func TestSweepFolderKeepsOtherPlans(t *testing.T) {
	modelDir, idsFile := sweepFixture(t)
	withProgress(t)
	tmp := t.TempDir()
	other := filepath.Join(tmp, "notes")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "draft.md"), []byte("mine"), 0o644)
	base := []string{"sweep", "--model", modelDir, "--ids", idsFile, "--bootstrap", "0", "--format", "parquet,csv"}
	code, _, errs := probe(t, append(base, "--lengths", "64", "--out", other)...)
	if code != 1 || !strings.Contains(errs, "--out "+other+" already holds 1 entries (draft.md); a probe sweep") {
		t.Errorf("sweep into a notes folder: exit %d, %q", code, errs)
	}
	if _, err := os.Stat(filepath.Join(other, "passes")); err == nil {
		t.Error("the refused sweep created passes/")
	}

	out := filepath.Join(tmp, "sw")
	if code, _, errs := probe(t, append(base, "--lengths", "64,128", "--samples", "2", "--out", out)...); code != 0 {
		t.Fatal(errs)
	}
	tables := tableFiles(t, out)
	manifest, _ := os.ReadFile(filepath.Join(out, "manifest.json"))
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--lengths", "64", "--samples", "1"}, []string{"holds a probe sweep run (manifest.json) with another plan:",
			"sweep.lengths ([64] here, [64,128] in the folder)", "sweep.samples (1 here, 2 in the folder)"}},
		{[]string{"--lengths", "64,128", "--samples", "2", "--bucket", "16", "--lambda-form", "naive"}, []string{"sweep.bucket (16 here, 64 in the folder)", `sweep.probe.lambda_form ("naive" here, "reml" in the folder)`}},
		{[]string{"--lengths", "64,128", "--samples", "2", "--last-layers", "1"}, []string{"analysis.last_layers (1 here, 7 in the folder)", "probe summarize " + out}},
		{[]string{"--lengths", "64,128", "--samples", "2", "--offset", "5"}, []string{"sweep.offset (5 here, 0 in the folder)"}},
	} {
		code, _, errs := probe(t, append(append(base, "--out", out), c.args...)...)
		for _, w := range c.want {
			if code != 1 || !strings.Contains(errs, w) {
				t.Errorf("%v: exit %d, stderr %q\nwant %q", c.args, code, errs, w)
			}
		}
		if strings.Contains(errs, "map[") {
			t.Errorf("%v: a Go map in the message: %q", c.args, errs)
		}
	}
	for name, b := range tableFiles(t, out) {
		if !bytes.Equal(b, tables[name]) {
			t.Errorf("%s changed after refused re-runs", name)
		}
	}
	if now, _ := os.ReadFile(filepath.Join(out, "manifest.json")); !bytes.Equal(now, manifest) {
		t.Error("manifest.json changed after refused re-runs")
	}
	if code, out, errs := probe(t, append(base, "--lengths", "64,128", "--samples", "2", "--out", out)...); code != 0 || !strings.Contains(out, "4 passes (0 run, 4 already finished)") {
		t.Errorf("same plan: exit %d %s\n%s", code, errs, out)
	}
	code, stdout, errs := probe(t, append(base, "--lengths", "64", "--samples", "1", "--out", out, "--force")...)
	if code != 0 || !strings.Contains(stdout, "1 passes (0 run, 1 already finished)") {
		t.Errorf("--force smaller plan: exit %d %s\n%s", code, errs, stdout)
	}
	// a pass file made with other options is named by its differing fields, not dumped as a Go map
	code, _, errs = probe(t, append(base, "--lengths", "64", "--samples", "1", "--out", out, "--force", "--lambda-form", "naive")...)
	if code != 1 || !strings.Contains(errs, `probe.lambda_form ("naive" here, "reml" in the file)`) || strings.Contains(errs, "map[") {
		t.Errorf("--force over other pass files: exit %d, %q", code, errs)
	}
}

// TestPPLAndMergeKeepExistingFolders: ppl and merge refuse an --out that
// holds something else unless --force.
func TestPPLAndMergeKeepExistingFolders(t *testing.T) {
	modelDir, idsFile := sweepFixture(t)
	withProgress(t)
	tmp := t.TempDir()
	busy := filepath.Join(tmp, "busy")
	os.MkdirAll(busy, 0o755)
	os.WriteFile(filepath.Join(busy, "results.csv"), []byte("x\n"), 0o644)
	code, _, errs := probe(t, "ppl", "--model", modelDir, "--ids", idsFile, "--lengths", "16", "--samples", "1", "--out", busy)
	if code != 1 || !strings.Contains(errs, "--out "+busy+" already holds 1 entries (results.csv)") {
		t.Errorf("ppl: exit %d, %q", code, errs)
	}
	if code, _, errs := probe(t, "ppl", "--model", modelDir, "--ids", idsFile, "--lengths", "16", "--samples", "1", "--out", busy, "--force"); code != 0 {
		t.Errorf("ppl --force: %s", errs)
	}
	sw := filepath.Join(tmp, "sw")
	if code, _, errs := probe(t, "sweep", "--model", modelDir, "--ids", idsFile, "--lengths", "16", "--bootstrap", "0", "--out", sw); code != 0 {
		t.Fatal(errs)
	}
	code, _, errs = probe(t, "merge", sw, "--out", busy)
	if code != 1 || !strings.Contains(errs, "--out "+busy+" already holds") {
		t.Errorf("merge: exit %d, %q", code, errs)
	}
	if code, _, errs := probe(t, "merge", sw, "--out", sw); code != 0 {
		t.Errorf("merge into its own shard folder: %s", errs)
	}
}

// archNames is model.SmallArchs as strings.
func archNames() []string {
	var s []string
	for _, a := range model.SmallArchs() {
		s = append(s, string(a))
	}
	return s
}

// TestReportFoldersKept: figures, report attention and demo refuse an
// --out that holds other files (naming them) unless --force, and replace
// an earlier probe report of theirs; report refuses to replace an HTML
// file that is not a probe report.
func TestReportFoldersKept(t *testing.T) {
	tmp := t.TempDir()
	foreign := filepath.Join(tmp, "notes")
	os.MkdirAll(foreign, 0o755)
	os.WriteFile(filepath.Join(foreign, "thesis.tex"), []byte("x"), 0o644)
	for _, args := range [][]string{
		{"figures", "--paper", "bft", "--static", "--out", foreign},
		{"figures", "--paper", "all", "--static", "--out", foreign},
		{"demo", "--static", "--out", foreign},
	} {
		code, _, errs := probe(t, args...)
		if code == 0 || !strings.Contains(errs, "thesis.tex") || !strings.Contains(errs, "--force") {
			t.Errorf("%v: exit %d, %q", args, code, errs)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(foreign, "thesis.tex")); string(data) != "x" {
		t.Fatal("the foreign file changed")
	}
	out := filepath.Join(tmp, "figs")
	for i := 0; i < 2; i++ { // an earlier report of probe's is replaced
		if code, _, errs := probe(t, "figures", "--paper", "bft", "--static", "--out", out); code != 0 {
			t.Fatalf("figures run %d: %s", i, errs)
		}
	}
	if code, _, errs := probe(t, "figures", "--paper", "bft", "--static", "--force", "--out", foreign); code != 0 {
		t.Fatalf("--force: %s", errs)
	}
	html := filepath.Join(tmp, "page.html")
	os.WriteFile(html, []byte("<html>mine</html>"), 0o644)
	if code, _, errs := probe(t, "report", filepath.Join(tmp, "nosweep"), "--out", html); code == 0 || !strings.Contains(errs, "is not a probe report") {
		t.Errorf("report over a foreign html: exit %d, %q", code, errs)
	}
}
