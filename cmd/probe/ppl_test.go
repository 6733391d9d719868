package main

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// pplFixture generates a gated and an ungated checkpoint (max positions
// 48) and a 1500-token stream in a temporary folder.
func pplFixture(t *testing.T) (gated, plain, idsFile string) {
	t.Helper()
	tmp := t.TempDir()
	gated, plain = filepath.Join(tmp, "gated"), filepath.Join(tmp, "plain")
	for _, c := range [][2]string{{"gated", gated}, {"qwen3", plain}} {
		code, _, errs := probe(t, "generate", "--arch", c[0], "--layers", "2", "--d-model", "32", "--heads", "4",
			"--kv-heads", "2", "--vocab", "96", "--max-pos", "48", "--out", c[1])
		if code != 0 {
			t.Fatalf("generate %s: %s", c[0], errs)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	ids := make([]int, 1500)
	for i := range ids {
		ids[i] = rng.IntN(96)
	}
	idsFile = filepath.Join(tmp, "stream.json")
	data, _ := json.Marshal(ids)
	if err := os.WriteFile(idsFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return gated, plain, idsFile
}

// TestPPLCommand runs probe ppl on two generated checkpoints with the
// default gate variants, one length beyond max_position_embeddings, and
// checks the tables, the manifest, the summary printout and the progress
// lines.
func TestPPLCommand(t *testing.T) {
	gated, plain, idsFile := pplFixture(t)
	out := filepath.Join(t.TempDir(), "ppl")
	prog := withProgress(t)
	code, stdout, errs := probe(t, "ppl", "--model", gated+","+plain, "--ids", idsFile, "--lengths", "16,32,64",
		"--samples", "2", "--train-length", "32", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, f := range []string{"ppl_summary.parquet", "ppl_summary.csv", "ppl_chunks.parquet", "ppl_chunks.csv",
		"ppl_calibration.parquet", "ppl_calibration.csv", results.PPLManifestName} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s", f)
		}
	}
	res, err := analysis.ReadPPL(out)
	if err != nil {
		t.Fatal(err)
	}
	// gated: 6 variants × 3 lengths; plain: learned × 3 lengths
	if len(res.Summary) != 6*3+3 {
		t.Fatalf("%d summary rows, want 21", len(res.Summary))
	}
	man := res.Manifest
	if man.Options.TrainLength != 32 || man.Options.CalibLength != 16 || len(man.Calibration) != 1 ||
		man.Calibration[0].Start != 0 || man.Eval[0].Start != 16 || man.Source.Kind != "ids" {
		t.Fatalf("manifest options %+v, calibration %v, first chunk %v", man.Options, man.Calibration, man.Eval[0])
	}
	var set []string
	for _, o := range man.CLIOptions {
		if o.Set {
			set = append(set, o.Name)
		}
	}
	if strings.Join(set, ",") != "ids,lengths,model,out,samples,train-length" {
		t.Fatalf("options given: %v", set)
	}
	for _, want := range []string{"ΔNLL vs learned", "gated  ", "k-lambda", "plain", "true"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary printout lacks %q:\n%s", want, stdout)
		}
	}
	if n := strings.Count(prog.String(), "done"); n != 6*3*2+1+3*2 {
		t.Errorf("%d finished-pass progress lines, want %d:\n%s", n, 6*3*2+1+3*2, prog.String())
	}
	if !strings.Contains(prog.String(), "pass 43/43 plain learned T=64 sample 1 done") {
		t.Errorf("progress:\n%s", prog.String())
	}
}

// TestPPLCommandErrors: bad flags and inputs fail with a message that
// names the problem.
func TestPPLCommandErrors(t *testing.T) {
	gated, _, idsFile := pplFixture(t)
	out := filepath.Join(t.TempDir(), "o")
	text := filepath.Join(t.TempDir(), "t.txt")
	os.WriteFile(text, []byte("hello"), 0o644)
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--ids", idsFile, "--out", out}, "--model is required"},
		{[]string{"--model", gated, "--out", out}, "exactly one of --ids and --text"},
		{[]string{"--model", gated, "--ids", idsFile, "--out", out, "--gate", "k,sigmoid"}, `gate variant "sigmoid"`},
		{[]string{"--model", gated, "--ids", idsFile, "--out", out, "--lengths", "16", "--positions", "from:16"}, "score nothing at T = 16"},
		{[]string{"--model", gated, "--ids", idsFile, "--out", out, "--lengths", "512"}, "the token stream has 1500 tokens"},
		{[]string{"--model", gated, "--ids", idsFile, "--out", out, "--lambda-form", "sandwich"}, `lambda form "sandwich"`},
		{[]string{"--model", gated, "--text", text, "--out", out}, "no readable tokenizer.json"},
	} {
		code, _, errs := probe(t, append([]string{"ppl"}, c.args...)...)
		if code != 1 || !strings.Contains(errs, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %q", c.args, code, errs, c.msg)
		}
	}
}
