package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/cmplx"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"gorgonia.org/tensor"
)

// selropeVariant is one small Selective-RoPE LM configuration under test.
type selropeVariant struct {
	name    string
	sc      SelRoPEConfig
	qkvBias bool
	tied    bool
	window  int
}

func (v selropeVariant) config(t testing.TB) Config {
	t.Helper()
	cfg, err := SmallSelRoPEConfig(2, 32, 4, 61, 256, v.sc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QKVBias, cfg.TiedHead, cfg.Sliding = v.qkvBias, v.tied, v.window
	return cfg
}

// selropeOpts returns the SelectiveRoPE defaults with edit applied.
func selropeOpts(edit func(*SelRoPEConfig)) SelRoPEConfig {
	c := DefaultSelRoPEConfig()
	c.PhiRank, c.GateRank = 8, 8
	if edit != nil {
		edit(&c)
	}
	return c
}

// selropeVariants covers every option of the rotary module and the
// attention (the golden cases cover the first two settings in one layer).
var selropeVariants = []selropeVariant{
	{name: "lowrank_conv", sc: selropeOpts(nil)},
	{name: "fullrank_silu_gate_bias_qkvbias_tied", sc: selropeOpts(func(c *SelRoPEConfig) {
		c.PhiParam, c.ConvAct, c.UseGate, c.UseBias = "full-rank", "silu", true, true
	}), qkvBias: true, tied: true},
	{name: "skipconv_glagate_rfa_qknorm_window_interleaved", sc: selropeOpts(func(c *SelRoPEConfig) {
		c.SkipConv, c.UseGate, c.GateParam, c.UseBias = true, true, "gla", true
		c.TempType, c.TempTheta, c.TempMax = "rfa", 0.995, 0.5
		c.QKNorm, c.Pairing = true, PairInterleaved
	}), window: 9},
	{name: "lowrankgate_conv2_theta1", sc: selropeOpts(func(c *SelRoPEConfig) {
		c.DConv, c.UseGate, c.GateParam, c.TempTheta = 2, true, "low-rank", 1
	})},
}

func smallSelRoPE(t testing.TB, v selropeVariant, seed uint64) *Model {
	t.Helper()
	m, _, err := Generate(v.config(t), seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// writeSelRoPE writes a generated checkpoint of v to a new directory.
func writeSelRoPE(t testing.TB, v selropeVariant, seed uint64) string {
	t.Helper()
	cfg := v.config(t)
	_, tensors, err := Generate(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), v.name)
	if err := WriteHF(dir, cfg, tensors); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSelRoPELMMatchesPyTorchReference: a random Selective-RoPE LM loaded
// from its HF-style checkpoint equals the PyTorch reference of
// reference/selrope (written here; it reproduces the authors' layer on the
// golden cases, checked in the same run): logits and, per layer, the
// angles, angular velocities, phase gates and attention pattern, at
// max|got − ref|/max|ref| ≤ 1e-4.
func TestSelRoPELMMatchesPyTorchReference(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not found: the PyTorch reference cannot run (%v)", python, err)
	}
	script, err := filepath.Abs(filepath.Join("..", "reference", "selrope", "selrope_ref.py"))
	if err != nil {
		t.Fatal(err)
	}
	ids := seqs(2, 24, 61)
	idsJSON, _ := json.Marshal(ids)
	args := []string{script}
	dirs := make([]string, len(selropeVariants))
	for i, v := range selropeVariants {
		dirs[i] = writeSelRoPE(t, v, uint64(11+i))
		if err := os.WriteFile(filepath.Join(dirs[i], "ids.json"), idsJSON, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--lm", dirs[i])
	}
	cases, _ := findSelRoPEGoldenCases()
	for _, c := range cases {
		args = append(args, "--golden", filepath.Join(goldenDir, c))
	}
	report := filepath.Join(t.TempDir(), "golden_check.json")
	args = append(args, "--report", report)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, args...).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 {
		t.Skipf("the PyTorch reference needs torch and numpy: %s", strings.TrimSpace(string(out)))
	}
	if err != nil {
		t.Fatalf("reference/selrope/selrope_ref.py failed: %v\n%s", err, out)
	}

	// The reference reproduces the authors' layer on the golden cases.
	var golden map[string]map[string]float64
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	for c, res := range golden {
		for tensor, rel := range res {
			if !(rel <= parityTol) {
				t.Fatalf("the PyTorch reference does not reproduce golden case %s: %s rel. error %.3g", c, tensor, rel)
			}
		}
	}
	if len(cases) == 0 {
		t.Logf("golden data not found at %s: the reference's layer was not re-checked against the authors' code", goldenDir)
	}

	for i, v := range selropeVariants {
		t.Run(v.name, func(t *testing.T) {
			m, err := Load(dirs[i], LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !m.IsSelRoPE() {
				t.Fatalf("%s loaded as %s, not Selective RoPE", dirs[i], m.Arch)
			}
			hs := &hooks.Set{}
			cap := hs.Capture(issued(t, m, "blocks.*.attn.hook_angle", "blocks.*.attn.hook_angular_velocity",
				"blocks.*.attn.hook_phase_gate", "blocks.*.attn.hook_pattern")...)
			res, err := m.Forward(ids, Options{Hooks: hs, Logits: true, TileRows: 5})
			if err != nil {
				t.Fatal(err)
			}
			ref, err := checkpoint.OpenFile(filepath.Join(dirs[i], "ref.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			get := func(name string) []float32 {
				x, err := ref.Float32(name)
				if err != nil {
					t.Fatal(err)
				}
				return x
			}
			checkClose(t, "logits", res.Logits, get("logits"))
			for l := 0; l < m.Config.Layers; l++ {
				for hook, key := range map[string]string{"hook_angle": "angle", "hook_angular_velocity": "omega",
					"hook_phase_gate": "phase_gate", "hook_pattern": "attn"} {
					name, refName := hooks.Name("blocks.{l}.attn."+hook, l), fmt.Sprintf("l%d.%s", l, key)
					g := cap.Get(name)
					_, inRef := ref.Info(refName)
					if g == nil || !inRef {
						if (g == nil) != !inRef {
							t.Errorf("%s: captured %v, in the reference %v", name, g != nil, inRef)
						}
						continue
					}
					checkClose(t, name, g.Data().([]float32), get(refName))
				}
			}
		})
	}
}

// TestSelRoPEConstantIncrementsAreRoPE: with Δφ ≡ 1 (conv weights 0 and
// bias b = 0, so Δφ = exp(0)) and the "rope" temperatures Θ_n =
// θ^(−2n/d), Selective RoPE is standard RoPE (notes 002 §A.6.1): the angles
// are exactly (t+1)·Θ_n, Θ equals RoPE's inverse frequencies bit for bit,
// and a Selective-RoPE LM with a Llama model's weights reproduces its
// attention and logits (the offset of 1 cancels in every relative phase;
// only float32 rounding of the angles differs).
func TestSelRoPEConstantIncrementsAreRoPE(t *testing.T) {
	const theta = 10000
	lcfg, err := SmallConfig(ArchLlama, Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 4, Vocab: 61, MaxPos: 256})
	if err != nil {
		t.Fatal(err)
	}
	lcfg.RoPE.Theta = theta
	llama, _, err := Generate(lcfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	v := selropeVariant{name: "rope", sc: selropeOpts(func(c *SelRoPEConfig) { c.UseBias, c.TempTheta = true, theta })}
	sel := smallSelRoPE(t, v, 4)
	sel.Embed, sel.Head, sel.FinalW, sel.Layers = llama.Embed, llama.Head, llama.FinalW, llama.Layers
	inv := lcfg.RoPE.invFreq(lcfg.DHead, 0)
	for _, r := range sel.selrope().layers {
		clear(r.ConvW)
		clear(r.PhiBias)
		if !reflect.DeepEqual(r.Temp, inv) {
			t.Fatalf("rope temperatures %v differ from RoPE's inverse frequencies %v", r.Temp, inv)
		}
	}

	ids := seqs(2, 40, 61)
	run := func(m *Model) (*Output, *hooks.Capture) {
		hs := &hooks.Set{}
		cap := hs.Capture(issued(t, m, "blocks.*.attn.hook_pattern", "blocks.*.attn.hook_angle")...)
		out, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		return out, cap
	}
	lo, lc := run(llama)
	so, sc := run(sel)
	R := lcfg.DHead / 2
	angle := sc.Get("blocks.1.attn.hook_angle").Data().([]float32)
	for i, a := range angle {
		tpos, n := (i/(R*lcfg.Heads))%40, i%R
		if want := float32(tpos+1) * inv[n]; a != want {
			t.Fatalf("angle at position %d pair %d = %v, want (t+1)·Θ = %v", tpos, n, a, want)
		}
	}
	for l := 0; l < 2; l++ {
		name := hooks.Name("blocks.{l}.attn.hook_pattern", l)
		checkClose(t, name, sc.Get(name).Data().([]float32), lc.Get(name).Data().([]float32))
	}
	checkClose(t, "logits", so.Logits, lo.Logits)
}

// randomSelRoPELayer makes a SelRoPEAttention with generated weights, and an
// input x [B,T,D] with a per-sequence offset (so angles drift as well as vary).
func randomSelRoPELayer(sc SelRoPEConfig, B, T, D, H int, seed uint64) (*SelRoPEAttention, []float32) {
	rng := rand.New(rand.NewPCG(seed, 5))
	ld := &loader{gen: &generator{rng: rng}}
	a := loadSelRoPEAttention(ld, "", D, H, D/H, false, sc)
	x := make([]float32, B*T*D)
	for b := 0; b < B; b++ {
		off := make([]float64, D)
		for i := range off {
			off[i] = rng.NormFloat64()
		}
		for i := 0; i < T*D; i++ {
			x[b*T*D+i] = float32(rng.NormFloat64() + off[i%D])
		}
	}
	return a, x
}

// pairOf returns the complex number of pair n of head vector v:
// v[n] + i·v[n+R] (NeoX) or v[2n] + i·v[2n+1] (interleaved).
func pairOf(v []float32, n int, p Pairing) complex128 {
	R := len(v) / 2
	if p == PairInterleaved {
		return complex(float64(v[2*n]), float64(v[2*n+1]))
	}
	return complex(float64(v[n]), float64(v[n+R]))
}

// TestSelRoPEComplexEqualsReal: the real rotated score q′_tᵀk′_τ (eq. 6/15)
// equals the complex form Σ_n Re{Q_n conj(K_n) e^{i(a_t,n − a_τ,n)}}
// (eq. 5/14, conjugation as in notes 002 §A.6.1) for both pair layouts.
func TestSelRoPEComplexEqualsReal(t *testing.T) {
	const B, T, D, H = 2, 24, 32, 4
	for _, p := range []Pairing{PairNeoX, PairInterleaved} {
		sc := selropeOpts(func(c *SelRoPEConfig) { c.UseGate, c.UseBias, c.Pairing = true, true, p })
		a, x := randomSelRoPELayer(sc, B, T, D, H, 1)
		o, err := a.Forward(x, B, T)
		if err != nil {
			t.Fatal(err)
		}
		dh, R := D/H, D/H/2
		var maxDiff, maxRef float64
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				at := func(buf []float32, t int) []float32 { return buf[((b*T+t)*H+h)*dh:][:dh] }
				ang := func(t, n int) float64 { return float64(o.Angle[((b*T+t)*H+h)*R+n]) }
				for t1 := 0; t1 < T; t1++ {
					for t0 := 0; t0 <= t1; t0++ {
						var dot float64
						for i, qv := range at(o.QRot, t1) {
							dot += float64(qv) * float64(at(o.KRot, t0)[i])
						}
						var cplxSum float64
						for n := 0; n < R; n++ {
							z := pairOf(at(o.Q, t1), n, p) * cmplx.Conj(pairOf(at(o.K, t0), n, p)) *
								cmplx.Exp(complex(0, ang(t1, n)-ang(t0, n)))
							cplxSum += real(z)
						}
						maxDiff = math.Max(maxDiff, math.Abs(dot-cplxSum))
						maxRef = math.Max(maxRef, math.Abs(dot))
					}
				}
			}
		}
		if rel := maxDiff / maxRef; rel > 1e-5 {
			t.Errorf("%s: real and complex scores differ: rel %.3g", p, rel)
		} else {
			t.Logf("%s: real vs complex score rel. difference %.2g", p, rel)
		}
	}
}

// TestSelRoPERecurrentEqualsParallel: Selective RoPE as linear attention
// with the input-dependent rotation as transition (eq. 12: per pair
// s_t = s_{t−1}·e^{iω_t} + v_t·conj(K_t), o_t = Σ_n Re{s_t,n Q_t,n}) equals
// the parallel form with cumulatively rotated q and k (eq. 13:
// o_t = Σ_{τ≤t} (q′_tᵀk′_τ) v_τ), using the layer's own angular velocities ω.
func TestSelRoPERecurrentEqualsParallel(t *testing.T) {
	const B, T, D, H = 2, 32, 32, 4
	sc := selropeOpts(func(c *SelRoPEConfig) { c.UseGate, c.UseBias, c.PhiParam, c.ConvAct = true, true, "full-rank", "silu" })
	a, x := randomSelRoPELayer(sc, B, T, D, H, 2)
	o, err := a.Forward(x, B, T)
	if err != nil {
		t.Fatal(err)
	}
	dh, R := D/H, D/H/2
	var maxDiff, maxRef float64
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			at := func(buf []float32, t int) []float32 { return buf[((b*T+t)*H+h)*dh:][:dh] }
			state := make([]complex128, R*dh)
			for t1 := 0; t1 < T; t1++ {
				// parallel
				par := make([]float64, dh)
				for t0 := 0; t0 <= t1; t0++ {
					var s float64
					for i, qv := range at(o.QRot, t1) {
						s += float64(qv) * float64(at(o.KRot, t0)[i])
					}
					for j, vv := range at(o.V, t0) {
						par[j] += s * float64(vv)
					}
				}
				// recurrent
				rec := make([]float64, dh)
				for n := 0; n < R; n++ {
					rot := cmplx.Exp(complex(0, float64(o.Omega[((b*T+t1)*H+h)*R+n])))
					kc := cmplx.Conj(pairOf(at(o.K, t1), n, sc.Pairing))
					q := pairOf(at(o.Q, t1), n, sc.Pairing)
					for j, vv := range at(o.V, t1) {
						state[n*dh+j] = state[n*dh+j]*rot + complex(float64(vv), 0)*kc
						rec[j] += real(state[n*dh+j] * q)
					}
				}
				for j := range par {
					maxDiff = math.Max(maxDiff, math.Abs(par[j]-rec[j]))
					maxRef = math.Max(maxRef, math.Abs(par[j]))
				}
			}
		}
	}
	if rel := maxDiff / maxRef; rel > parityTol {
		t.Errorf("recurrent (eq. 12) and parallel (eq. 13) outputs differ: rel %.3g", rel)
	} else {
		t.Logf("recurrent vs parallel rel. difference %.2g", rel)
	}
}

