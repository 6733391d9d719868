package model

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/cmplx"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"gorgonia.org/tensor"
)

// rfaSpec describes a small random RFA checkpoint in the authors' naming,
// for tests that do not need the golden data.
type rfaSpec struct {
	D, H, d, F, V, L int
	mu               []float64 // mu_v buffer per head (0: Brownian head; large: the −10 clamp is reached)
	gate, shift      bool      // M2.7 gate, learned Δt₊
	scale            bool      // scale_decay_by_time_interval (M1)
	maxLen           int       // t_measure length
}

func defaultRFASpec() rfaSpec {
	return rfaSpec{D: 12, H: 3, d: 4, F: 20, V: 23, L: 2, mu: []float64{0, 0.08, 2.5}, gate: true, shift: true, maxLen: 48}
}

func (s rfaSpec) config() map[string]any {
	return map[string]any{
		"architecture": "rfa_lm", "vocab_size": s.V, "d_e": s.D, "n_heads": s.H, "num_blocks": s.L,
		"d_k_total": s.H * s.d, "d_v_total": s.H * s.d, "hidden_dim": s.F, "seq_len": 32, "max_fixed_decay": 5.0,
		"scale_decay_by_time_interval": s.scale, "learn_t_shift": s.shift, "use_inner_residual": s.gate,
		"use_total_precision_gate": 1, "epsilon": 1e-5, "min_exponent": -10, "max_exponent": 0, "omega_rescale": 1.0,
		"use_robust_weight": true, "rotate_values": true, "t_shift": nil, "use_full_residual_norm": 1,
		"internal_buffer_max_len": s.maxLen,
	}
}

// tensors makes the state_dict: weights N(0, 1/fan_in) (q/k ×2 for
// sharper attention), LayerNorm weights near 1, and per-head raw filter
// parameters spread so that the regimes differ.
func (s rfaSpec) tensors(seed uint64) []checkpoint.Tensor {
	rng := rand.New(rand.NewPCG(seed, 77))
	var ts []checkpoint.Tensor
	add := func(name string, scale, offset float64, shape ...int) []float32 {
		x := make([]float32, prod(shape))
		for i := range x {
			x[i] = float32(offset + scale*rng.NormFloat64())
		}
		ts = append(ts, checkpoint.Tensor{Name: name, Shape: shape, Data: x})
		return x
	}
	W := 2 * s.H * s.d
	emb := add("token_embedding.weight", 0.5, 0, s.V, s.D)
	ts = append(ts, checkpoint.Tensor{Name: "lm_head.weight", Shape: []int{s.V, s.D}, Data: emb})
	add("lm_head.bias", 0.1, 0, s.V)
	add("backbone.input_proj.weight", 1/math.Sqrt(float64(s.D)), 0, s.D, s.D)
	add("backbone.input_proj.bias", 0.05, 0, s.D)
	for l := 0; l < s.L; l++ {
		b := fmt.Sprintf("backbone.blocks.%d.", l)
		a := b + "attn."
		for _, n := range []string{"norm1", "norm2"} {
			add(b+n+".weight", 0.1, 1, s.D)
			add(b+n+".bias", 0.05, 0, s.D)
		}
		for _, n := range []string{"W_q", "W_k", "W_v"} {
			sc := 1 / math.Sqrt(float64(s.D))
			if n != "W_v" {
				sc *= 2
			}
			add(a+n+".weight", sc, 0, W, s.D)
			add(a+n+".bias", 0.1, 0, W)
		}
		add(a+"W_o.weight", 1/math.Sqrt(float64(W)), 0, s.D, W)
		add(a+"W_o.bias", 0.05, 0, s.D)
		mu := make([]float32, s.H)
		for h := range mu {
			mu[h] = float32(s.mu[h%len(s.mu)])
		}
		ts = append(ts, checkpoint.Tensor{Name: a + "mu_v", Shape: []int{s.H}, Data: mu})
		om := make([]float32, s.H*s.d/2)
		for i := range om {
			om[i] = float32(0.05 + 1.2*rng.Float64())
		}
		ts = append(ts, checkpoint.Tensor{Name: a + "omega_v", Shape: []int{s.H, s.d / 2}, Data: om})
		add(a+"sigma_v", 1.5, -2, s.H)
		add(a+"sigma_tilde_v", 0.5, 0.1, s.H)
		add(a+"eta_v", 0.8, 0, s.H)
		add(a+"gamma_v", 0.8, -0.5, s.H)
		add(a+"nu_param", 1.5, 2, s.H)
		add(a+"tau_param", 0.5, 0.5, s.H)
		add(a+"t_shift_param", 1, 0, 1, s.H)
		add(a+"P_prior_log", 1, 0, 1, 1, s.H, 1, 1)
		add(a+"P_scale_log", 0.5, -0.5, 1, 1, s.H, 1, 1)
		tm := make([]int64, s.maxLen)
		for i := range tm {
			tm[i] = int64(i)
		}
		ts = append(ts, checkpoint.Tensor{Name: a + "t_measure", Shape: []int{s.maxLen}, Data: tm})
		add(b+"ffn.0.weight", 1/math.Sqrt(float64(s.D)), 0, s.F, s.D)
		add(b+"ffn.0.bias", 0.05, 0, s.F)
		add(b+"ffn.2.weight", 1/math.Sqrt(float64(s.F)), 0, s.D, s.F)
		add(b+"ffn.2.bias", 0.05, 0, s.D)
	}
	add("backbone.final_norm.weight", 0.1, 1, s.D)
	add("backbone.final_norm.bias", 0.05, 0, s.D)
	add("backbone.output_proj.weight", 1/math.Sqrt(float64(s.D)), 0, s.D, s.D)
	add("backbone.output_proj.bias", 0.05, 0, s.D)
	return ts
}

