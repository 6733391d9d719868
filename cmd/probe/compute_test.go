package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
)

// TestComputeBF16Sweep: a sweep with --compute bf16 records the arithmetic
// in its manifest (model.compute_dtype, sweep.compute, the pass keys) and
// the deviation of the first pass's first --deviation-tokens tokens from
// float32 (logits and every diagnostic column its options compute,
// nonzero for the logits), and prints it beside its tables; a float32
// sweep into the same folder is refused naming --compute, and with --force
// refuses the bf16 pass files naming the field; a bf16-proj sweep is
// refused there too and records bf16-proj in a folder of its own (the
// attention in float32 in model.compute); a float32 sweep records
// no deviation; a bad --compute or --deviation-tokens is refused by name.
func TestComputeBF16Sweep(t *testing.T) {
	modelDir, idsFile := sweepFixture(t)
	withProgress(t)
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, errs := probe(t, "sweep", "--model", modelDir, "--ids", idsFile, "--lengths", "100,200", "--samples", "1",
		"--out", out, "--bootstrap", "0", "--compute", "bf16", "--deviation-tokens", "50")
	if code != 0 {
		t.Fatal(errs)
	}
	m, err := analysis.ReadManifest(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Sweep.Compute != string(model.ComputeBF16) || !strings.HasPrefix(m.Model.Compute, "bf16") || passCompute(m.Passes[0]) != model.ComputeBF16 ||
		!strings.Contains(m.Model.Compute, "kernel "+model.BF16Kernel()) {
		t.Errorf("compute in the manifest: sweep %q, model %q, pass key %q", m.Sweep.Compute, m.Model.Compute, passCompute(m.Passes[0]))
	}
	d := m.Deviation
	if d == nil || d.Kernel != model.BF16Kernel() || d.Tokens != 50 || d.Sequences != 1 || len(d.Columns) < 8 || d.Columns[0].Name != "logits" ||
		!(d.Columns[0].MaxAbs > 0) || d.Columns[len(d.Columns)-1].Name != "gate" {
		t.Fatalf("manifest compute_deviation: %+v", d)
	}
	for _, c := range d.Columns {
		if c.Values == 0 || !(c.MaxRel < 0.1) {
			t.Errorf("deviation of %s: %+v", c.Name, c)
		}
	}
	if !strings.Contains(stdout, "compute bf16: deviation from the float32 pass on the first 50 tokens of 1 sequence(s)") ||
		!strings.Contains(stdout, "  lambda_obs    max abs") {
		t.Errorf("the deviation is not printed beside the tables:\n%s", stdout)
	}
	code, _, errs = probe(t, "sweep", "--model", modelDir, "--ids", idsFile, "--lengths", "100,200", "--samples", "1",
		"--out", out, "--bootstrap", "0")
	if code != 1 || !strings.Contains(errs, `sweep.compute (none here, "bf16" in the folder)`) {
		t.Errorf("a float32 sweep into a bf16 sweep's folder: exit %d, %q", code, errs)
	}
	code, _, errs = probe(t, "sweep", "--model", modelDir, "--ids", idsFile, "--lengths", "100,200", "--samples", "1",
		"--out", out, "--bootstrap", "0", "--force")
	if code != 1 || !strings.Contains(errs, "compute (absent here, \"bf16\" in the file)") {
		t.Errorf("a float32 sweep over bf16 pass files (--force): exit %d, %q", code, errs)
	}
	// bf16-proj is another arithmetic (the attention in float32): refused
	// in the bf16 folder, recorded as such in its own
	code, _, errs = probe(t, "sweep", "--model", modelDir, "--ids", idsFile, "--lengths", "100,200", "--samples", "1",
		"--out", out, "--bootstrap", "0", "--compute", "bf16-proj")
	if code != 1 || !strings.Contains(errs, `sweep.compute ("bf16-proj" here, "bf16" in the folder)`) {
		t.Errorf("a bf16-proj sweep into a bf16 sweep's folder: exit %d, %q", code, errs)
	}
	outProj := filepath.Join(t.TempDir(), "out")
	code, stdout, errs = probe(t, "sweep", "--model", modelDir, "--ids", idsFile, "--lengths", "100", "--samples", "1",
		"--out", outProj, "--bootstrap", "0", "--compute", "bf16-proj", "--deviation-tokens", "50")
	if code != 0 {
		t.Fatal(errs)
	}
	if m, err := analysis.ReadManifest(filepath.Join(outProj, "manifest.json")); err != nil || m.Sweep.Compute != string(model.ComputeBF16Proj) ||
		passCompute(m.Passes[0]) != model.ComputeBF16Proj || !strings.Contains(m.Model.Compute, "attention and the rest float32") ||
		m.Deviation == nil || m.Deviation.Compute != string(model.ComputeBF16Proj) {
		t.Errorf("bf16-proj sweep: %v, manifest compute %+v", err, m)
	}
	if !strings.Contains(stdout, "compute bf16-proj: deviation from the float32 pass on the first 50 tokens") {
		t.Errorf("bf16-proj: the deviation is not printed:\n%s", stdout)
	}
	out32 := filepath.Join(t.TempDir(), "out")
	if code, _, errs = probe(t, "sweep", "--model", modelDir, "--ids", idsFile, "--lengths", "100", "--samples", "1",
		"--out", out32, "--bootstrap", "0"); code != 0 {
		t.Fatal(errs)
	}
	if m, err := analysis.ReadManifest(filepath.Join(out32, "manifest.json")); err != nil || m.Deviation != nil || m.Sweep.Compute != "" {
		t.Errorf("float32 sweep: %v, deviation %+v, compute %q", err, m.Deviation, m.Sweep.Compute)
	}
	for _, c := range []struct{ flag, value, msg string }{
		{"--compute", "fp16", `--compute "fp16": want f32, f32-widen, bf16 or bf16-proj`},
		{"--deviation-tokens", "-1", "--deviation-tokens -1: want 0 (none) or more tokens"},
	} {
		code, _, errs := probe(t, "sweep", "--model", modelDir, "--ids", idsFile, "--lengths", "100", "--out", filepath.Join(t.TempDir(), "o"), c.flag, c.value)
		if code != 1 || !strings.Contains(errs, c.msg) {
			t.Errorf("%s %s: exit %d, %q; want %q", c.flag, c.value, code, errs, c.msg)
		}
	}
}

// TestComputeF32Kernels: on a bf16 checkpoint a float32 sweep records the
// kernel of its products in model.compute_dtype (amx-split3 before the
// float32 kernels where the CPU has AMX, the float32 kernels alone
// elsewhere) and no sweep.compute, as before; --compute f32-widen records
// f32-widen in sweep.compute, the pass keys and model.compute_dtype, and a
// default sweep into its folder is refused naming --compute (its products
// sum in another order).
func TestComputeF32Kernels(t *testing.T) {
	withProgress(t)
	tmp := t.TempDir()
	modelDir, idsFile := filepath.Join(tmp, "model"), filepath.Join(tmp, "ids.json")
	if code, _, errs := probe(t, "generate", "--arch", "gated", "--layers", "2", "--d-model", "64", "--heads", "4",
		"--kv-heads", "2", "--vocab", "128", "--max-pos", "512", "--dtype", "bf16", "--out", modelDir); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	ids := make([]int, 1000)
	for i := range ids {
		ids[i] = (7 * i) % 128
	}
	data, _ := json.Marshal(ids)
	os.WriteFile(idsFile, data, 0o644)
	kernel := model.BLAS()
	if kern := "amx-split3/" + kernel; model.BF16Kernel() == "amx" {
		kernel = kern
	}
	sweep := func(out string, args ...string) (int, string) {
		code, _, errs := probe(t, append([]string{"sweep", "--model", modelDir, "--ids", idsFile, "--lengths", "100", "--samples", "1",
			"--out", out, "--bootstrap", "0"}, args...)...)
		return code, errs
	}
	out := filepath.Join(tmp, "f32")
	if code, errs := sweep(out); code != 0 {
		t.Fatal(errs)
	}
	m, err := analysis.ReadManifest(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Sweep.Compute != "" || passCompute(m.Passes[0]) != "" || !strings.Contains(m.Model.Compute, "(kernel "+kernel+")") {
		t.Errorf("f32 sweep: sweep.compute %q, pass key %q, model.compute %q (want the kernel %s)", m.Sweep.Compute, passCompute(m.Passes[0]), m.Model.Compute, kernel)
	}
	outWide := filepath.Join(tmp, "widen")
	if code, errs := sweep(outWide, "--compute", "f32-widen"); code != 0 {
		t.Fatal(errs)
	}
	if m, err = analysis.ReadManifest(filepath.Join(outWide, "manifest.json")); err != nil {
		t.Fatal(err)
	}
	if m.Sweep.Compute != string(model.ComputeF32Widen) || passCompute(m.Passes[0]) != model.ComputeF32Widen || m.Deviation != nil ||
		!strings.Contains(m.Model.Compute, "weights widened to float32") || !strings.Contains(m.Model.Compute, "(kernel "+model.BLAS()+")") {
		t.Errorf("f32-widen sweep: sweep.compute %q, pass key %q, model.compute %q, deviation %+v", m.Sweep.Compute, passCompute(m.Passes[0]), m.Model.Compute, m.Deviation)
	}
	if code, errs := sweep(outWide); code != 1 || !strings.Contains(errs, `sweep.compute (none here, "f32-widen" in the folder)`) {
		t.Errorf("an f32 sweep into an f32-widen sweep's folder: exit %d, %q", code, errs)
	}
}

// TestComputeBF16Diag: probe diag --compute bf16 on a golden batch prints
// the deviation of every column it writes from float32, each within the
// bound of TestComputeBF16Golden's kind (5 %), and writes the same table
// layout; without --compute it prints none.
func TestComputeBF16Diag(t *testing.T) {
	needGolden(t)
	dir := filepath.Join(goldenDir, "qwen3_gate_headwise")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("no golden case %s", dir)
	}
	tmp := t.TempDir()
	ids := filepath.Join(tmp, "ids.json")
	os.WriteFile(ids, []byte("[[1,5,9,2,7,3,11,4,8,30,31,32],[2,6,10,3,8,4,12,5,9,31,32,33]]"), 0o644)
	code, stdout, errs := probe(t, "diag", "--model", dir, "--ids", ids, "--out", filepath.Join(tmp, "d.csv"), "--compute", "bf16")
	if code != 0 {
		t.Fatal(errs)
	}
	if !strings.Contains(stdout, "compute bf16: deviation from the float32 pass on the first 12 tokens of 2 sequence(s)") {
		t.Fatalf("no deviation printed:\n%s", stdout)
	}
	for _, col := range analysis.DiagColumns[4:] {
		line := ""
		for _, l := range strings.Split(stdout, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == col {
				line = l
			}
		}
		if line == "" {
			t.Errorf("no deviation line for column %s:\n%s", col, stdout)
		}
	}
	code, stdout, _ = probe(t, "diag", "--model", dir, "--ids", ids, "--out", filepath.Join(tmp, "d2.csv"))
	if code != 0 || strings.Contains(stdout, "deviation") {
		t.Errorf("float32 diag: exit %d, output %q", code, stdout)
	}
}

// TestComputeBF16StreamCommands: ppl, gdn, sinks and massive run with
// --compute bf16 on the golden hybrid (Gated DeltaNet + gated softmax)
// model, and each records the deviation of the first tokens of its first
// pass in its manifest (for ppl, per model) and prints it.
func TestComputeBF16StreamCommands(t *testing.T) {
	needGolden(t)
	dir := filepath.Join(goldenDir, "qwen35_text")
	g, err := checkpoint.OpenFile(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Skipf("no golden case qwen35_text: %v", err)
	}
	idsFile, _, _ := goldenIDs(t, g, false)
	g.Close()
	tmp := filepath.Dir(idsFile)
	for _, c := range []struct {
		cmd, manifest, length string
	}{
		{"ppl", results.PPLManifestName, "14"}, // after 32 calibration tokens
		{"gdn", results.GDNManifestName, "32"},
		{"sinks", results.SinksManifestName, "32"},
		{"massive", results.MassiveManifestName, "32"},
	} {
		out := filepath.Join(tmp, c.cmd)
		args := []string{c.cmd, "--model", dir, "--ids", idsFile, "--lengths", c.length, "--samples", "1", "--out", out,
			"--compute", "bf16", "--deviation-tokens", "12"}
		code, stdout, errs := probe(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.cmd, code, errs)
		}
		if !strings.Contains(stdout, "compute bf16: deviation from the float32 pass on the first 12 tokens of 1 sequence(s)") {
			t.Errorf("%s: no deviation printed:\n%s", c.cmd, stdout)
		}
		b, err := os.ReadFile(filepath.Join(out, c.manifest))
		if err != nil {
			t.Fatal(err)
		}
		var man struct {
			Deviation *results.Deviation `json:"compute_deviation"`
			Models    []struct {
				Deviation *results.Deviation `json:"compute_deviation"`
			} `json:"models"`
		}
		if err := json.Unmarshal(b, &man); err != nil {
			t.Fatal(err)
		}
		d := man.Deviation
		if c.cmd == "ppl" && len(man.Models) == 1 {
			d = man.Models[0].Deviation
		}
		if d == nil || d.Tokens != 12 || d.Columns[0].Name != "logits" || !(d.Columns[0].MaxAbs > 0) {
			t.Errorf("%s: compute_deviation in %s: %+v", c.cmd, c.manifest, d)
		}
	}
}

// passCompute is the compute recorded in a sweep pass's key (omitted for
// f32).
func passCompute(p results.StreamPass) model.Compute {
	var o struct {
		Compute model.Compute `json:"compute"`
	}
	json.Unmarshal(p.Key.Options, &o)
	return o.Compute
}