// TestSelRoPEStreamingEqualsPattern: attention rows streamed in tiles of 1,
// 7 and T rows equal the materialized pattern exactly, each row once.
func TestSelRoPEStreamingEqualsPattern(t *testing.T) {
	m := smallSelRoPE(t, selropeVariants[1], 5)
	const B, T = 2, 37
	for _, tile := range []int{1, 7, T} {
		hs := &hooks.Set{}
		cap := hs.Capture("blocks.1.attn.hook_pattern")
		c := &rowCollector{T: T, H: m.Heads, rows: make([]float32, B*m.Heads*T*T), seen: make([]int, B*m.Heads)}
		hs.Stream(1, c)
		if _, err := m.Forward(seqs(B, T, m.Vocab), Options{Hooks: hs, TileRows: tile}); err != nil {
			t.Fatal(err)
		}
		want := cap.Get("blocks.1.attn.hook_pattern").Data().([]float32)
		for i := range want {
			if c.rows[i] != want[i] {
				t.Fatalf("tile %d: streamed row value at flat %d = %v, pattern %v", tile, i, c.rows[i], want[i])
			}
		}
		for bh, n := range c.seen {
			if n != T {
				t.Fatalf("tile %d: (batch,head) %d got %d rows, want %d", tile, bh, n, T)
			}
		}
	}
}

