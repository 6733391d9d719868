package afatoy

import (
	"encoding/json"
	"math"
	"math/cmplx"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
)

// toyAFA is a small random AFA toy filter written to a temporary folder,
// with its weights kept for the oracle.
type toyAFA struct {
	dir                     string
	De, H, d                int
	embed                   []float32 // [De, 2]
	vw, qw, kw, ow          [2][]float32
	vb, qb, kb, ob          [2][]float32
	alpha, sigma, eta, taus []float32
	omega, delta            []float32
	opt                     map[string]any
}

func writeToyAFA(t *testing.T, opt map[string]any, seed int64) *toyAFA {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	m := &toyAFA{dir: t.TempDir(), De: 6, H: 2, d: 4, opt: opt}
	rnd := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(scale * rng.NormFloat64())
		}
		return v
	}
	De, H, d := m.De, m.H, m.d
	m.embed = rnd(De*2, 1)
	m.vw = [2][]float32{rnd(H*d*De, 0.5), rnd(H*d*De, 0.5)}
	m.vb = [2][]float32{rnd(H*d, 0.3), rnd(H*d, 0.3)}
	m.qw = [2][]float32{rnd(H*d*d, 0.5), rnd(H*d*d, 0.5)}
	m.qb = [2][]float32{rnd(H*d, 0.3), rnd(H*d, 0.3)}
	m.kw = [2][]float32{rnd(H*d*d, 0.5), rnd(H*d*d, 0.5)}
	m.kb = [2][]float32{rnd(H*d, 0.3), rnd(H*d, 0.3)}
	m.ow = [2][]float32{rnd(De*H*d, 0.5), rnd(De*H*d, 0.5)}
	m.ob = [2][]float32{rnd(De, 0.3), rnd(De, 0.3)}
	m.alpha = []float32{0.4, 0.9}
	m.sigma, m.eta, m.taus = []float32{0.7, 0.2}, []float32{0.5, 1.3}, []float32{1.2, 0.8}
	m.omega, m.delta = rnd(H*d/2, 1), rnd(H*d, 1)
	ts := []checkpoint.Tensor{
		{Name: "embed.weight", Shape: []int{De, 2}, Data: m.embed},
		{Name: "afa.alpha", Shape: []int{H}, Data: m.alpha}, {Name: "afa.sigma", Shape: []int{H}, Data: m.sigma},
		{Name: "afa.eta", Shape: []int{H}, Data: m.eta}, {Name: "afa.tau_s", Shape: []int{H}, Data: m.taus},
		{Name: "afa.omega", Shape: []int{H, d / 2}, Data: m.omega}, {Name: "afa.delta", Shape: []int{H, d}, Data: m.delta},
	}
	add := func(name string, w [2][]float32, shape ...int) {
		ts = append(ts, checkpoint.Tensor{Name: name + "_real", Shape: shape, Data: w[0]}, checkpoint.Tensor{Name: name + "_imag", Shape: shape, Data: w[1]})
	}
	add("afa.v_proj.weight", m.vw, H*d, De)
	add("afa.v_proj.bias", m.vb, H*d)
	add("afa.q_proj.weight", m.qw, H, d, d)
	add("afa.q_proj.bias", m.qb, H, d)
	add("afa.k_proj.weight", m.kw, H, d, d)
	add("afa.k_proj.bias", m.kb, H, d)
	add("afa.o_proj.weight", m.ow, De, H*d)
	add("afa.o_proj.bias", m.ob, De)
	if err := checkpoint.WriteSafetensors(filepath.Join(m.dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"model_type": "afa_toy", "layer": "afa", "state_dim": 2, "embed_dim": De, "seq_len": 9,
		"embedding": "identity", "num_heads": H, "head_dim": 2 * d, "qkv_bias": true, "o_bias": true, "afa": opt}
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(m.dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

// oracle evaluates the per-pair statement of Algorithm 1 (notes 001 §A.11)
// in complex128: w_ij = (σ_V²(τ_ij) + ‖q_i − e^{λτ_ij}⊙k_j‖² + ε)^{−τ_s},
// A_ij = w_ij/Σw, z̄_i = Σ_j A_ij e^{λτ_ij}⊙v_j, z⁺ = e^{λΔt}⊙((1−s)v_i + s z̄_i),
// y = Re(W_p z⁺ + b_p); pred = embedᵀy. Returns y, pred, A, Â and the
// pulled-forward estimates of target pi.
func (m *toyAFA) oracle(x []float64, B, T, pi int) (y, pred, A, Ahat, pulled []float64) {
	De, H, d := m.De, m.H, m.d
	dt := m.opt["dt"].(float64)
	eps := m.opt["epsilon"].(float64)
	norm := m.opt["normalize_qk"] == true
	paper := m.opt["kernel_form"] == "paper"
	c := func(w [2][]float32, i int) complex128 { return complex(float64(w[0][i]), float64(w[1][i])) }
	y, pred = make([]float64, B*T*De), make([]float64, B*T*2)
	A, Ahat = make([]float64, B*H*T*T), make([]float64, B*H*T*T)
	pulled = make([]float64, B*(pi+1)*2)
	readout := func(z []complex128) []float64 {
		out := make([]float64, De)
		for r := 0; r < De; r++ {
			s := c(m.ob, r)
			for k := 0; k < H*d; k++ {
				s += c(m.ow, r*H*d+k) * z[k]
			}
			out[r] = real(s)
		}
		return out
	}
	back := func(v []float64) [2]float64 {
		var p [2]float64
		for k := 0; k < De; k++ {
			p[0] += v[k] * float64(m.embed[k*2])
			p[1] += v[k] * float64(m.embed[k*2+1])
		}
		return p
	}
	for b := 0; b < B; b++ {
		v := make([][]complex128, T)
		q, k := make([][]complex128, T), make([][]complex128, T)
		for t := 0; t < T; t++ {
			e := make([]float64, De)
			for r := 0; r < De; r++ {
				e[r] = float64(m.embed[r*2])*x[(b*T+t)*2] + float64(m.embed[r*2+1])*x[(b*T+t)*2+1]
			}
			v[t], q[t], k[t] = make([]complex128, H*d), make([]complex128, H*d), make([]complex128, H*d)
			for r := 0; r < H*d; r++ {
				s := c(m.vb, r)
				for cc := 0; cc < De; cc++ {
					s += c(m.vw, r*De+cc) * complex(e[cc], 0)
				}
				v[t][r] = s
			}
			for h := 0; h < H; h++ {
				var nq, nk float64
				for r := 0; r < d; r++ {
					sq, sk := c(m.qb, h*d+r), c(m.kb, h*d+r)
					for cc := 0; cc < d; cc++ {
						sq += c(m.qw, (h*d+r)*d+cc) * v[t][h*d+cc]
						sk += c(m.kw, (h*d+r)*d+cc) * v[t][h*d+cc]
					}
					q[t][h*d+r], k[t][h*d+r] = sq, sk
					nq += real(sq)*real(sq) + imag(sq)*imag(sq)
					nk += real(sk)*real(sk) + imag(sk)*imag(sk)
				}
				if norm {
					for r := 0; r < d; r++ {
						q[t][h*d+r] /= complex(math.Sqrt(nq), 0)
						k[t][h*d+r] /= complex(math.Sqrt(nk), 0)
					}
				}
			}
		}
		lam := func(h, ch int) complex128 {
			a := float64(m.alpha[h]) * float64(m.alpha[h])
			om := float64(m.omega[h*d/2+ch/2])
			if ch%2 == 1 {
				om = -om
			}
			return complex(-a, om)
		}
		for i := 0; i < T; i++ {
			zplus := make([]complex128, H*d)
			for h := 0; h < H; h++ {
				a := float64(m.alpha[h]) * float64(m.alpha[h])
				s2, e2 := float64(m.sigma[h])*float64(m.sigma[h]), float64(m.eta[h])*float64(m.eta[h])
				w := make([]float64, i+1)
				var sum float64
				for j := 0; j <= i; j++ {
					tau := float64(i-j) * dt
					E := math.Exp(-a * tau)
					kap := -math.Expm1(-2*a*tau) / (2 * a)
					if paper {
						kap = (1 - E*E + eps) / (2*a + eps)
					}
					var r2 float64
					for ch := 0; ch < d; ch++ {
						diff := q[i][h*d+ch] - cmplx.Exp(lam(h, ch)*complex(tau, 0))*k[j][h*d+ch]
						r2 += real(diff)*real(diff) + imag(diff)*imag(diff)
					}
					w[j] = math.Pow(s2*kap+e2*E*E+r2+eps, -float64(m.taus[h]))
					sum += w[j]
				}
				zbar := make([]complex128, d)
				for j := 0; j <= i; j++ {
					aij := w[j] / sum
					tau := float64(i-j) * dt
					A[((b*H+h)*T+i)*T+j] = aij
					Ahat[((b*H+h)*T+i)*T+j] = aij * math.Exp(-a*tau)
					for ch := 0; ch < d; ch++ {
						zbar[ch] += complex(aij, 0) * cmplx.Exp(lam(h, ch)*complex(tau, 0)) * v[j][h*d+ch]
					}
				}
				for ch := 0; ch < d; ch++ {
					s := 1 / (1 + math.Exp(-float64(m.delta[h*d+ch])))
					mixed := complex(1-s, 0)*v[i][h*d+ch] + complex(s, 0)*zbar[ch]
					zplus[h*d+ch] = cmplx.Exp(lam(h, ch)*complex(dt, 0)) * mixed
				}
			}
			out := readout(zplus)
			copy(y[(b*T+i)*De:], out)
			p := back(out)
			pred[(b*T+i)*2], pred[(b*T+i)*2+1] = p[0], p[1]
		}
		for j := 0; j <= pi; j++ {
			z := make([]complex128, H*d)
			for h := 0; h < H; h++ {
				for ch := 0; ch < d; ch++ {
					z[h*d+ch] = cmplx.Exp(lam(h, ch)*complex(float64(pi-j)*dt, 0)) * v[j][h*d+ch]
				}
			}
			p := back(readout(z))
			pulled[(b*(pi+1)+j)*2], pulled[(b*(pi+1)+j)*2+1] = p[0], p[1]
		}
	}
	return y, pred, A, Ahat, pulled
}

func toyRel(got []float32, ref []float64) float64 {
	var md, mr float64
	for i, r := range ref {
		md = math.Max(md, math.Abs(float64(got[i])-r))
		mr = math.Max(mr, math.Abs(r))
	}
	return md / mr
}

// The toy pass (afa.go's factorized attention on embedded inputs) equals
// the per-pair statement of Algorithm 1 evaluated directly (notes §G.2,
// "factorized equals naive"), for both kernel forms and with normalized
// queries and keys.
func TestAFAToyMatchesPerPairOracle(t *testing.T) {
	for i, opt := range []map[string]any{
		{"dt": 0.1, "epsilon": 1e-5, "kernel_form": "exact", "normalize_qk": false},
		{"dt": 0.3, "epsilon": 1e-3, "kernel_form": "paper", "normalize_qk": true},
	} {
		m := writeToyAFA(t, opt, int64(7+i))
		toy, err := Load(m.dir)
		if err != nil {
			t.Fatal(err)
		}
		const B, T, pi = 2, 9, 5
		rng := rand.New(rand.NewSource(3))
		x32, x64 := make([]float32, B*T*2), make([]float64, B*T*2)
		for k := range x32 {
			x32[k] = float32(3 * rng.NormFloat64())
			x64[k] = float64(x32[k])
		}
		out, err := toy.Forward(x32, B, T)
		if err != nil {
			t.Fatal(err)
		}
		pulled, err := toy.PulledForward(x32, B, T, pi)
		if err != nil {
			t.Fatal(err)
		}
		y, pred, A, Ahat, pref := m.oracle(x64, B, T, pi)
		for _, c := range []struct {
			name string
			got  []float32
			ref  []float64
		}{{"out", out.Out, y}, {"pred", out.Pred, pred}, {"pattern", out.Patterns[0], A}, {"decayed", out.Decayed, Ahat}, {"pulled", pulled, pref}} {
			if r := toyRel(c.got, c.ref); !(r <= 1e-5) {
				t.Errorf("options %v: %s rel. error %.2e", opt, c.name, r)
			}
		}
		// Causality: changing the last input leaves every earlier output.
		x2 := append([]float32(nil), x32...)
		x2[(T-1)*2] += 5
		out2, err := toy.Forward(x2, B, T)
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < (T-1)*m.De; k++ {
			if out2.Out[k] != out.Out[k] {
				t.Fatalf("output %d changed when only the last input changed", k)
			}
		}
	}
}

func TestAFAToyConfigErrors(t *testing.T) {
	base := `"model_type": "afa_toy", "state_dim": 2, "embed_dim": 8, "seq_len": 5, "embedding": "identity"`
	for _, c := range []struct{ cfg, want string }{
		{`{` + base + `, "layer": "mamba"}`, "layer"},
		{`{"model_type": "afa", "layer": "afa"}`, "model_type"},
		{`{` + base + `, "layer": "afa", "num_heads": 1, "head_dim": 6, "qkv_bias": true, "o_bias": true}`, "multiple of 4"},
		{`{` + base + `, "layer": "afa", "num_heads": 1, "head_dim": 8, "qkv_bias": true, "o_bias": true, "afa": {"qk_source": "input"}}`, "qk_source"},
		{`{` + base + `, "layer": "afa", "num_heads": 1, "head_dim": 8, "qkv_bias": true, "o_bias": true, "afa": {"dt": -1}}`, "afa.dt"},
		{`{` + base + `, "layer": "afa", "num_heads": 1, "head_dim": 8, "qkv_bias": true, "o_bias": true, "afa": {"kernal_form": "exact"}}`, "kernal_form"},
		{`{` + base + `, "layer": "softmax", "softmax": {"num_layers": 2, "num_heads": 3, "ffn_dim": 4, "positional": "sinusoidal"}}`, "must divide"},
		{`{` + base + `, "layer": "softmax", "softmax": {"num_layers": 2, "num_heads": 1, "ffn_dim": 4, "positional": "alibi"}}`, "positional"},
		{`{"model_type": "afa_toy", "state_dim": 2, "embed_dim": 8, "seq_len": 5, "embedding": "pca", "layer": "afa"}`, "embedding"},
	} {
		_, err := parseConfig([]byte(c.cfg))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.cfg, err, c.want)
		}
	}
}

