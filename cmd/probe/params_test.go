package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
)

// TestParamsGolden: `probe params --json` on every RFA golden case reports
// the per-head values of the authors' metadata (l{l}.mu_v, sigma_sq_v,
// sigma_tilde_sq_v, eta_sq_v, gamma_sq_v, tau, nu_over_d) to float32
// precision, and the regime each head was built in (config.json's
// perturbation_design).
func TestParamsGolden(t *testing.T) {
	needGolden(t)
	entries, _ := os.ReadDir(goldenDir)
	n := 0
	for _, e := range entries {
		dir := filepath.Join(goldenDir, e.Name())
		if cfg, err := model.LoadConfig(dir); err != nil || cfg.Arch != model.ArchRFA {
			continue
		}
		n++
		t.Run(e.Name(), func(t *testing.T) { paramsCase(t, dir) })
	}
	if n == 0 {
		t.Skipf("no RFA golden cases in %s", goldenDir)
	}
}

func paramsCase(t *testing.T, dir string) {
	code, out, errs := probe(t, "params", "--json", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	g, err := checkpoint.OpenFile(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var cfg struct {
		Design []struct {
			Layer  int      `json:"layer"`
			Regime []string `json:"regime_by_head"`
		} `json:"perturbation_design"`
	}
	data, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	json.Unmarshal(data, &cfg)

	for _, r := range rows {
		for _, f := range []string{"layer", "head", "mu", "sigma2", "sigma_tilde2", "eta2", "gamma2", "tau", "nu_over_d", "alpha", "beta", "regime"} {
			if _, ok := r[f]; !ok {
				t.Fatalf("row %v lacks field %q", r, f)
			}
		}
	}
	fields := map[string]string{"mu": "mu_v", "sigma2": "sigma_sq_v", "sigma_tilde2": "sigma_tilde_sq_v",
		"eta2": "eta_sq_v", "gamma2": "gamma_sq_v", "tau": "tau", "nu_over_d": "nu_over_d"}
	H := 0
	for _, r := range rows {
		H = max(H, int(r["head"].(float64))+1)
	}
	for _, r := range rows {
		l, h := int(r["layer"].(float64)), int(r["head"].(float64))
		for f, key := range fields {
			ref, err := g.Float64(fmt.Sprintf("l%d.%s", l, key))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := r[f].(float64)
			if want := ref[h]; math.Abs(got-want) > 1e-6*max(1, math.Abs(want)) {
				t.Errorf("layer %d head %d %s = %v, golden l%d.%s = %v", l, h, f, got, l, key, want)
			}
		}
		for _, d := range cfg.Design {
			if d.Layer == l && h < len(d.Regime) {
				want := strings.TrimSuffix(d.Regime[h], "(mu=0)")
				if r["regime"] != want {
					t.Errorf("layer %d head %d: regime %v, built as %s", l, h, r["regime"], d.Regime[h])
				}
			}
		}
		if r["regime"] == "brownian" {
			if r["alpha"] != nil || r["alibi_slope"] == nil {
				t.Errorf("μ = 0 head %d/%d: alpha %v, alibi_slope %v", l, h, r["alpha"], r["alibi_slope"])
			}
		} else {
			a := r["eta2"].(float64) - r["sigma2"].(float64)/(2*r["mu"].(float64))
			if math.Abs(r["alpha"].(float64)-a) > 1e-12 || r["alibi_slope"] != nil {
				t.Errorf("head %d/%d: alpha %v, want η² − σ²/2μ = %v; alibi_slope %v", l, h, r["alpha"], a, r["alibi_slope"])
			}
		}
	}
	if len(rows) != H*len(cfg.Design) && len(cfg.Design) > 0 {
		t.Errorf("%d rows for %d layers × %d heads", len(rows), len(cfg.Design), H)
	}

	code, out, errs = probe(t, "params", dir)
	if code != 0 || !strings.Contains(out, "regime") || !strings.Contains(out, "brownian") {
		t.Errorf("text output: exit %d, %s\n%s", code, errs, out)
	}
}

func TestParamsErrors(t *testing.T) {
	needGolden(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"params", filepath.Join(goldenDir, "qwen3_gqa")}, "qwen3 checkpoint, which has no learned per-head filter parameters to read out (families that have them: rfa, afa, rt_transformer)"},
		{[]string{"params"}, "want one checkpoint (a folder or a hub model id org/name), as the argument or --model"},
		{[]string{"params", t.TempDir()}, "config.json"},
	} {
		code, _, errs := probe(t, c.args...)
		if code == 0 || !strings.Contains(errs, c.want) || strings.Contains(errs, "goroutine") {
			t.Errorf("probe %v: exit %d, stderr %q; want an error containing %q", c.args, code, errs, c.want)
		}
	}
}

// TestParamsGenerated: probe params reads the per-head parameters of a
// generated AFA and RT checkpoint, one row per (layer, head) in both forms.
func TestParamsGenerated(t *testing.T) {
	for _, arch := range []string{"afa", "rt_transformer"} {
		dir := filepath.Join(t.TempDir(), arch)
		if code, _, errs := probe(t, "generate", "--arch", arch, "--layers", "2", "--d-model", "32", "--heads", "4",
			"--kv-heads", "4", "--vocab", "50", "--max-pos", "64", "--out", dir); code != 0 {
			t.Fatalf("generate %s: %s", arch, errs)
		}
		code, out, errs := probe(t, "params", "--json", dir)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", arch, code, errs)
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) != 8 || rows[7]["layer"] != 1.0 || rows[7]["head"] != 3.0 || rows[0]["omega_max"] == nil {
			t.Errorf("%s: %d rows, last %v", arch, len(rows), rows[len(rows)-1])
		}
		code, out, errs = probe(t, "params", dir)
		if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 4+8 || !strings.Contains(lines[0], "filter parameters of "+dir) {
			t.Errorf("%s text output: exit %d, %s\n%s", arch, code, errs, out)
		}
	}
}
