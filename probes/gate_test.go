package probes_test

import (
	"math"
	"strings"
	"testing"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// gatedModel generates a small Qiu-style gated checkpoint (headwise or
// elementwise gate; bias on q, k, v and the gate rows when bias is set).
func gatedModel(t *testing.T, gate model.GateKind, bias bool) *model.Model {
	t.Helper()
	cfg, err := model.SmallConfig(model.ArchGated, model.Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 97, MaxPos: 128})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Gate, cfg.QKVBias = gate, bias
	m, _, err := model.Generate(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// forwardGate runs m with the gate override g registered on hs (a new set
// when hs is nil) before anything the caller adds to hs afterwards; a nil g
// is Forward.
func forwardGate(m *model.Model, ids [][]int, opt model.Options, g *probes.GateOverride) (*model.Output, error) {
	if g != nil {
		hs := opt.Hooks
		if hs == nil {
			hs = &hooks.Set{}
		}
		if err := g.Register(hs, &m.Config, len(ids), len(ids[0])); err != nil {
			return nil, err
		}
		opt.Hooks = hs
	}
	return m.Forward(ids, opt)
}

func gateIDs(B, T, vocab int) [][]int {
	ids := make([][]int, B)
	for b := range ids {
		ids[b] = make([]int, T)
		for t := range ids[b] {
			ids[b][t] = (b*31 + t*7 + t*t*3) % vocab
		}
	}
	return ids
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	if model.BLAS() == "openblas" {
		// OpenBLAS picks its kernels by matrix shape, so tile sizes and
		// head stacking change the last bits of the products: compare
		// within float32 rounding there (the default build's kernels sum
		// every output in the same order whatever the shape: bit for bit).
		var d, ref float64
		for i := range got {
			d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
			ref = math.Max(ref, math.Abs(float64(want[i])))
		}
		if d > 1e-5*ref {
			t.Fatalf("%s: max|Δ| = %.3g, %.3g of max|want| (OpenBLAS build: want ≤ 1e-5)", what, d, d/ref)
		}
		return
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: value %d is %v, want %v (bit for bit)", what, i, got[i], want[i])
		}
	}
}

// TestGateOverrideLearnedIsIdentity: an override that returns the learned
// gate gives the plain pass's logits bit for bit, for every tile size and
// thread count (the statistics consumer only observes), and a nil override
// is Forward.
func TestGateOverrideLearnedIsIdentity(t *testing.T) {
	m := gatedModel(t, model.GateHeadwise, false)
	ids := gateIDs(2, 70, m.Vocab)
	ref, err := m.Forward(ids, model.Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []model.Options{{Logits: true}, {Logits: true, TileRows: 7, Threads: 3}, {Logits: true, TileRows: 1, Threads: 1}} {
		calls := 0
		out, err := forwardGate(m, ids, opt, probes.RowGate(func(r probes.GateRow) float64 { calls++; return r.Learned }))
		if err != nil {
			t.Fatal(err)
		}
		sameBits(t, "learned-gate override", out.Logits, ref.Logits)
		if want := m.Config.Layers * 2 * 70 * m.Heads; calls != want {
			t.Fatalf("GateFunc called %d times, want layers·B·T·H = %d", calls, want)
		}
	}
	out, err := forwardGate(m, ids, model.Options{Logits: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "nil override", out.Logits, ref.Logits)
}

// TestGateOverrideConstOne: gate = 1 equals, bit for bit, (a) the same
// checkpoint with its gate weights set to 0 and its gate biases to +100
// (sigmoid(100) is 1 in float32), and (b) the plain pass with every head's
// gate set to 1 at hook_gate; for headwise and elementwise gates. A
// constant 0.5 is what hook_gate then sees.
func TestGateOverrideConstOne(t *testing.T) {
	for _, kind := range []model.GateKind{model.GateHeadwise, model.GateElementwise} {
		t.Run(string(kind), func(t *testing.T) {
			m := gatedModel(t, kind, true)
			ids := gateIDs(2, 45, m.Vocab)
			got, err := forwardGate(m, ids, model.Options{Logits: true, TileRows: 8}, probes.ConstGate(1))
			if err != nil {
				t.Fatal(err)
			}

			open := *m
			open.Layers = append([]model.Layer(nil), m.Layers...)
			for l := range open.Layers {
				L := &open.Layers[l]
				L.Wg = model.Weight{Rows: L.Wg.Rows, Cols: L.Wg.Cols, DType: "F32", F32: make([]float32, L.Wg.Rows*L.Wg.Cols)}
				L.Bg = make([]float32, len(L.Bg))
				for i := range L.Bg {
					L.Bg[i] = 100
				}
			}
			want, err := open.Forward(ids, model.Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			sameBits(t, "gate = 1 vs gate logits +100", got.Logits, want.Logits)

			hs := &hooks.Set{}
			for h := 0; h < m.Heads; h++ {
				hs.Add("blocks.*.attn.hook_gate", hooks.SetHead(h, 1))
			}
			viaHook, err := m.Forward(ids, model.Options{Logits: true, Hooks: hs})
			if err != nil {
				t.Fatal(err)
			}
			sameBits(t, "gate = 1 vs hook_gate set to 1", got.Logits, viaHook.Logits)

			plain, _ := m.Forward(ids, model.Options{Logits: true})
			if plain.Logits[len(plain.Logits)-1] == got.Logits[len(got.Logits)-1] {
				t.Fatalf("removing the gate left the logits unchanged: the test cannot see the override")
			}

			hs = &hooks.Set{}
			if err := probes.ConstGate(0.5).Register(hs, &m.Config, len(ids), len(ids[0])); err != nil {
				t.Fatal(err)
			}
			cp := hs.Capture("blocks.*.attn.hook_gate")
			if _, err := m.Forward(ids, model.Options{Hooks: hs}); err != nil {
				t.Fatal(err)
			}
			for _, name := range cp.Names() {
				for i, g := range cp.Get(name).Data().([]float32) {
					if g != 0.5 {
						t.Fatalf("%s[%d] = %v under a constant 0.5 override", name, i, g)
					}
				}
			}
		})
	}
}

// TestGateOverrideStats: the n_eff and S̄ a GateFunc receives equal the
// probes package's n_eff = 1/Σα² (probes.NEff) and two-pass mean S
// (probes.Moments) computed from the hook_pattern and hook_v captured in
// the same pass (query head h reads KV head h/(H/KV)); the learned value is
// the gate hook_gate shows when the override returns it unchanged.
func TestGateOverrideStats(t *testing.T) {
	m := gatedModel(t, model.GateHeadwise, false)
	const B, T = 2, 53
	ids := gateIDs(B, T, m.Vocab)
	H, KV, dh := m.Heads, m.KVHeads, m.DHead
	rows := make([]probes.GateRow, 0, m.Config.Layers*B*T*H)
	hs := &hooks.Set{}
	cp := hs.Capture("blocks.*.attn.hook_pattern", "blocks.*.attn.hook_v", "blocks.*.attn.hook_gate")
	if _, err := forwardGate(m, ids, model.Options{Hooks: hs, TileRows: 16}, probes.RowGate(func(r probes.GateRow) float64 {
		rows = append(rows, r)
		return r.Learned
	})); err != nil {
		t.Fatal(err)
	}
	if len(rows) != m.Config.Layers*B*T*H {
		t.Fatalf("%d rows, want %d", len(rows), m.Config.Layers*B*T*H)
	}
	e, S := make([]float64, dh), make([]float64, dh)
	maxRel := 0.0
	for i, r := range rows {
		l, b, q, h := r.Layer, r.Batch, r.Query, r.Head
		if want := ((l*B+b)*T+q)*H + h; i != want {
			t.Fatalf("row %d is (layer %d, batch %d, query %d, head %d): not in (layer, batch, query, head) order", i, l, b, q, h)
		}
		pat := cp.Get(hooks.Name("blocks.{l}.attn.hook_pattern", l)).Data().([]float32)
		v := cp.Get(hooks.Name("blocks.{l}.attn.hook_v", l)).Data().([]float32)
		alpha := pat[((b*H+h)*T+q)*T:][:q+1]
		kv := h / (H / KV)
		probes.Moments(e, S, alpha, func(j int) []float32 { return v[((b*T+j)*KV+kv)*dh:][:dh] }, probes.TwoPass)
		wantN, wantS := probes.NEff(alpha), probes.Mean(S)
		if d := math.Abs(r.NEff-wantN) / wantN; d > 1e-6 { // Σα² within ~1e-7 (hooks.AttnMoments)
			t.Fatalf("layer %d batch %d query %d head %d: n_eff %v, probes %v", l, b, q, h, r.NEff, wantN)
		}
		d := math.Abs(r.SBar - wantS)
		if d > 1e-5*wantS+1e-14 { // hooks.AttnMoments: S within ~1e-5 of two passes
			t.Fatalf("layer %d batch %d query %d head %d: S̄ %v, probes (two-pass) %v", l, b, q, h, r.SBar, wantS)
		}
		if wantS > 0 {
			maxRel = max(maxRel, d/wantS)
		}
		g := cp.Get(hooks.Name("blocks.{l}.attn.hook_gate", l)).Data().([]float32)[(b*T+q)*H+h]
		if r.Learned != float64(g) {
			t.Fatalf("layer %d batch %d query %d head %d: learned %v, hook_gate %v", l, b, q, h, r.Learned, g)
		}
	}
	t.Logf("max relative S̄ difference to probes' two-pass value: %.2e", maxRel)
	if rows[0].NEff != 1 || rows[0].SBar > 1e-20 {
		t.Fatalf("query 0 (one key): n_eff %v, S̄ %v; want 1 and 0 (up to rounding)", rows[0].NEff, rows[0].SBar)
	}
}

// TestGateOverrideRefusals: models without a gate, non-finite constants
// and non-finite function values are errors that say what is wrong.
func TestGateOverrideRefusals(t *testing.T) {
	cfg, err := model.SmallConfig(model.ArchQwen3, model.Size{Layers: 1, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 97, MaxPos: 128})
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := model.Generate(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	ids := gateIDs(1, 9, 97)
	if _, err := forwardGate(plain, ids, model.Options{}, probes.ConstGate(1)); err == nil || !strings.Contains(err.Error(), "output gate") {
		t.Fatalf("ungated model: err = %v, want a refusal naming the output gate", err)
	}
	m := gatedModel(t, model.GateHeadwise, false)
	if _, err := forwardGate(m, ids, model.Options{}, probes.ConstGate(math.Inf(1))); err == nil {
		t.Fatal("constant +Inf gate accepted")
	}
	_, err = forwardGate(m, ids, model.Options{}, probes.RowGate(func(r probes.GateRow) float64 {
		if r.Layer == 1 && r.Head == 2 && r.Query == 4 {
			return math.NaN()
		}
		return 1
	}))
	if err == nil || !strings.Contains(err.Error(), "layer 1 head 2 at batch 0 query 4") {
		t.Fatalf("NaN gate: err = %v, want the layer, head and query named", err)
	}
}
