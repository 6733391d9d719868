package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyCheckpoint copies a checkpoint directory's config.json and
// model.safetensors into dst, with a trainer_state.json when step ≥ 0.
func copyCheckpoint(t *testing.T, src, dst string, step int) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"config.json", "model.safetensors"} {
		in, err := os.Open(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if step >= 0 {
		state := fmt.Sprintf(`{"global_step": %d, "epoch": 1.5}`, step)
		if err := os.WriteFile(filepath.Join(dst, "trainer_state.json"), []byte(state), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// figureFiles checks that every figure has its PNG and SVG.
func figureFiles(t *testing.T, out string, ids []string) {
	t.Helper()
	for _, id := range ids {
		for _, ext := range []string{".png", ".svg"} {
			if st, err := os.Stat(filepath.Join(out, id+ext)); err != nil || st.Size() < 1000 {
				t.Errorf("%s%s missing or tiny", id, ext)
			}
		}
	}
}

// TestFiguresRFACheckpoint draws every checkpoint figure of the golden SC-RFA
// model: Figs. 3–4 from its parameters, 8–10 from a series in the Hugging
// Face layout (checkpoint-* folders, one step from trainer_state.json),
// 11–14 from a streamed forward pass, and opens the page in Chromium.
func TestFiguresRFACheckpoint(t *testing.T) {
	needGolden(t)
	chromium := browserOrSkip(t)
	src := filepath.Join(goldenDir, "rfa_m2_sc")
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	copyCheckpoint(t, src, filepath.Join(run, "checkpoint-30"), -1)
	copyCheckpoint(t, src, filepath.Join(run, "checkpoint-200"), -1)
	copyCheckpoint(t, src, filepath.Join(run, "checkpoint-last"), 900)
	out := filepath.Join(dir, "figs")
	args := []string{"figures", "--paper", "rfa", "--model", src, "--series", run, "--attn-tokens", "256", "--max-size", "64",
		"--attn-decayed", "--out", out, "--dpi", "40"}
	if staticOnly(t) {
		args = append(args, "--static")
	}
	code, stdout, stderr := probe(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	ids := []string{"rfa-ckpt-fig3-L1", "rfa-ckpt-fig4-L1", "rfa-ckpt-fig8-L1", "rfa-ckpt-fig9-L1", "rfa-ckpt-fig10-L1",
		"rfa-ckpt-attn-L1", "rfa-ckpt-attn-linear-L1", "rfa-ckpt-attn-decayed-L1"}
	if !strings.Contains(stdout, strings.Join(ids, ", ")) {
		t.Errorf("output %q does not list %v", stdout, ids)
	}
	figureFiles(t, out, ids)
	page, err := os.ReadFile(filepath.Join(out, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RFA Fig. 14 from a checkpoint", "step 900 from trainer_state.json global_step", "checkpoint-30 (step 30 from directory name)",
		"h3: μ=0.05", "256 random ids"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Panels: Fig. 3 4, Fig. 4 2, Figs. 8–10 4 + 2 + 2, three maps of 4 heads.
	checkPage(t, chromium, filepath.Join(out, "index.html"), 4+2+4+2+2+3*4)
}

// TestFiguresRFAHistory draws Figs. 8–10 from a JSON history (the authors'
// names, no μ): with --model the decays come from the checkpoint and Fig. 10
// is drawn; without, it cannot be.
func TestFiguresRFAHistory(t *testing.T) {
	needGolden(t)
	dir := t.TempDir()
	hist := filepath.Join(dir, "history.json")
	body := `{"step": [0, 100, 200, 300],
		"sigma": [[0.1, 0.001, 0.001, 0.1], [0.1, 0.002, 0.003, 0.2], [0.1, 0.003, 0.005, 0.3], [0.1, 0.004, 0.007, 0.4]],
		"eta": [[1, 1, 1, 1], [1, 0.9, 0.8, 0.7], [1, 0.8, 0.6, 0.5], [1, 0.7, 0.5, 0.4321]],
		"gamma": [[0.5, 0.5, 0.5, 0.5], [0.4, 0.4, 0.4, 0.4], [0.3, 0.3, 0.3, 0.3], [0.2, 0.2, 0.2, 0.2]],
		"tau": [[1, 1, 1, 1], [1.1, 1.2, 1.3, 1.4], [1.2, 1.4, 1.6, 1.8], [1.3, 1.6, 1.9, 2.2]],
		"nu_over_d": [[4, 4, 4, 4], [3.5, 3.6, 3.7, 3.8], [3, 3.2, 3.4, 3.6], [2.5, 2.8, 3.1, 3.4]],
		"loss": [5, 4, 3, 2]}`
	if err := os.WriteFile(hist, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "with-model")
	code, stdout, stderr := probe(t, "figures", "--paper", "rfa", "--history", hist, "--model", filepath.Join(goldenDir, "rfa_m2_sc"),
		"--attn-tokens", "0", "--out", out, "--dpi", "40", "--static")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// The unprefixed history has no layer: its figures carry no -L suffix.
	figureFiles(t, out, []string{"rfa-ckpt-fig3-L1", "rfa-ckpt-fig4-L1", "rfa-ckpt-fig8", "rfa-ckpt-fig9", "rfa-ckpt-fig10"})
	page, _ := os.ReadFile(filepath.Join(out, "index.html"))
	// Head 3 (μ = 0.05): last α = η² − σ²/2μ = 0.4321 − 0.4/0.1 = −3.57.
	if !strings.Contains(string(page), "-3.57") || !strings.Contains(string(page), "0.432") {
		t.Errorf("page lacks head 3's last α −3.57 and η² 0.432:\n%s", stdout)
	}
	checkPage(t, browserOrSkip(t), filepath.Join(out, "index.html"), -1)
	out2 := filepath.Join(dir, "no-model")
	code, stdout, stderr = probe(t, "figures", "--paper", "rfa", "--history", hist, "--out", out2, "--dpi", "40", "--static")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "rfa-ckpt-fig8, rfa-ckpt-fig9)") || strings.Contains(stdout, "fig10") {
		t.Errorf("without μ: %s", stdout)
	}
	checkPage(t, browserOrSkip(t), filepath.Join(out2, "index.html"), -1)
}

// TestFiguresRFAErrors: checkpoint options need --paper rfa; a softmax
// baseline gets attention maps only (Figs. 11–12) and no decayed map.
func TestFiguresRFAErrors(t *testing.T) {
	needGolden(t)
	out := t.TempDir()
	gpt2 := filepath.Join(goldenDir, "gpt2")
	rfa := filepath.Join(goldenDir, "rfa_m1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--paper", "all", "--model", rfa}, "--paper rfa"},
		{[]string{"--paper", "rfa", "--model", rfa, "--lag-axis", "cubic"}, "--lag-axis"},
		{[]string{"--paper", "rfa", "--model", rfa, "--layer", "2"}, "2 layers"},
		{[]string{"--paper", "rfa", "--model", gpt2, "--attn-decayed", "--attn-tokens", "32"}, "RFA models only"},
		{[]string{"--paper", "rfa", "--model", gpt2, "--attn-tokens", "0"}, "not RFA"},
		{[]string{"--paper", "rfa", "--series", out}, "no checkpoint subdirectories"},
		{[]string{"--paper", "rfa", "--series", rfa, "--history", "h.json"}, "not both"},
	} {
		code, _, stderr := probe(t, append(append([]string{"figures"}, c.args...), "--out", out, "--static")...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q (want %q)", c.args, code, stderr, c.want)
		}
	}
	// --ids as probe capture takes it (a batch: the first sequence is used).
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = fmt.Sprint((i * 13) % 500)
	}
	idsFile := filepath.Join(t.TempDir(), "ids.json") // not in --out, which holds reports only
	if err := os.WriteFile(idsFile, []byte("[["+strings.Join(ids, ",")+"]]"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := probe(t, "figures", "--paper", "rfa", "--model", gpt2, "--attn-tokens", "64", "--ids", idsFile, "--out", out, "--static"); code == 0 || !strings.Contains(stderr, "fewer than") {
		t.Errorf("short --ids: exit %d, %s", code, stderr)
	}
	code, stdout, stderr := probe(t, "figures", "--paper", "rfa", "--model", gpt2, "--attn-tokens", "48", "--ids", idsFile, "--heads", "0,2",
		"--out", out, "--static", "--dpi", "40")
	if code != 0 || !strings.Contains(stdout, "rfa-ckpt-attn-L2, rfa-ckpt-attn-linear-L2)") {
		t.Fatalf("baseline maps: exit %d %s %s", code, stdout, stderr)
	}
	page, _ := os.ReadFile(filepath.Join(out, "index.html"))
	if !strings.Contains(string(page), "Figs. 11–12 (baseline)") || !strings.Contains(string(page), "the first 48 ids of") {
		t.Error("baseline maps not labelled as Figs. 11–12 from the given ids")
	}
	checkPage(t, browserOrSkip(t), filepath.Join(out, "index.html"), -1)
}
