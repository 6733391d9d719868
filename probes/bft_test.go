package probes

import (
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

func bftModel(t *testing.T, edit func(*model.BFTConfig)) *model.Model {
	t.Helper()
	cfg, err := model.SmallConfig(model.ArchBFT, model.Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 53, MaxPos: 128})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg.BFT)
	}
	m, _, err := model.Generate(cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func bftIDs(B, T, V int) [][]int {
	ids := make([][]int, B)
	for b := range ids {
		for t := 0; t < T; t++ {
			ids[b] = append(ids[b], (7*b+13*t+t*t)%V)
		}
	}
	return ids
}

// TestBFTKrigingWeightsRemark1: Eq. 2 applied to α = softmax(s) equals
// softmax(s + log λ̄) (Remark 1).
func TestBFTKrigingWeightsRemark1(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n < 40; n += 7 {
		s := make([]float64, n)
		lb := make([]float64, n)
		alpha := make([]float32, n)
		var z, zb float64
		for j := range s {
			s[j], lb[j] = rng.NormFloat64(), math.Exp(rng.NormFloat64())
			z += math.Exp(s[j])
			zb += math.Exp(s[j] + math.Log(lb[j]))
		}
		for j := range s {
			alpha[j] = float32(math.Exp(s[j]) / z)
		}
		got := make([]float64, n)
		BFTKrigingWeights(got, alpha, lb)
		for j := range s {
			want := math.Exp(s[j]+math.Log(lb[j])) / zb
			if math.Abs(got[j]-want) > 1e-6*want+1e-12 {
				t.Fatalf("n=%d j=%d: Eq. 2 %v, Remark 1 %v", n, j, got[j], want)
			}
		}
	}
	if b := BFTObservationBound(1, 1, 1.0/128); b != 256 {
		t.Fatalf("λobs bound at n_eff = 1, d_head 128: %v, want 2·d_head = 256 (§3.1)", b)
	}
}

// TestBFTRecorderAndCollector runs a BFT model with the standard Collector
// streamed and a BFTRecorder: the Collector's per-dimension λobs (Eq. 6 on
// the streamed α̃ and v, defaults ν = 1, σ0² = 1/d_head) is the layer's own
// λobs; the gate the Collector records through hook_gate is the layer's
// K; the recorded λ” is Eq. 9 of the recorded λ', J and Q.
func TestBFTRecorderAndCollector(t *testing.T) {
	m := bftModel(t, func(b *model.BFTConfig) { b.LambdaMax = 0 })
	B, T := 2, 24
	c := &m.Config
	col, err := NewCollector(B, c.Layers, c.Heads, T, c.DHead, CollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := NewBFTRecorder(B, c.Layers, c.Heads, T, c.DHead)
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	hs.Stream(-1, col)
	rec.Register(hs)
	cap := hs.Capture("blocks.*.bft.hook_lambda_post", "blocks.*.bft.hook_jacobian", "blocks.*.bft.hook_lambda_pred",
		"blocks.*.bft.hook_q_noise", "blocks.*.bft.hook_gain")
	for l := 0; l < c.Layers; l++ {
		l := l
		hs.Add(hooks.Name("blocks.{l}.attn.hook_gate", l), func(_ string, _ int, x *tensor.Dense) error {
			return col.SetLayerGates(l, x.Data().([]float32), c.DHead)
		})
	}
	if _, err := m.Forward(bftIDs(B, T, c.Vocab), model.Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i := range rec.LambdaObs {
		worst = math.Max(worst, math.Abs(float64(col.LambdaObsDimMean[i])-rec.LambdaObs[i])/rec.LambdaObs[i])
		if g := float64(col.Gate[i]); math.Abs(g-rec.K[i]) > 1e-6 {
			t.Fatalf("cell %d: Collector gate %v, recorded K %v", i, g, rec.K[i])
		}
	}
	if worst > 1e-5 {
		t.Fatalf("Collector λobs (Eq. 6 on the streamed α̃) vs the layer's λobs: rel %.3g", worst)
	}
	for l := 0; l < c.Layers; l++ {
		post := cap.Get(hooks.Name("blocks.{l}.bft.hook_lambda_post", l)).Data().([]float32)
		jac := cap.Get(hooks.Name("blocks.{l}.bft.hook_jacobian", l)).Data().([]float32)
		pred := cap.Get(hooks.Name("blocks.{l}.bft.hook_lambda_pred", l)).Data().([]float32)
		q, err := m.BFTProcessNoise(l)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pred {
			want := BFTPredictedPrecision(float64(post[i]), float64(jac[i]), q[i%c.DModel], m.BFT.JacobianEps, false)
			if math.Abs(float64(p)-want) > 1e-5*want {
				t.Fatalf("layer %d [%d]: λ'' %v, Eq. 9 %v", l, i, p, want)
			}
		}
		for h := 0; h < c.Heads; h++ {
			var s float64
			for _, v := range q[h*c.DHead : (h+1)*c.DHead] {
				s += v
			}
			if got := rec.Q[l*c.Heads+h]; math.Abs(got-s/float64(c.DHead)) > 1e-6 {
				t.Fatalf("Q[%d,%d] = %v, want %v", l, h, got, s/float64(c.DHead))
			}
		}
	}
	for i, k := range rec.K {
		if !(k > 0 && k < 1) || math.IsNaN(rec.Ratchet[i]) {
			t.Fatalf("cell %d: K %v, ratchet %v", i, k, rec.Ratchet[i])
		}
	}
	if math.IsNaN(rec.Tau[0]) || rec.Tau[0] <= 0 {
		t.Fatalf("τ not recorded: %v", rec.Tau[0])
	}
}