// TestSelRoPECausal: the causal conv and the cumulative sum look only
// backwards, so the logits of a prefix do not depend on later tokens.
func TestSelRoPECausal(t *testing.T) {
	m := smallSelRoPE(t, selropeVariants[1], 6)
	ids := seqs(2, 30, m.Vocab)
	full, err := m.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	pre := [][]int{ids[0][:13], ids[1][:13]}
	part, err := m.Forward(pre, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	V := m.Vocab
	for b := 0; b < 2; b++ {
		got, want := part.Logits[b*13*V:(b+1)*13*V], full.Logits[b*30*V:][:13*V]
		if rel, i := relErr(got, want); rel > 1e-6 {
			t.Fatalf("sequence %d: prefix logits depend on later tokens: rel %.3g at %d", b, rel, i)
		}
	}
}

// TestSelRoPEHooks: capturing the new points changes nothing; writing at
// them intervenes: a zero phase gate or zero angular velocity leaves no
// rotation, a zero angle makes hook_rot_q equal hook_q.
func TestSelRoPEHooks(t *testing.T) {
	m := smallSelRoPE(t, selropeVariants[1], 7)
	ids := seqs(2, 20, m.Vocab)
	plain, err := m.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	zero := func(_ string, _ int, x *tensor.Dense) error {
		clear(x.Data().([]float32))
		return nil
	}
	for _, tc := range []struct {
		name, at string
		tol      float64 // on |angle| after the intervention
	}{
		{"capture only", "", -1},
		{"zero phase gate", "blocks.*.attn.hook_phase_gate", 0},
		{"zero angular velocity", "blocks.*.attn.hook_angular_velocity", 1e-5},
		{"zero angle", "blocks.*.attn.hook_angle", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := &hooks.Set{}
			if tc.at != "" {
				hs.Add(tc.at, zero)
			}
			cap := hs.Capture("blocks.*.attn.hook_phase_gate", "blocks.*.attn.hook_angular_velocity",
				"blocks.*.attn.hook_angle", "blocks.*.attn.hook_q", "blocks.*.attn.hook_rot_q")
			out, err := m.Forward(ids, Options{Logits: true, Hooks: hs})
			if err != nil {
				t.Fatal(err)
			}
			if tc.tol < 0 {
				if rel, _ := relErr(out.Logits, plain.Logits); rel != 0 {
					t.Fatalf("capturing the Selective-RoPE hooks changed the logits: rel %g", rel)
				}
				if s := cap.Get("blocks.0.attn.hook_angle").Shape(); !reflect.DeepEqual([]int(s), []int{2, 20, 4, 4}) {
					t.Fatalf("hook_angle shape %v, want [batch,pos,head,pair] = [2 20 4 4]", s)
				}
				return
			}
			for l := 0; l < m.Config.Layers; l++ {
				angle := cap.Get(hooks.Name("blocks.{l}.attn.hook_angle", l)).Data().([]float32)
				for i, a := range angle {
					if math.Abs(float64(a)) > tc.tol {
						t.Fatalf("layer %d: angle %v at %d after the intervention, want ≤ %g", l, a, i, tc.tol)
					}
				}
			}
			if tc.tol == 0 { // no rotation at all: q′ = q (no QK-norm in this variant)
				q := cap.Get("blocks.0.attn.hook_q").Data().([]float32)
				rq := cap.Get("blocks.0.attn.hook_rot_q").Data().([]float32)
				if !reflect.DeepEqual(q, rq) {
					t.Fatal("hook_rot_q differs from hook_q with every angle 0")
				}
			}
			if rel, _ := relErr(out.Logits, plain.Logits); rel < 1e-3 {
				t.Fatalf("the intervention barely changed the logits (rel %g)", rel)
			}
		})
	}
}

