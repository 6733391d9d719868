package afatoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/filterlens/probe/analysis/afatab"
	"github.com/filterlens/probe/model"
)

type softmaxWeights struct {
	InW, InB, NormW, NormB, OutW, OutB []float32
	Layers                             []softmaxLayer
}

type softmaxLayer struct {
	LN1W, LN1B, LN2W, LN2B []float32
	Wq, Bq, Wk, Bk, Wv, Bv []float32
	Wo, Bo                 []float32
	W1, B1, W2, B2         []float32
}

// parseSoftmax reads the "softmax" object of a baseline's config.json,
// refusing unknown fields.
func parseSoftmax(c *Config, v json.RawMessage) error {
	var s struct {
		Layers     *int     `json:"num_layers"`
		Heads      *int     `json:"num_heads"`
		FFN        *int     `json:"ffn_dim"`
		Positional *string  `json:"positional"`
		RoPETheta  *float64 `json:"rope_theta"`
		LNEps      *float64 `json:"layer_norm_eps"`
	}
	if len(v) > 0 {
		if err := strictJSON(v, &s); err != nil {
			return fmt.Errorf("field softmax: %v", err)
		}
	}
	if s.Layers == nil || s.Heads == nil || s.FFN == nil || s.Positional == nil {
		return fmt.Errorf("field softmax needs num_layers, num_heads, ffn_dim and positional")
	}
	sm := &c.Softmax
	*sm = afatab.SoftmaxConfig{Layers: *s.Layers, Heads: *s.Heads, FFN: *s.FFN, Positional: *s.Positional, RoPETheta: 10000, LNEps: 1e-5}
	if p := sm.Positional; p != "sinusoidal" && p != "rope" && p != "none" {
		return fmt.Errorf("field softmax.positional = %q is not one of [sinusoidal rope none]", p)
	}
	if s.RoPETheta != nil {
		sm.RoPETheta = *s.RoPETheta
	}
	if s.LNEps != nil {
		sm.LNEps = *s.LNEps
	}
	if sm.Layers < 1 || sm.Heads < 1 || sm.FFN < 1 || c.EmbedDim%sm.Heads != 0 {
		return fmt.Errorf("field softmax: num_layers %d, num_heads %d (must divide embed_dim %d), ffn_dim %d must be ≥ 1",
			sm.Layers, sm.Heads, c.EmbedDim, sm.FFN)
	}
	if sm.Positional == "rope" && (c.EmbedDim/sm.Heads)%2 != 0 {
		return fmt.Errorf("field softmax.positional = \"rope\" needs an even head width, have %d", c.EmbedDim/sm.Heads)
	}
	if !(sm.RoPETheta > 0) || !(sm.LNEps >= 0) {
		return fmt.Errorf("field softmax: rope_theta %v must be > 0 and layer_norm_eps %v ≥ 0", sm.RoPETheta, sm.LNEps)
	}
	return nil
}

func (m *Filter) readSoftmax(rd *reader) {
	c := &m.Config
	D, F := c.EmbedDim, c.Softmax.FFN
	w := &softmaxWeights{Layers: make([]softmaxLayer, c.Softmax.Layers)}
	w.InW, w.InB = rd.get("in_proj.weight", D, D), rd.get("in_proj.bias", D)
	for l := range w.Layers {
		L := &w.Layers[l]
		p := fmt.Sprintf("layers.%d.", l)
		L.LN1W, L.LN1B = rd.get(p+"ln1.weight", D), rd.get(p+"ln1.bias", D)
		L.LN2W, L.LN2B = rd.get(p+"ln2.weight", D), rd.get(p+"ln2.bias", D)
		L.Wq, L.Bq = rd.get(p+"attn.q_proj.weight", D, D), rd.get(p+"attn.q_proj.bias", D)
		L.Wk, L.Bk = rd.get(p+"attn.k_proj.weight", D, D), rd.get(p+"attn.k_proj.bias", D)
		L.Wv, L.Bv = rd.get(p+"attn.v_proj.weight", D, D), rd.get(p+"attn.v_proj.bias", D)
		L.Wo, L.Bo = rd.get(p+"attn.o_proj.weight", D, D), rd.get(p+"attn.o_proj.bias", D)
		L.W1, L.B1 = rd.get(p+"mlp.fc1.weight", F, D), rd.get(p+"mlp.fc1.bias", F)
		L.W2, L.B2 = rd.get(p+"mlp.fc2.weight", D, F), rd.get(p+"mlp.fc2.bias", D)
	}
	w.NormW, w.NormB = rd.get("norm.weight", D), rd.get("norm.bias", D)
	w.OutW, w.OutB = rd.get("out_proj.weight", D, D), rd.get("out_proj.bias", D)
	m.sm = w
}

// SinusoidalEncoding returns Vaswani et al.'s additive position encoding
// [T, D]: pe[p, 2k] = sin(p/10000^{2k/D}), pe[p, 2k+1] = cos(p/10000^{2k/D}),
// evaluated in float64.
func SinusoidalEncoding(T, D int) []float32 {
	pe := make([]float32, T*D)
	for p := 0; p < T; p++ {
		for k := 0; 2*k < D; k++ {
			a := float64(p) / math.Pow(10000, float64(2*k)/float64(D))
			pe[p*D+2*k] = float32(math.Sin(a))
			if 2*k+1 < D {
				pe[p*D+2*k+1] = float32(math.Cos(a))
			}
		}
	}
	return pe
}

