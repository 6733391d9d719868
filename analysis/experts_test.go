package analysis

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// moeModel is a small random Mixtral (4 experts, 2 per token).
func moeModel(t *testing.T) *model.Model {
	t.Helper()
	cfg, err := model.SmallConfig("mixtral", model.Size{Layers: 3, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 97, MaxPos: 256})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := model.Generate(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestExpertsMatchesCapture: the loads are the captured selections
// counted, shares summing to 1 over all tokens, first tokens and the rest;
// the mean entropy and margin are those of the captured logits' softmax;
// sequences that begin with the same token route it alike in every layer
// (position 0 sees itself only), so the first tokens' top-1 agrees and
// their load sits on k experts, 1/k each; the mean weights times the
// assignments add up to one per token (renormalised); passes of 2 sequences give the
// report of one pass of all.
func TestExpertsMatchesCapture(t *testing.T) {
	m := moeModel(t)
	const S, T = 6, 10
	ids := make([][]int, S)
	for s := range ids {
		ids[s] = make([]int, T)
		ids[s][0] = 7
		for i := 1; i < T; i++ {
			ids[s][i] = (s*31 + i*13 + i*i) % m.Vocab
		}
	}
	rep, err := Experts(m, ids, ExpertOptions{PerToken: true})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	cap := hs.Capture("blocks.*.mlp.hook_expert_indices", "blocks.*.mlp.hook_router_logits")
	if _, err := m.Forward(ids, model.Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	E, K := m.MoE.Experts, m.MoE.TopK
	if L := m.Config.Layers; len(rep.Layers) != L || len(rep.Loads) != L*E || len(rep.Tokens) != L*S*T {
		t.Fatalf("%d layer rows, %d load rows, %d token rows; want %d, %d, %d", len(rep.Layers), len(rep.Loads), len(rep.Tokens), L, L*E, L*S*T)
	}
	for l, lr := range rep.Layers {
		idx := cap.Get(hooks.Name(hooks.MLPExpertIndices, l)).Data().([]float32)
		z := cap.Get(hooks.Name(hooks.MLPRouterLogits, l)).Data().([]float32)
		count := make([]int64, E)
		for _, v := range idx {
			count[int(v)]++
		}
		var sums [3]float64
		firstOn, weights := 0, 0.0
		for e := 0; e < E; e++ {
			r := rep.Loads[l*E+e]
			if r.Layer != l || r.Expert != e || r.Assignments != count[e] {
				t.Errorf("layer %d expert %d: row %+v, counted %d assignments", l, e, r, count[e])
			}
			sums[0], sums[1], sums[2] = sums[0]+r.Load, sums[1]+r.FirstLoad, sums[2]+r.RestLoad
			if r.Assignments > 0 {
				weights += r.MeanWeight * float64(r.Assignments)
			}
			if r.FirstLoad > 0 {
				firstOn++
				if math.Abs(r.FirstLoad-1/float64(K)) > 1e-12 {
					t.Errorf("layer %d expert %d: first-token load %v, want 1/k", l, e, r.FirstLoad)
				}
			}
		}
		for i, s := range sums {
			if math.Abs(s-1) > 1e-12 {
				t.Errorf("layer %d: loads (%d) sum to %v", l, i, s)
			}
		}
		if math.Abs(weights-S*T) > 1e-4 { // Mixtral's k weights sum to 1 per token
			t.Errorf("layer %d: the routing weights sum to %v over %d tokens", l, weights, S*T)
		}
		if firstOn != K || lr.FirstAgree != 1 {
			t.Errorf("layer %d: the same first token went to %d experts, top-1 agreement %v", l, firstOn, lr.FirstAgree)
		}
		ent := 0.0
		for r := 0; r < S*T; r++ {
			p, m := make([]float64, E), math.Inf(-1)
			for e := 0; e < E; e++ {
				m = math.Max(m, float64(z[r*E+e]))
			}
			sum := 0.0
			for e := range p {
				p[e] = math.Exp(float64(z[r*E+e]) - m)
				sum += p[e]
			}
			for e := range p {
				ent -= p[e] / sum * math.Log(p[e]/sum)
			}
		}
		if got, want := lr.Entropy, ent/(S*T); math.Abs(got-want) > 1e-9 || got > math.Log(float64(E)) {
			t.Errorf("layer %d: mean entropy %v, want %v (≤ ln E)", l, got, want)
		}
		if lr.Margin < 0 || lr.Margin > 1 || lr.Tokens != S*T {
			t.Errorf("layer %d: margin %v, tokens %d", l, lr.Margin, lr.Tokens)
		}
	}
	batched, err := Experts(m, ids, ExpertOptions{PerToken: true, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, pair := range [][2]any{{rep.Loads, batched.Loads}, {rep.Layers, batched.Layers}, {rep.Tokens, batched.Tokens}} {
		if a, b := fmt.Sprint(pair[0]), fmt.Sprint(pair[1]); a != b {
			t.Errorf("table %d differs in passes of 2 sequences from one pass:\n%.300s\n%.300s", i, b, a)
		}
	}
}

// TestExpertsRefused: a dense model and an unknown margin are refused.
func TestExpertsRefused(t *testing.T) {
	cfg, err := model.SmallConfig("qwen3", model.Size{Layers: 1, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 97, MaxPos: 64})
	if err != nil {
		t.Fatal(err)
	}
	dense, _, err := model.Generate(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	ids := [][]int{{1, 2, 3}}
	if _, err := Experts(dense, ids, ExpertOptions{}); err == nil || !strings.Contains(err.Error(), "no mixture-of-experts layers") {
		t.Errorf("dense model: error %v", err)
	}
	if _, err := Experts(moeModel(t), ids, ExpertOptions{Margin: "gap"}); err == nil || !strings.Contains(err.Error(), `margin "gap"`) {
		t.Errorf("margin gap: error %v", err)
	}
	rep, err := Experts(moeModel(t), ids, ExpertOptions{Margin: results.MarginLogit})
	if err != nil {
		t.Fatal(err)
	}
	for _, lr := range rep.Layers {
		if lr.Margin < 0 {
			t.Errorf("layer %d: logit margin %v < 0", lr.Layer, lr.Margin)
		}
	}
}
