package model

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/filterlens/probe/hooks"
)

func afaCase(t *testing.T, layers, d, heads int, edit func(*Config)) Config {
	t.Helper()
	cfg, err := SmallConfig(ArchAFA, Size{Layers: layers, DModel: d, Heads: heads, KVHeads: heads, Vocab: 47, MaxPos: 256})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

// TestAFAMatchesPyTorchReference compares logits and the AFA
// intermediates with reference/afa/afa_ref.py, which computes the direct
// per-pair form (‖q_i − e^{λτ}⊙k_j‖², Σ_j A_ij e^{λτ}⊙v_j) where the Go pass
// uses the factorized one (notes 001 §G.2).
func TestAFAMatchesPyTorchReference(t *testing.T) {
	needTorch(t)
	cases := []struct {
		name string
		cfg  Config
	}{
		{"algorithm1", afaCase(t, 2, 16, 2, nil)},
		{"input-qk-normalized-paper-kernel-dt", afaCase(t, 2, 24, 3, func(c *Config) {
			c.AFA.QKSource, c.AFA.NormalizeQK, c.AFA.KernelForm, c.AFA.Dt = "input", true, "paper", 0.5
			c.QKVBias, c.OBias, c.TiedHead = false, false, false
		})},
	}
	ids := [][]int{{3, 17, 5, 40, 9, 9, 22, 30, 1, 33, 12, 7, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, m := writeFilterCase(t, tc.cfg, uint64(31+ci), ids)
			ref := runReference(t, "afa/afa_ref.py", dir)
			pairs := map[string]string{"logits": "logits"}
			for l := 0; l < tc.cfg.Layers; l++ {
				for r, h := range map[string]string{
					"q": "attn.hook_q", "k": "attn.hook_k", "v": "attn.hook_v", "pattern": "attn.hook_pattern",
					"pattern_decayed": "attn.hook_pattern_decayed", "log_precision": "afa.hook_log_precision",
					"estimate": "afa.hook_estimate", "z": "attn.hook_z", "attn_out": "hook_attn_out",
					"resid_post": "hook_resid_post",
				} {
					pairs[fmt.Sprintf("l%d.%s", l, r)] = hooks.Name("blocks.{l}."+h, l)
				}
			}
			hs := &hooks.Set{}
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

// TestAFAReducesToRoPEAttention: §3.8 / notes 001 §G.4. With a = 0 (α = 0)
// and no process noise (σ = 0), E = 1 and σ_V² = η², so Â = A, and with
// normalized q, k the logit is −τ_s log(η² + 2 − 2 Re(q̃ᴴk̃) + ε): a function
// of the RoPE score alone. With η² = 1e6 and τ_s = β(η² + 2 + ε)/2 it is
// β·Re(q̃ᴴk̃) + O(β/η²): the weights equal the standard causal softmax
// attention (attention.go) with scale β on AFA's own rotated unit queries
// and keys.
func TestAFAReducesToRoPEAttention(t *testing.T) {
	cfg := afaCase(t, 2, 24, 3, func(c *Config) { c.AFA.NormalizeQK = true })
	m, ts, err := Generate(cfg, 8)
	if err != nil {
		t.Fatal(err)
	}
	const beta, eta = 2.0, 1000.0
	setRaw(ts, ".attn.alpha", 0)
	setRaw(ts, ".attn.sigma", 0)
	setRaw(ts, ".attn.eta", eta)
	setRaw(ts, ".attn.tau_s", float32(beta*(eta*eta+2+cfg.AFA.Epsilon)/2))
	B, T, H, dw := 2, 21, cfg.Heads, cfg.DHead
	hs := &hooks.Set{}
	c := hs.Capture("blocks.*.attn.hook_rot_q", "blocks.*.attn.hook_rot_k", "blocks.*.attn.hook_pattern", "blocks.*.attn.hook_pattern_decayed")
	if _, err := m.Forward(seqs(B, T, cfg.Vocab), Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	var worst float64
	for l := 0; l < cfg.Layers; l++ {
		qt := c.Get(hooks.Name("blocks.{l}.attn.hook_rot_q", l)).Data().([]float32)
		kt := c.Get(hooks.Name("blocks.{l}.attn.hook_rot_k", l)).Data().([]float32)
		got := c.Get(hooks.Name("blocks.{l}.attn.hook_pattern", l)).Data().([]float32)
		dec := c.Get(hooks.Name("blocks.{l}.attn.hook_pattern_decayed", l)).Data().([]float32)
		if e, _ := relErr(dec, got); e != 0 {
			t.Fatalf("layer %d: a = 0 but Â ≠ A (rel %.3g)", l, e)
		}
		a := &attnArgs{batch: B, T: T, heads: H, kvHeads: H, dHead: dw, scale: beta,
			q: qt, k: kt, v: make([]float32, B*T*H*dw), z: make([]float32, B*T*H*dw), pattern: make([]float32, B*H*T*T)}
		if err := causalAttention(a); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			worst = math.Max(worst, math.Abs(float64(got[i]-a.pattern[i])))
		}
	}
	t.Logf("AFA(a = 0, σ = 0, η² = 1e6) vs RoPE softmax attention with scale β = %g: max |ΔA| %.2e", beta, worst)
	if worst > 2e-5 {
		t.Fatalf("max |ΔA| %.3g", worst)
	}
}

// TestAFACausal: notes 001 §G.5, changing token j leaves every output at
// positions i < j unchanged; streamed rows equal hook_pattern.
func TestAFACausal(t *testing.T) {
	cfg := afaCase(t, 2, 16, 2, nil)
	m, _, err := Generate(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	ids := seqs(1, 15, cfg.Vocab)
	hs := &hooks.Set{}
	pc := hs.Capture("blocks.0.attn.hook_pattern")
	rows := &rowCollector{T: 15, H: 2, rows: make([]float32, 2*15*15), seen: make([]int, 2)}
	hs.Stream(0, rows)
	a, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := relErr(rows.rows, pc.Get("blocks.0.attn.hook_pattern").Data().([]float32)); e != 0 {
		t.Fatalf("streamed rows differ from hook_pattern: %.3g", e)
	}
	ids[0][9] = (ids[0][9] + 5) % cfg.Vocab
	b, err := m.Forward(ids, Options{Logits: true, TileRows: 4})
	if err != nil {
		t.Fatal(err)
	}
	V := cfg.Vocab
	if e, _ := relErr(b.Logits[:9*V], a.Logits[:9*V]); e > 1e-6 {
		t.Fatalf("positions before the change moved: %.3g", e)
	}
	if e, _ := relErr(b.Logits[9*V:], a.Logits[9*V:]); e < 1e-4 {
		t.Fatal("changing token 9 did not change later outputs")
	}
}

// TestAFAConfigErrors: refused AFA configurations name their field.
func TestAFAConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		edit string
		want string
	}{
		{`"afa": {"qk_source": "keys"}`, "afa.qk_source"},
		{`"afa": {"kernel_form": "riccati"}`, "afa.kernel_form"},
		{`"afa": {"dt": 0}`, "afa.dt"},
		{`"afa": {"epsilon": -1}`, "afa.epsilon"},
		{`"afa": {"delta": 1}`, "unknown field"},
		{`"head_dim": 6`, "multiple of 4"},
	} {
		js := `{"model_type": "afa", "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
			"intermediate_size": 32, "vocab_size": 10, "max_position_embeddings": 8, ` + tc.edit + `}`
		_, err := ParseConfig([]byte(js))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to mention %q", tc.edit, err, tc.want)
		}
	}
}