// ropeRotateHalf applies rotate-half RoPE to rows of width dh (one head
// slice per position, stride between positions) in place: angle
// p·θ^{−2k/dh} on the pair (k, k + dh/2).
func ropeRotateHalf(x []float32, T, dh, stride int, theta float64) {
	half := dh / 2
	for p := 0; p < T; p++ {
		row := x[p*stride : p*stride+dh]
		for k := 0; k < half; k++ {
			s, c := math.Sincos(float64(p) * math.Pow(theta, -float64(2*k)/float64(dh)))
			a, b := float64(row[k]), float64(row[k+half])
			row[k], row[k+half] = float32(a*c-b*s), float32(b*c+a*s)
		}
	}
}

func addTo(dst, x []float32) {
	for i, v := range x {
		dst[i] += v
	}
}

// forwardSoftmax is the Fig. 3 baseline (see the package comment).
func (m *Filter) forwardSoftmax(e []float32, B, T int) (*Output, error) {
	c, w := &m.Config, m.sm
	D, H, F := c.EmbedDim, c.Softmax.Heads, c.Softmax.FFN
	dh, n := D/H, B*T
	h := make([]float32, n*D)
	model.Linear(h, e, n, D, w.InW, D, w.InB)
	if c.Softmax.Positional == "sinusoidal" {
		pe := SinusoidalEncoding(T, D)
		for b := 0; b < B; b++ {
			addTo(h[b*T*D:(b+1)*T*D], pe)
		}
	}
	u := make([]float32, n*D)
	q, k, v, z := make([]float32, n*D), make([]float32, n*D), make([]float32, n*D), make([]float32, n*D)
	f, o := make([]float32, n*F), make([]float32, n*D)
	res := &Output{Batch: B, T: T, Heads: H}
	scale := 1 / math.Sqrt(float64(dh))
	row := make([]float64, T)
	for l := range w.Layers {
		L := &w.Layers[l]
		model.LayerNorm(u, h, D, L.LN1W, L.LN1B, c.Softmax.LNEps)
		model.Linear(q, u, n, D, L.Wq, D, L.Bq)
		model.Linear(k, u, n, D, L.Wk, D, L.Bk)
		model.Linear(v, u, n, D, L.Wv, D, L.Bv)
		if c.Softmax.Positional == "rope" {
			for b := 0; b < B; b++ {
				for hh := 0; hh < H; hh++ {
					ropeRotateHalf(q[b*T*D+hh*dh:], T, dh, D, c.Softmax.RoPETheta)
					ropeRotateHalf(k[b*T*D+hh*dh:], T, dh, D, c.Softmax.RoPETheta)
				}
			}
		}
		pat := make([]float32, B*H*T*T)
		clear(z)
		for b := 0; b < B; b++ {
			for hh := 0; hh < H; hh++ {
				for i := 0; i < T; i++ {
					qi := q[(b*T+i)*D+hh*dh:][:dh]
					mx := math.Inf(-1)
					for j := 0; j <= i; j++ {
						kj := k[(b*T+j)*D+hh*dh:][:dh]
						var s float64
						for x := range qi {
							s += float64(qi[x]) * float64(kj[x])
						}
						row[j] = s * scale
						mx = max(mx, row[j])
					}
					var sum float64
					for j := 0; j <= i; j++ {
						row[j] = math.Exp(row[j] - mx)
						sum += row[j]
					}
					pr := pat[((b*H+hh)*T+i)*T:][:T]
					zi := z[(b*T+i)*D+hh*dh:][:dh]
					acc := make([]float64, dh)
					for j := 0; j <= i; j++ {
						a := row[j] / sum
						pr[j] = float32(a)
						vj := v[(b*T+j)*D+hh*dh:][:dh]
						for x := range acc {
							acc[x] += a * float64(vj[x])
						}
					}
					for x := range zi {
						zi[x] = float32(acc[x])
					}
				}
			}
		}
		res.Patterns = append(res.Patterns, pat)
		model.Linear(o, z, n, D, L.Wo, D, L.Bo)
		addTo(h, o)
		model.LayerNorm(u, h, D, L.LN2W, L.LN2B, c.Softmax.LNEps)
		model.Linear(f, u, n, D, L.W1, F, L.B1)
		for i, x := range f {
			f[i] = max(x, 0)
		}
		model.Linear(o, f, n, F, L.W2, D, L.B2)
		addTo(h, o)
		if i := firstNonFinite(h); i >= 0 {
			return nil, fmt.Errorf("afatoy: %s: non-finite value %v after softmax layer %d at batch %d position %d", m.Dir, h[i], l, i/D/T, (i/D)%T)
		}
	}
	model.LayerNorm(u, h, D, w.NormW, w.NormB, c.Softmax.LNEps)
	res.Out = make([]float32, n*D)
	model.Linear(res.Out, u, n, D, w.OutW, D, w.OutB)
	return res, nil
}

// strictJSON decodes v into dst, refusing unknown fields (a misspelt
// option must not be ignored).
func strictJSON(v json.RawMessage, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	return dec.Decode(dst)
}
