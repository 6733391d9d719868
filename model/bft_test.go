package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"gorgonia.org/tensor"
)

// Shared by the BFT, RT and AFA tests: running the PyTorch references of
// reference/{bft,rt,afa} on a generated checkpoint.

var (
	torchOnce   sync.Once
	torchPython string
)

// needTorch returns a python3 that imports torch and numpy, or skips.
func needTorch(t *testing.T) string {
	t.Helper()
	torchOnce.Do(func() {
		for _, p := range []string{"/usr/bin/python3", "python3"} {
			if exec.Command(p, "-c", "import torch, numpy").Run() == nil {
				torchPython = p
				return
			}
		}
	})
	if torchPython == "" {
		t.Skip("skipping the PyTorch reference comparison: no python3 with torch and numpy (Debian: apt-get install python3-torch)")
	}
	return torchPython
}

// writeFilterCase generates a checkpoint of cfg into a temporary directory
// with ids.json, and returns the directory and the loaded model.
func writeFilterCase(t *testing.T, cfg Config, seed uint64, ids [][]int) (string, *Model) {
	t.Helper()
	_, dir := writeGenerated(t, cfg, seed)
	data, _ := json.Marshal(ids)
	if err := os.WriteFile(filepath.Join(dir, "ids.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

// runReference runs reference/<script> on dir and returns its
// ref.safetensors tensors.
func runReference(t *testing.T, script, dir string) map[string][]float32 {
	t.Helper()
	py := needTorch(t)
	cmd := exec.Command(py, filepath.Join("..", "reference", script), dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		t.Skipf("skipping: %s could not import torch/numpy: %s", script, out)
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, dir, err, out)
	}
	ck, err := checkpoint.Open(filepath.Join(dir, "ref.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	ref := map[string][]float32{}
	for _, n := range ck.Names() {
		if ref[n], err = ck.Float32(n); err != nil {
			t.Fatal(err)
		}
	}
	return ref
}

// compareRef checks every pair (reference tensor, captured hook) at
// max|got−ref|/max|ref| ≤ tol and returns the worst relative error.
func compareRef(t *testing.T, ref map[string][]float32, cap *hooks.Capture, pairs map[string]string, tol float64) float64 {
	t.Helper()
	worst := 0.0
	for rn, hn := range pairs {
		r, ok := ref[rn]
		if !ok {
			t.Errorf("reference wrote no %q", rn)
			continue
		}
		x := cap.Get(hn)
		if x == nil {
			t.Errorf("hook %s not captured", hn)
			continue
		}
		g := x.Data().([]float32)
		if len(g) != len(r) {
			t.Errorf("%s: %d values, reference %s has %d", hn, len(g), rn, len(r))
			continue
		}
		e, i := relErr(g, r)
		worst = math.Max(worst, e)
		if e > tol || math.IsNaN(e) {
			t.Errorf("%s vs reference %s: rel err %.3g > %g at %d (got %v, ref %v)", hn, rn, e, tol, i, g[i], r[i])
		}
	}
	return worst
}

func bftCase(t *testing.T, layers, d, heads, kv int, edit func(*BFTConfig)) Config {
	t.Helper()
	cfg, err := SmallConfig(ArchBFT, Size{Layers: layers, DModel: d, Heads: heads, KVHeads: kv, Vocab: 61, MaxPos: 256})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg.BFT)
	}
	return cfg
}

// TestBFTMatchesPyTorchReference compares logits and every BFT
// intermediate with reference/bft/bft_ref.py on random checkpoints of
// several option sets.
func TestBFTMatchesPyTorchReference(t *testing.T) {
	needTorch(t)
	cases := []struct {
		name string
		cfg  Config
	}{
		{"paper-defaults", bftCase(t, 2, 32, 4, 4, nil)},
		{"gqa-oproj-sandwich-recency-table", bftCase(t, 2, 32, 4, 2, func(b *BFTConfig) {
			b.OutputProj, b.Observation, b.RecencyDecay, b.InitialPrecision = true, "sandwich", true, "table"
			b.JacobianClip, b.JacobianEps, b.LambdaMax, b.CapPosterior = "abs", 0.3, 30, false
		})},
		{"qknorm-constant-pertoken-nocap", bftCase(t, 3, 24, 3, 1, func(b *BFTConfig) {
			b.InitialPrecision, b.TauBasePerToken, b.LambdaMax, b.QMax, b.PriorNu, b.JacobianEps = "constant", true, 0, 3, 2, 0.5
		})},
		{"no-jacobian-no-kriging", bftCase(t, 2, 32, 4, 2, func(b *BFTConfig) {
			b.Jacobian, b.Kriging, b.TauBasePerToken = "none", "none", true
		})},
	}
	cases[2].cfg.QKNorm = true
	ids := [][]int{{3, 17, 5, 40, 9, 9, 22, 60, 1, 33, 12, 7}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, m := writeFilterCase(t, tc.cfg, uint64(11+ci), ids)
			ref := runReference(t, "bft/bft_ref.py", dir)
			hs := &hooks.Set{}
			pairs := map[string]string{"logits": "logits", "tau": "bft.hook_tau"}
			for l := 0; l < tc.cfg.Layers; l++ {
				for r, h := range map[string]string{
					"lambda": "bft.hook_lambda", "pattern": "attn.hook_pattern", "lambda_obs": "bft.hook_lambda_obs",
					"gain": "bft.hook_gain", "z": "attn.hook_z", "lambda_post": "bft.hook_lambda_post",
					"jacobian": "bft.hook_jacobian", "lambda_pred": "bft.hook_lambda_pred", "resid_post": "hook_resid_post",
				} {
					pairs[fmt.Sprintf("l%d.%s", l, r)] = hooks.Name("blocks.{l}."+h, l)
				}
			}
			var names []string
			for _, h := range pairs {
				names = append(names, h)
			}
			c := hs.Capture(names...)
			if _, err := m.Forward(ids, Options{Hooks: hs}); err != nil {
				t.Fatal(err)
			}
			worst := compareRef(t, ref, c, pairs, 1e-4)
			t.Logf("%s: worst rel err over logits and %d intermediates: %.2e", tc.name, len(pairs)-1, worst)
		})
	}
}