// writeRFA writes config.json (after edit) and model.safetensors to a new
// directory.
func writeRFA(t testing.TB, s rfaSpec, seed uint64, edit func(cfg map[string]any, ts []checkpoint.Tensor) []checkpoint.Tensor) string {
	t.Helper()
	dir := t.TempDir()
	cfg, ts := s.config(), s.tensors(seed)
	if edit != nil {
		ts = edit(cfg, ts)
	}
	data, _ := json.MarshalIndent(cfg, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

func loadRFASpec(t testing.TB, s rfaSpec, seed uint64) (*Model, string) {
	t.Helper()
	dir := writeRFA(t, s, seed, nil)
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m, dir
}

// refRFA is an independent float64/complex128 implementation of the RFA
// language model written from the paper's equations (Eqs. 9–11, Alg. 1,
// App. C.4, C.6) and the authors' constants, reading the raw (not
// interleaved) tensors. It returns the logits [B·T·V] and each block's
// attention output [L][B·T·D].
func refRFA(t *testing.T, dir string, ids [][]int) ([]float64, [][]float64) {
	t.Helper()
	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	get := func(n string) []float64 {
		x, err := ck.Float64(n)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	rc, D, H, d, F, V := cfg.RFA, cfg.DModel, cfg.Heads, cfg.DHead, cfg.DMLP, cfg.Vocab
	lin := func(x []float64, w, b []float64, out int) []float64 {
		y := make([]float64, out)
		for o := range y {
			s := b[o]
			for i, xi := range x {
				s += w[o*len(x)+i] * xi
			}
			y[o] = s
		}
		return y
	}
	ln := func(x, w, b []float64) []float64 {
		var mean, vr float64
		for _, v := range x {
			mean += v
		}
		mean /= float64(len(x))
		for _, v := range x {
			vr += (v - mean) * (v - mean)
		}
		inv := 1 / math.Sqrt(vr/float64(len(x))+1e-5)
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = (v-mean)*inv*w[i] + b[i]
		}
		return y
	}
	sp := func(x float64) float64 { return math.Log1p(math.Exp(x)) }
	emb := get("token_embedding.weight")
	var logits []float64
	attnOut := make([][]float64, cfg.Layers)
	for _, seq := range ids {
		T := len(seq)
		xs := make([][]float64, T)
		for i, id := range seq {
			xs[i] = lin(emb[id*D:(id+1)*D], get("backbone.input_proj.weight"), get("backbone.input_proj.bias"), D)
		}
		for l := 0; l < cfg.Layers; l++ {
			a := fmt.Sprintf("backbone.blocks.%d.attn.", l)
			bl := fmt.Sprintf("backbone.blocks.%d.", l)
			proj := func(name string, x []float64) [][]complex128 { // [H][d]
				y := lin(x, get(a+name+".weight"), get(a+name+".bias"), 2*H*d)
				z := make([][]complex128, H)
				for h := range z {
					z[h] = make([]complex128, d)
					for k := range z[h] {
						z[h][k] = complex(y[h*d+k], y[H*d+h*d+k])
					}
				}
				return z
			}
			Q, K, Vv := make([][][]complex128, T), make([][][]complex128, T), make([][][]complex128, T)
			for i := range xs {
				xn := ln(xs[i], get(bl+"norm1.weight"), get(bl+"norm1.bias"))
				Q[i], K[i], Vv[i] = proj("W_q", xn), proj("W_k", xn), proj("W_v", xn)
			}
			mu, om := get(a+"mu_v"), get(a+"omega_v")
			sig, eta, gam, nup, taup := get(a+"sigma_v"), get(a+"eta_v"), get(a+"gamma_v"), get(a+"nu_param"), get(a+"tau_param")
			z := make([][][]complex128, T)
			for i := range z {
				z[i] = make([][]complex128, H)
			}
			for h := 0; h < H; h++ {
				m := mu[h] * rc.DecayScale
				s2, e2, g2 := sp(sig[h]), sp(eta[h])+1e-5, sp(gam[h])+1e-5
				nu, tau := float64(d)*sp(nup[h])+2+1e-5, sp(taup[h])+1e-5
				kappa := (nu + float64(d)) / float64(d)
				dt := 0.0
				if rc.LearnTShift {
					dt = sp(get(a + "t_shift_param")[h])
				}
				omega := func(k int) float64 { return om[h*d/2+k/2] * float64(1-2*(k%2)) }
				rot := func(x []complex128, tt float64) []complex128 { // e^{iω tt} x
					y := make([]complex128, d)
					for k := range x {
						y[k] = x[k] * cmplx.Exp(complex(0, omega(k)*tt))
					}
					return y
				}
				kern := func(lag int) (float64, float64) {
					s := float64(lag) + dt
					e := math.Min(math.Max(-m*s, -10), 0)
					E := math.Exp(e)
					proc := s2 * s
					if math.Abs(m) >= 1e-5 {
						proc = s2 * (1 - math.Exp(2*e)) / (2 * m)
					}
					return proc + e2*E*E + g2 + 0.01, E
				}
				for i := 0; i < T; i++ {
					qi := rot(Q[i][h], -float64(i))
					L, en := make([]float64, i+1), make([]float64, i+1)
					for j := 0; j <= i; j++ {
						Vk, E := kern(i - j)
						kj := rot(K[j][h], -float64(j))
						var r2 float64
						for k := range qi {
							r := qi[k] - complex(E, 0)*kj[k]
							r2 += real(r)*real(r) + imag(r)*imag(r)
						}
						L[j] = tau * (-math.Log(Vk) - kappa*math.Log1p(r2/(nu*Vk)))
						en[j] = -math.Log(Vk) - math.Log1p(r2/(nu*Vk))
					}
					mx, sum, lse := math.Inf(-1), 0.0, 0.0
					for j := range L {
						mx = math.Max(mx, L[j])
					}
					for j := range L {
						sum += math.Exp(L[j] - mx)
					}
					for _, v := range en {
						lse += math.Exp(v)
					}
					est := make([]complex128, d)
					for j := 0; j <= i; j++ {
						_, E := kern(i - j)
						vj := rot(Vv[j][h], -float64(j))
						for k := range est {
							est[k] += complex(math.Exp(L[j]-mx)/sum*E, 0) * vj[k]
						}
					}
					est = rot(est, float64(i))
					if rc.Gate {
						nug := float64(d) * (sp(nup[h]) + 2 + 1e-5)
						ps, pp := math.Exp(get(a + "P_scale_log")[h]), get(a + "P_prior_log")[h]
						g := 1 / (1 + math.Exp(-(ps*(math.Log(lse)+math.Log(nug-2+1e-5)-math.Log(nug+1e-5)) - pp)))
						for k := range est {
							est[k] = complex(g, 0)*est[k] + complex(1-g, 0)*Vv[i][h][k]
						}
					}
					z[i][h] = rot(est, dt)
				}
			}
			wo, bo := get(a+"W_o.weight"), get(a+"W_o.bias")
			for i := range xs {
				flat := make([]float64, 2*H*d)
				for h := 0; h < H; h++ {
					for k := 0; k < d; k++ {
						flat[h*d+k], flat[H*d+h*d+k] = real(z[i][h][k]), imag(z[i][h][k])
					}
				}
				o := lin(flat, wo, bo, D)
				attnOut[l] = append(attnOut[l], o...)
				for c := range o {
					xs[i][c] += o[c]
				}
				hdn := lin(ln(xs[i], get(bl+"norm2.weight"), get(bl+"norm2.bias")), get(bl+"ffn.0.weight"), get(bl+"ffn.0.bias"), F)
				for c := range hdn {
					hdn[c] = math.Max(hdn[c], 0)
				}
				o = lin(hdn, get(bl+"ffn.2.weight"), get(bl+"ffn.2.bias"), D)
				for c := range o {
					xs[i][c] += o[c]
				}
			}
		}
		for i := range xs {
			y := lin(ln(xs[i], get("backbone.final_norm.weight"), get("backbone.final_norm.bias")),
				get("backbone.output_proj.weight"), get("backbone.output_proj.bias"), D)
			logits = append(logits, lin(y, emb, get("lm_head.bias"), V)...)
		}
	}
	return logits, attnOut
}

func f64to32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

// TestRFAMatchesComplexReference compares the pass with the independent
// complex128 reference on random checkpoints covering what the golden
// cases do not reach: the −10 clamp of the decay exponent, a μ = 0 head,
// the gate with the learned shift, M1's decay scaling, and inputs longer
// than t_measure (with AllowExtrapolation).
func TestRFAMatchesComplexReference(t *testing.T) {
	m1 := defaultRFASpec()
	m1.gate, m1.shift, m1.scale, m1.mu = false, false, true, []float64{0.3, 0, 0.01}
	for name, s := range map[string]rfaSpec{"gate+shift+clamp": defaultRFASpec(), "M1 scaling": m1} {
		t.Run(name, func(t *testing.T) {
			m, dir := loadRFASpec(t, s, 3)
			ids := seqs(2, 53, s.V) // > t_measure (48)
			if _, err := m.Forward(ids, Options{}); err == nil || !strings.Contains(err.Error(), "max_position_embeddings 48") {
				t.Errorf("53 tokens with a 48-entry t_measure: error %v, want a refusal naming the limit", err)
			}
			hs := &hooks.Set{}
			cap := hs.Capture("blocks.*.hook_attn_out")
			out, err := m.Forward(ids, Options{Hooks: hs, Logits: true, AllowExtrapolation: true, TileRows: 5})
			if err != nil {
				t.Fatal(err)
			}
			refLogits, refAttn := refRFA(t, dir, ids)
			checkClose(t, "logits", out.Logits, f64to32(refLogits))
			for l := range refAttn {
				checkClose(t, fmt.Sprintf("attn_out.%d", l), cap.Get(hooks.Name("blocks.{l}.hook_attn_out", l)).Data().([]float32), f64to32(refAttn[l]))
			}
			if name == "gate+shift+clamp" {
				ps, _ := m.RFAParams()
				p := ps[2]
				if _, E := p.Kernel(52); E != math.Exp(-10) {
					t.Errorf("head 2 (μ = %g): E(52) = %g, want the clamp e^-10", p.Mu, E)
				}
			}
		})
	}
}

// TestRFAStreaming: streamed Â rows equal hook_pattern for every tile size,
// each row arrives once, the deferred (pattern-hooked) path gives the same
// output as the streamed one, and the tile's V is Ṽ: e^{iωt}Σ_j Â E Ṽ_j
// rebuilt from the tile equals hook_z (no gate, no shift).
func TestRFAStreaming(t *testing.T) {
	s := defaultRFASpec()
	s.gate, s.shift = false, false
	m, _ := loadRFASpec(t, s, 5)
	B, T, H, d := 2, 31, m.Heads, m.DHead
	ids := seqs(B, T, m.Vocab)
	base, err := m.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := m.RFAParams()
	for _, tile := range []int{1, 7, 64} {
		hs := &hooks.Set{}
		cap := hs.Capture("blocks.1.attn.hook_pattern", "blocks.1.attn.hook_z")
		rec := newRFARecorder(B, H, T)
		plain := &valueCheck{ps: ps[H:], T: T, d: d, est: make([]float64, B*T*H*2*d)}
		hs.Stream(1, rec)
		hs.Stream(1, plain)
		out, err := m.Forward(ids, Options{Hooks: hs, Logits: true, TileRows: tile})
		if err != nil {
			t.Fatal(err)
		}
		want := cap.Get("blocks.1.attn.hook_pattern").Data().([]float32)
		for i := range want {
			if rec.alpha[i] != want[i] {
				t.Fatalf("tile %d: streamed Â at flat %d = %v, hook_pattern %v", tile, i, rec.alpha[i], want[i])
			}
		}
		for bh, n := range rec.rowsPerHead {
			if n != T {
				t.Errorf("tile %d: (batch, head) %d got %d rows, want %d", tile, bh, n, T)
			}
		}
		if rec.plainCalls != 0 || rec.rfaCalls == 0 {
			t.Errorf("an RFAConsumer got %d ConsumeAttn and %d ConsumeRFA calls", rec.plainCalls, rec.rfaCalls)
		}
		checkClose(t, fmt.Sprintf("tile %d: logits (pattern hooked vs streamed)", tile), out.Logits, base.Logits)
		checkClose(t, fmt.Sprintf("tile %d: e^{iωt}Σ Â E Ṽ from the tile vs hook_z", tile), f64to32(plain.est), cap.Get("blocks.1.attn.hook_z").Data().([]float32))
	}
}

// valueCheck is a plain AttnConsumer that rebuilds V̄_t = e^{iωt}Σ_j Â_tj
// E(t−j) Ṽ_j from the tile's rows and values.
type valueCheck struct {
	ps   []RFAHeadParams
	T, d int
	est  []float64 // [B, T, H, d, 2]
}

func (c *valueCheck) ConsumeAttn(a *hooks.AttnTile) error {
	if a.DHead != 2*c.d {
		return fmt.Errorf("tile DHead %d, want 2d = %d", a.DHead, 2*c.d)
	}
	p, H := &c.ps[a.Head], len(c.ps)
	for r := 0; r < a.Rows; r++ {
		t := a.Q0 + r
		acc := make([]complex128, c.d)
		for j, w := range a.Row(r) {
			_, E := p.Kernel(float64(t - j))
			v := a.Value(j)
			for k := range acc {
				acc[k] += complex(float64(w)*E, 0) * complex(float64(v[2*k]), float64(v[2*k+1]))
			}
		}
		for k := range acc {
			x := acc[k] * complexExp(p.Omega[k/2]*float64(1-2*(k%2))*float64(t))
			o := (((a.Batch*c.T+t)*H+a.Head)*c.d + k) * 2
			c.est[o], c.est[o+1] = real(x), imag(x)
		}
	}
	return nil
}

// TestRFAResidualExpansion (notes §G.1): the streamed ‖R‖², computed by the
// expansion of Eq. 10, equals Σ_k |Q̃_ik − E K̃_jk|² from hook_rot_q/k.
func TestRFAResidualExpansion(t *testing.T) {
	m, _ := loadRFASpec(t, defaultRFASpec(), 9)
	B, T, H, d := 1, 20, m.Heads, m.DHead
	hs := &hooks.Set{}
	cap := hs.Capture("blocks.0.attn.hook_rot_q", "blocks.0.attn.hook_rot_k")
	rec := newRFARecorder(B, H, T)
	hs.Stream(0, rec)
	if _, err := m.Forward(seqs(B, T, m.Vocab), Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	q, k := cap.Get("blocks.0.attn.hook_rot_q").Data().([]float32), cap.Get("blocks.0.attn.hook_rot_k").Data().([]float32)
	ps, _ := m.RFAParams()
	got, want := make([]float32, 0), make([]float32, 0)
	for h := 0; h < H; h++ {
		for i := 0; i < T; i++ {
			for j := 0; j <= i; j++ {
				_, E := ps[h].Kernel(float64(i - j))
				var r2 float64
				for c := 0; c < 2*d; c++ {
					r := float64(q[(i*H+h)*2*d+c]) - E*float64(k[(j*H+h)*2*d+c])
					r2 += r * r
				}
				want = append(want, float32(r2))
				got = append(got, rec.r2[(h*T+i)*T+j])
			}
		}
	}
	checkClose(t, "‖R‖² expansion vs direct", got, want)
}

// TestRFACausality: changing the last token changes no earlier output.
func TestRFACausality(t *testing.T) {
	m, _ := loadRFASpec(t, defaultRFASpec(), 11)
	ids := seqs(1, 17, m.Vocab)
	a, err := m.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	ids[0][16] = (ids[0][16] + 5) % m.Vocab
	b, err := m.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 16 * m.Vocab
	if rel, i := relErr(b.Logits[:n], a.Logits[:n]); rel != 0 {
		t.Errorf("logits before the changed token moved: rel %g at %d", rel, i)
	}
	if rel, _ := relErr(b.Logits[n:], a.Logits[n:]); rel == 0 {
		t.Error("the changed token's own logits did not move")
	}
}

// TestRFAInterventions: hook_pattern_decayed feeds the values and hook_gate
// the fusion: zeroing A leaves (with the gate opened) only W_O's bias and
// the shift-rotated V̄ = 0; closing the gate (g = 0) passes the raw V_i.
func TestRFAInterventions(t *testing.T) {
	m, _ := loadRFASpec(t, defaultRFASpec(), 13)
	ids := seqs(1, 9, m.Vocab)
	hs := &hooks.Set{}
	hs.Add("blocks.0.attn.hook_pattern_decayed", func(_ string, _ int, x *tensor.Dense) error {
		clear(x.Data().([]float32))
		return nil
	})
	hs.Add("blocks.0.attn.hook_gate", hooks.SetHead(0, 1))
	hs.Add("blocks.0.attn.hook_gate", hooks.SetHead(1, 0))
	cap := hs.Capture("blocks.0.attn.hook_z", "blocks.0.attn.hook_v")
	if _, err := m.Forward(ids, Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	z, v := cap.Get("blocks.0.attn.hook_z").Data().([]float32), cap.Get("blocks.0.attn.hook_v").Data().([]float32)
	ps, _ := m.RFAParams()
	H, d := m.Heads, m.DHead
	for r := 0; r < 9; r++ {
		for k := 0; k < 2*d; k++ {
			if x := z[(r*H+0)*2*d+k]; x != 0 {
				t.Fatalf("head 0 (A zeroed, gate 1): z = %v, want 0", x)
			}
		}
		// head 1: z = e^{iωΔt₊} V
		for k := 0; k < d; k++ {
			o := (r*H + 1) * 2 * d
			want := complex(float64(v[o+2*k]), float64(v[o+2*k+1])) * complexExp(ps[1].Omega[k/2]*float64(1-2*(k%2))*ps[1].TShift)
			if math.Abs(float64(z[o+2*k])-real(want)) > 1e-5 || math.Abs(float64(z[o+2*k+1])-imag(want)) > 1e-5 {
				t.Fatalf("head 1 (gate 0) position %d channel %d: z = (%v, %v), want %v", r, k, z[o+2*k], z[o+2*k+1], want)
			}
		}
	}
}

// TestRFALargeBuffers: the authors' persistent abs_idx and causal_mask
// buffers at their real size ([4096,4096], 192 MiB per layer, here in a
// sparse shard) are accepted and never read.
func TestRFALargeBuffers(t *testing.T) {
	s := defaultRFASpec()
	s.L = 1
	dir := t.TempDir()
	data, _ := json.Marshal(s.config())
	os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
	ts := s.tensors(1)
	weightMap := map[string]string{}
	for _, x := range ts {
		weightMap[x.Name] = "model-00001-of-00002.safetensors"
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(dir, "model-00001-of-00002.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	const n = 4096 * 4096
	idx, mask := "backbone.blocks.0.attn.abs_idx", "backbone.blocks.0.attn.causal_mask"
	header := fmt.Sprintf(`{%q:{"dtype":"I64","shape":[4096,4096],"data_offsets":[0,%d]},%q:{"dtype":"F32","shape":[1,4096,4096,1],"data_offsets":[%d,%d]}}`,
		idx, 8*n, mask, 8*n, 12*n)
	for len(header)%8 != 0 {
		header += " "
	}
	f, err := os.Create(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	binary.Write(f, binary.LittleEndian, uint64(len(header)))
	f.WriteString(header)
	if err := f.Truncate(int64(8 + len(header) + 12*n)); err != nil { // sparse: no data written
		t.Fatal(err)
	}
	f.Close()
	weightMap[idx], weightMap[mask] = "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors"
	ix, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), ix, 0o644)

	start := time.Now()
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("loading took %v: the large buffers must not be read", el)
	}
	if m.Parameters > 10000 {
		t.Errorf("parameter count %d includes the skipped buffers", m.Parameters)
	}
	if _, err := m.Forward(seqs(1, 8, m.Vocab), Options{}); err != nil {
		t.Fatal(err)
	}
}

// TestRFAConfigAndLoadErrors: unsupported settings, missing fields and
// inconsistent tensors are refused with the field or tensor named.
func TestRFAConfigAndLoadErrors(t *testing.T) {
	s := defaultRFASpec()
	cases := []struct {
		name string
		edit func(map[string]any, []checkpoint.Tensor) []checkpoint.Tensor
		want string
	}{
		{"gaussian ablation", func(c map[string]any, ts []checkpoint.Tensor) []checkpoint.Tensor {
			c["use_robust_weight"] = false
			return ts
		}, "field use_robust_weight = false is not supported"},
		{"fixed shift", func(c map[string]any, ts []checkpoint.Tensor) []checkpoint.Tensor { c["t_shift"] = 1.0; return ts }, "field t_shift = 1 is not supported"},
		{"missing flag", func(c map[string]any, ts []checkpoint.Tensor) []checkpoint.Tensor {
			delete(c, "learn_t_shift")
			return ts
		}, "field learn_t_shift is missing"},
		{"dk != dv", func(c map[string]any, ts []checkpoint.Tensor) []checkpoint.Tensor { c["d_v_total"] = 24; return ts }, "d_k_total 12 differs from d_v_total 24"},
		{"odd d", func(c map[string]any, ts []checkpoint.Tensor) []checkpoint.Tensor {
			c["d_k_total"], c["d_v_total"] = 9, 9
			return ts
		}, "must be even"},
		{"missing tensor", func(c map[string]any, ts []checkpoint.Tensor) []checkpoint.Tensor {
			return drop(ts, "backbone.blocks.1.attn.eta_v")
		}, "missing tensors: backbone.blocks.1.attn.eta_v"},
		{"gate params missing", func(c map[string]any, ts []checkpoint.Tensor) []checkpoint.Tensor {
			return drop(ts, "backbone.blocks.0.attn.P_prior_log")
		}, "backbone.blocks.0.attn.P_prior_log"},
		{"wrong width", func(c map[string]any, ts []checkpoint.Tensor) []checkpoint.Tensor { c["hidden_dim"] = 21; return ts },
			`tensor "backbone.blocks.0.ffn.0.weight": expected shape [21 12] from config.json, found [20 12]`},
		{"non-uniform times", func(c map[string]any, ts []checkpoint.Tensor) []checkpoint.Tensor {
			for _, x := range ts {
				if x.Name == "backbone.blocks.0.attn.t_measure" {
					x.Data.([]int64)[3] = 7
				}
			}
			return ts
		}, `t_measure[3] = 7, want 3`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeRFA(t, s, 1, c.edit), LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	if _, err := smallModel(t, ArchQwen3).RFAParams(); err == nil || !strings.Contains(err.Error(), "not Robust Filter Attention") {
		t.Errorf("RFAParams on qwen3: %v", err)
	}
}

func drop(ts []checkpoint.Tensor, name string) []checkpoint.Tensor {
	var out []checkpoint.Tensor
	for _, x := range ts {
		if x.Name != name {
			out = append(out, x)
		}
	}
	return out
}

// BenchmarkRFAForward runs the paper's block shape (d_model 256, 8 heads ×
// 32 complex dims, FFN 1024; 2 blocks, vocabulary 1000) on 1024 tokens.
func BenchmarkRFAForward(b *testing.B) {
	s := rfaSpec{D: 256, H: 8, d: 32, F: 1024, V: 1000, L: 2, mu: []float64{0, 0, 1.6e-4, 5e-4, 1.6e-3, 5e-3, 1.6e-2, 5e-2}, gate: true, shift: true, maxLen: 4096}
	m, _ := loadRFASpec(b, s, 1)
	ids := seqs(1, 1024, s.V)
	b.ResetTimer()
	for range b.N {
		if _, err := m.Forward(ids, Options{Logits: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// rfaTestHead returns head parameters with the authors' constants.
func rfaTestHead(mu, sigma2, eta2, gamma2, tshift float64) RFAHeadParams {
	return RFAHeadParams{D: 8, Mu: mu, Sigma2: sigma2, Eta2: eta2, Gamma2: gamma2, TShift: tshift,
		Nu: 8*3.1 + 2, Tau: 1.3, NuGate: 8 * (3.1 + 2), PScaleLog: -0.4, PPriorLog: 0.3, Gate: true,
		Epsilon: 1e-5, CovEps: 0.01, BrownianBelow: 1e-5, MinExponent: -10, MaxExponent: 0}
}

// TestRFAALiBiSlope: the slope is the derivative of the logit's lag prior
// −τ_s(log V + (2κ/ν)/V) at lag 0 (by finite difference), and the paper
// form is the logit form without τ_s, Δt₊ and cov_eps.
func TestRFAALiBiSlope(t *testing.T) {
	p := rfaTestHead(0, 0.03, 0.6, 0.25, 0.4)
	paper, logit := p.ALiBiSlope()
	f := func(lag float64) float64 {
		V, _ := p.Kernel(lag)
		return p.Tau * (-math.Log(V) - 2*p.Kappa()/p.Nu/V)
	}
	const h = 1e-5
	if fd := -(f(h) - f(0)) / h; math.Abs(fd-logit) > 1e-6 {
		t.Errorf("logit slope %v, finite difference %v", logit, fd)
	}
	q := p
	q.TShift, q.CovEps = 0, 0
	if _, l2 := q.ALiBiSlope(); math.Abs(l2/q.Tau-paper) > 1e-15 {
		t.Errorf("paper slope %v, logit form without τ_s, Δt₊, c: %v", paper, l2/q.Tau)
	}
	ou := rfaTestHead(0.01, 0.03, 0.6, 0.25, 0)
	if a, b := ou.ALiBiSlope(); !math.IsNaN(a) || !math.IsNaN(b) {
		t.Errorf("μ ≠ 0 head has an ALiBi slope: %v %v", a, b)
	}
}