// TestSelRoPEGenerateRoundTrip: every variant written by WriteHF loads back
// (config and weights) to the same logits, bit for bit.
func TestSelRoPEGenerateRoundTrip(t *testing.T) {
	for i, v := range selropeVariants {
		t.Run(v.name, func(t *testing.T) {
			m := smallSelRoPE(t, v, uint64(20+i))
			dir := writeSelRoPE(t, v, uint64(20+i))
			back, err := Load(dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if back.Arch != ArchSelRoPE || back.Parameters != m.Parameters || back.ModelType != "transformer" {
				t.Fatalf("loaded %s (%s) with %d parameters, wrote %s with %d", back.Arch, back.ModelType, back.Parameters, m.Arch, m.Parameters)
			}
			if !reflect.DeepEqual(*back.SelRoPE, *m.SelRoPE) || back.Sliding != v.window || back.TiedHead != v.tied || back.QKVBias != v.qkvBias {
				t.Fatalf("config changed in the round trip: %+v vs %+v", *back.SelRoPE, *m.SelRoPE)
			}
			ids := seqs(1, 16, m.Vocab)
			a, err := m.Forward(ids, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			b, err := back.Forward(ids, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			if rel, _ := relErr(b.Logits, a.Logits); rel != 0 {
				t.Fatalf("logits differ after a save/load round trip: rel %g", rel)
			}
		})
	}
}

// TestSelRoPEConfigErrors: unsupported or inconsistent checkpoints are
// refused with a message naming the field or tensor.
func TestSelRoPEConfigErrors(t *testing.T) {
	base := selropeVariants[1]
	for _, tc := range []struct {
		name string
		edit func(cfg map[string]any, pe map[string]any)
		drop string
		want string
	}{
		{"gqa", func(c, _ map[string]any) { c["num_kv_heads"] = 2 }, "", "num_kv_heads 2"},
		{"fuse gate", func(_, pe map[string]any) { pe["fuse_gate"] = true }, "", "fuse_gate"},
		{"unknown option", func(_, pe map[string]any) { pe["phi_rank"] = 3 }, "", "position_embedding.phi_rank"},
		{"bad gate", func(_, pe map[string]any) { pe["gate_parametrization"] = "deep" }, "", "gate_parametrization"},
		{"rope type", func(_, pe map[string]any) { pe["type"] = "rope" }, "", "position_embedding.type"},
		{"odd head dim", func(c, _ map[string]any) { c["num_heads"] = 32 }, "", "must be even"},
		{"hidden act", func(c, _ map[string]any) { c["hidden_act"] = "gelu" }, "", "hidden_act"},
		{"missing tensor", nil, "model.layers.1.attn.rotary.phi_proj.scalar", "model.layers.1.attn.rotary.phi_proj.scalar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSelRoPE(t, base, 1)
			if tc.edit != nil {
				path := filepath.Join(dir, "config.json")
				data, _ := os.ReadFile(path)
				var cfg map[string]any
				if err := json.Unmarshal(data, &cfg); err != nil {
					t.Fatal(err)
				}
				tc.edit(cfg, cfg["position_embedding"].(map[string]any))
				data, _ = json.Marshal(cfg)
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.drop != "" {
				cfg := base.config(t)
				_, ts, err := Generate(cfg, 1)
				if err != nil {
					t.Fatal(err)
				}
				var kept []checkpoint.Tensor
				for _, x := range ts {
					if x.Name != tc.drop {
						kept = append(kept, x)
					}
				}
				if err := WriteHF(dir, cfg, kept); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(dir, LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestSelRoPESmallConfig: SmallConfig (probe generate --arch selrope) makes
// the authors' LM-sweep setting and refuses grouped-query attention.
func TestSelRoPESmallConfig(t *testing.T) {
	cfg, err := SmallConfig(ArchSelRoPE, Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 4, Vocab: 61, MaxPos: 128})
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.SelRoPE; cfg.Arch != ArchSelRoPE || s.PhiParam != "full-rank" || s.ConvAct != "silu" || !s.UseGate {
		t.Fatalf("SmallConfig(selrope) = %s %+v", cfg.Arch, s)
	}
	if _, err := SmallConfig(ArchSelRoPE, Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 61, MaxPos: 128}); err == nil || !strings.Contains(err.Error(), "kv heads 2") {
		t.Fatalf("grouped-query attention accepted: %v", err)
	}
}