// TestBFTReducesToPreNorm: Remark 3. With λ ≡ 1 entering every layer (a
// write at bft.hook_lambda), Q = 0 (q_max 0) and λobs → ∞ (1e30 written at
// bft.hook_lambda_obs, so K = 1), BFT with o_proj is the standard pre-norm
// layer: its logits equal Forward of the same Llama / Qwen3 weights.
func TestBFTReducesToPreNorm(t *testing.T) {
	for _, arch := range []Arch{ArchLlama, ArchQwen3} {
		t.Run(string(arch), func(t *testing.T) {
			base, err := SmallConfig(arch, Size{Layers: 3, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 61, MaxPos: 256})
			if err != nil {
				t.Fatal(err)
			}
			std, tensors, err := Generate(base, 5)
			if err != nil {
				t.Fatal(err)
			}
			cfg, _ := SmallConfig(ArchBFT, Size{Layers: 3, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 61, MaxPos: 256})
			cfg.DMLP, cfg.QKNorm = base.DMLP, base.QKNorm
			b := cfg.BFT
			b.OutputProj, b.InitialPrecision, b.LambdaMax, b.QMax = true, "constant", 0, 0
			for l := 0; l < cfg.Layers; l++ {
				tensors = append(tensors, checkpoint.Tensor{Name: hooks.Name("model.layers.{l}.bft.q_logits", l), Shape: []int{32}, Data: make([]float32, 32)})
			}
			dir := t.TempDir()
			if err := WriteHF(dir, cfg, tensors); err != nil {
				t.Fatal(err)
			}
			m, err := Load(dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ids := seqs(2, 20, 61)
			want, err := std.Forward(ids, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			hs := &hooks.Set{}
			fill := func(c float32) hooks.Func {
				return func(_ string, _ int, x *tensor.Dense) error {
					d := x.Data().([]float32)
					for i := range d {
						d[i] = c
					}
					return nil
				}
			}
			hs.Add("blocks.*.bft.hook_lambda", fill(1))
			hs.Add("blocks.*.bft.hook_lambda_obs", fill(1e30))
			gains := hs.Capture("blocks.*.bft.hook_gain")
			got, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range gains.Names() {
				for _, k := range gains.Get(n).Data().([]float32) {
					if k != 1 {
						t.Fatalf("%s: K = %v, want 1", n, k)
					}
				}
			}
			e, i := relErr(got.Logits, want.Logits)
			t.Logf("%s: BFT(λ≡1, Q=0, λobs→∞) vs standard pre-norm logits: rel err %.2e", arch, e)
			if e > 1e-5 {
				t.Fatalf("rel err %.3g at %d: got %v, standard %v", e, i, got.Logits[i], want.Logits[i])
			}
			// Without the writes, BFT differs (K < 1).
			other, err := m.Forward(ids, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			if e, _ := relErr(other.Logits, want.Logits); e < 1e-2 {
				t.Fatalf("BFT without the degenerate setting equals the standard layer (rel err %.3g)", e)
			}
		})
	}
}

// TestBFTPatternHookPath: materializing α̃ for its hook (and observing the
// rows after it) gives the same pass as streaming; a write at hook_pattern
// reaches e and λobs.
func TestBFTPatternHookPath(t *testing.T) {
	cfg := bftCase(t, 2, 32, 4, 2, func(b *BFTConfig) { b.OutputProj = true })
	_, dir := writeGenerated(t, cfg, 3)
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := seqs(2, 33, 61)
	plain := &hooks.Set{}
	pc := plain.Capture("blocks.1.bft.hook_lambda_obs")
	want, err := m.Forward(ids, Options{Hooks: plain, Logits: true, TileRows: 5})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	c := hs.Capture("blocks.*.attn.hook_pattern", "blocks.1.bft.hook_lambda_obs")
	rows := &rowCollector{T: 33, H: 4, rows: make([]float32, 2*4*33*33), seen: make([]int, 8)}
	hs.Stream(0, rows)
	got, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	if e, i := relErr(got.Logits, want.Logits); e > 1e-6 {
		t.Fatalf("logits with the pattern materialized differ: rel %.3g at %d", e, i)
	}
	if e, _ := relErr(c.Get("blocks.1.bft.hook_lambda_obs").Data().([]float32), pc.Get("blocks.1.bft.hook_lambda_obs").Data().([]float32)); e > 1e-6 {
		t.Fatalf("λobs differs between the streamed and materialized paths: %.3g", e)
	}
	if e, i := relErr(rows.rows, c.Get("blocks.0.attn.hook_pattern").Data().([]float32)); e != 0 {
		t.Fatalf("streamed rows differ from hook_pattern: %.3g at %d", e, i)
	}
	// Uniform weights written at hook_pattern change λobs (n_eff = t+1).
	hs2 := &hooks.Set{}
	hs2.Add("blocks.1.attn.hook_pattern", func(_ string, _ int, x *tensor.Dense) error {
		d := x.Data().([]float32)
		for r := 0; r < len(d)/33; r++ {
			tq := r % 33
			for j := 0; j <= tq; j++ {
				d[r*33+j] = 1 / float32(tq+1)
			}
		}
		return nil
	})
	c2 := hs2.Capture("blocks.1.bft.hook_lambda_obs")
	if _, err := m.Forward(ids, Options{Hooks: hs2}); err != nil {
		t.Fatal(err)
	}
	if e, _ := relErr(c2.Get("blocks.1.bft.hook_lambda_obs").Data().([]float32), pc.Get("blocks.1.bft.hook_lambda_obs").Data().([]float32)); e < 1e-3 {
		t.Fatal("a write at hook_pattern did not reach λobs")
	}
}

// TestBFTConfigErrors: every refused configuration names its field.
func TestBFTConfigErrors(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{"model_type": "bft", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
			"num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 50, "max_position_embeddings": 64}
	}
	parse := func(m map[string]any) error {
		data, _ := json.Marshal(m)
		_, err := ParseConfig(data)
		return err
	}
	if err := parse(base()); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		field string
		value any
		want  string
	}{
		{"bft", map[string]any{"observation": "mle"}, "bft.observation"},
		{"bft", map[string]any{"kriging": "per_dim"}, "bft.kriging"},
		{"bft", map[string]any{"lambda_max_on": []string{"all"}}, "bft.lambda_max_on"},
		{"bft", map[string]any{"jacobian_eps": 0}, "bft.jacobian_eps"},
		{"bft", map[string]any{"prior_nu": -1}, "bft.prior_nu"},
		{"bft", map[string]any{"recency": true}, "unknown field \"recency\""},
		{"bft", map[string]any{"tau_mlp_hidden": 0}, "bft.tau_mlp_hidden"},
		{"head_dim", 4, "hidden_size 32"},
		{"hidden_act", "tanh", "hidden_act"},
		{"sliding_window", 8, "sliding_window"},
	} {
		m := base()
		m[tc.field] = tc.value
		err := parse(m)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %v: error %v, want it to mention %q", tc.field, tc.value, err, tc.want)
		}
	}
}

// TestBFTLoadErrors: missing BFT tensors are named; an o_proj stored in a
// no-W_O checkpoint is reported as unexpected.
func TestBFTLoadErrors(t *testing.T) {
	cfg := bftCase(t, 2, 32, 4, 2, nil)
	_, tensors, err := Generate(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	var kept []checkpoint.Tensor
	for _, x := range tensors {
		if x.Name != "model.layers.1.bft.q_logits" && x.Name != "model.bft.tau_range" {
			kept = append(kept, x)
		}
	}
	dir := t.TempDir()
	if err := WriteHF(dir, cfg, kept); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "model.layers.1.bft.q_logits") || !strings.Contains(err.Error(), "model.bft.tau_range") {
		t.Fatalf("want the missing BFT tensors named, got %v", err)
	}
	extra := append(tensors, checkpoint.Tensor{Name: "model.layers.0.self_attn.o_proj.weight", Shape: []int{32, 32}, Data: make([]float32, 32*32)})
	if err := WriteHF(dir, cfg, extra); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "unexpected") || !strings.Contains(err.Error(), "o_proj") {
		t.Fatalf("want o_proj reported as unexpected without bft.output_proj, got %v", err)
	}
	// λ̄ ≤ 0 written at hook_lambda is refused with the layer named.
	m, err := Load(func() string {
		d := t.TempDir()
		if err := WriteHF(d, cfg, tensors); err != nil {
			t.Fatal(err)
		}
		return d
	}(), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	hs.Add("blocks.1.bft.hook_lambda", func(_ string, _ int, x *tensor.Dense) error {
		clear(x.Data().([]float32))
		return nil
	})
	if _, err := m.Forward(seqs(1, 4, 61), Options{Hooks: hs}); err == nil || !strings.Contains(err.Error(), "layer 1") {
		t.Fatalf("want an error naming layer 1, got %v", err)
	}
}