// A checkpoint missing a tensor or holding a misshapen one is refused with
// the tensor's name.
func TestAFAToyLoadErrors(t *testing.T) {
	m := writeToyAFA(t, map[string]any{"dt": 0.1, "epsilon": 1e-5}, 1)
	ts := []checkpoint.Tensor{{Name: "embed.weight", Shape: []int{m.De, 3}, Data: make([]float32, m.De*3)}}
	if err := checkpoint.WriteSafetensors(filepath.Join(m.dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	_, err := Load(m.dir)
	if err == nil || !strings.Contains(err.Error(), "embed.weight") || !strings.Contains(err.Error(), "missing tensors: afa.v_proj.weight_real") {
		t.Errorf("error %v", err)
	}
	toy := &Filter{Config: Config{StateDim: 2}}
	if _, err := toy.Forward(make([]float32, 5), 1, 3); err == nil {
		t.Error("input of the wrong length accepted")
	}
}

func TestSinusoidalEncoding(t *testing.T) {
	pe := SinusoidalEncoding(3, 4)
	want := []float64{0, 1, 0, 1, math.Sin(1), math.Cos(1), math.Sin(0.01), math.Cos(0.01), math.Sin(2), math.Cos(2), math.Sin(0.02), math.Cos(0.02)}
	for i, w := range want {
		if math.Abs(float64(pe[i])-w) > 1e-7 {
			t.Errorf("pe[%d] = %v, want %v", i, pe[i], w)
		}
	}
}
