package model

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/hooks"
	"gorgonia.org/tensor"
)

// TestPointAxes: every axis name in hooks.Points is one axisSizes knows, so
// that checkIssuedHooks checks every axis of every documented shape.
func TestPointAxes(t *testing.T) {
	m := &Model{Config: Config{DeltaNet: &DeltaNetConfig{}, MoE: &MoEConfig{}, SSM: &SSMConfig{}}}
	known := axisSizes(&m.Config, 1, 1)
	for _, p := range hooks.Points {
		for _, shape := range hooks.Shapes(hooks.Name(p.Name, 0)) {
			for _, axis := range shape {
				if _, ok := known[axis]; !ok {
					t.Errorf("%s documents axis %q, which the hook test does not know", p.Name, axis)
				}
			}
		}
	}
}

// checkIssuedHooks runs m on B×T tokens with every point it issues
// captured, and checks each against the registry: the name is registered,
// and the value has one of the documented shapes, every axis of the size
// its name says (axisSizes).
func checkIssuedHooks(t *testing.T, m *Model) {
	t.Helper()
	names, err := m.HookNames()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no hook points issued")
	}
	const B, T = 2, 5
	hs := &hooks.Set{}
	cap := hs.Capture(names...)
	if _, err := m.Forward(seqs(B, T, m.Vocab), Options{Hooks: hs, Logits: true}); err != nil {
		t.Fatal(err)
	}
	known := axisSizes(&m.Config, B, T)
	for _, n := range names {
		shapes := hooks.Shapes(n)
		if shapes == nil {
			t.Errorf("%s issues %q, which is not in hooks.Points", m.Arch, n)
			continue
		}
		x := cap.Get(n)
		if x == nil {
			t.Errorf("%s: %q listed by HookNames but not captured", m.Arch, n)
			continue
		}
		got := x.Shape()
		ok := false
		for _, want := range shapes {
			if len(want) != len(got) {
				continue
			}
			ok = true
			for i, axis := range want {
				if v, isKnown := known[axis]; !isKnown || got[i] != v {
					ok = false
				}
			}
			if ok {
				break
			}
		}
		if !ok {
			t.Errorf("%s: %q has shape %v, documented %v", m.Arch, n, got, shapes)
		}
		// PointBytes: what capturing it keeps (an upper bound where
		// several shapes are documented)
		bytes := int64(4 * len(x.Data().([]float32)))
		if pb := m.PointBytes(n, B, T); pb < bytes || len(shapes) == 1 && pb != bytes {
			t.Errorf("%s: PointBytes(%q) = %d, captured %d bytes (%d documented shapes)", m.Arch, n, pb, bytes, len(shapes))
		}
	}
}

// TestEveryFamilyHooks round-trips a random checkpoint of every family
// that can be generated through generate → write → load, and checks every
// hook point it issues against the registry; RFA, which cannot be
// generated, runs on its golden case.
func TestEveryFamilyHooks(t *testing.T) {
	for _, f := range families {
		if f.small == nil {
			continue
		}
		t.Run(string(f.arch), func(t *testing.T) {
			heads, kv := 4, 2
			if f.arch == ArchSelRoPE {
				kv = heads // no grouped-query attention
			}
			cfg, err := SmallConfig(f.arch, Size{Layers: 4, DModel: 32, Heads: heads, KVHeads: kv, Vocab: 61, MaxPos: 64})
			if err != nil {
				t.Fatal(err)
			}
			gen, dir := writeGenerated(t, cfg, 3)
			m, err := Load(dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if m.Arch != f.arch {
				t.Fatalf("wrote %s, loaded %s", f.arch, m.Arch)
			}
			ids := seqs(1, 9, m.Vocab)
			a, err := gen.Forward(ids, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			b, err := m.Forward(ids, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			if rel, i := relErr(b.Logits, a.Logits); rel != 0 {
				t.Errorf("loaded model's logits differ from the generated one's by %.3g at %d", rel, i)
			}
			checkIssuedHooks(t, m)
		})
	}
	t.Run(string(ArchRFA), func(t *testing.T) {
		m, err := Load(filepath.Join(goldenDir, "rfa_m1"), LoadOptions{})
		if err != nil {
			t.Skipf("golden data not available: %v", err)
		}
		checkIssuedHooks(t, m)
	})
}

// TestUnknownHookRefused: a name the model does not issue fails the pass
// before it runs, naming the closest points or the layers that have it.
func TestUnknownHookRefused(t *testing.T) {
	m := smallModel(t, ArchQwen3)
	for _, c := range []struct{ pattern, want string }{
		{"blocks.2.attn.hook_patern", `closest: blocks.2.attn.hook_pattern`},
		{"blocks.*.bft.hook_gain", `hook "blocks.*.bft.hook_gain" is not issued by this model (qwen3`},
		{"blocks.9.attn.hook_pattern", "only at layers 0, 1"},
		{"blocks.*.attn.hook_gate", "is not issued"},
		{"logit", "closest: logits"},
	} {
		hs := &hooks.Set{}
		c0 := hs.Capture(c.pattern)
		_, err := m.Forward(seqs(1, 4, m.Vocab), Options{Hooks: hs})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.pattern, err, c.want)
		}
		if c0.Get(c.pattern) != nil {
			t.Errorf("%s: captured although refused", c.pattern)
		}
	}
}

// TestValueDimMatchesTiles checks, for every family, that Config.ValueDim
// is the DHead of the tiles its attention streams (the width a consumer
// such as probes.Collector is built for; RFA streams complex values).
func TestValueDimMatchesTiles(t *testing.T) {
	var models []*Model
	for _, arch := range SmallArchs() {
		cfg, err := SmallConfig(arch, Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 4, Vocab: 97, MaxPos: 256})
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := Generate(cfg, 7)
		if err != nil {
			t.Fatal(err)
		}
		models = append(models, m)
	}
	// RFA has no generator: its zoo checkpoint
	rfa, err := Load(filepath.Join("..", "zoo", "checkpoints", "rfa_m1"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	models = append(models, rfa)
	for _, m := range models {
		hs := &hooks.Set{}
		seen := 0
		hs.Stream(-1, consumerFunc(func(a *hooks.AttnTile) error {
			if a.DHead != m.ValueDim() {
				return fmt.Errorf("%s: tile DHead %d, Config.ValueDim %d", m.Arch, a.DHead, m.ValueDim())
			}
			seen++
			return nil
		}))
		if _, err := m.Forward(seqs(1, 9, m.Vocab), Options{Hooks: hs}); err != nil {
			t.Fatal(err)
		}
		if seen == 0 && len(m.SoftmaxLayers()) > 0 {
			t.Errorf("%s: no tile streamed", m.Arch)
		}
	}
}

// TestPassStopsAtLastRead: a pass runs as far as what it reads and no
// further (hooks.Set.Reach), reads the same values a whole pass reads, and
// a watch (progress) takes it no further. Families with their own pass run
// every block.
func TestPassStopsAtLastRead(t *testing.T) {
	after := map[string]bool{hooks.AttnOut: true, hooks.ResidMid: true, hooks.LN2Normalized: true, hooks.MLPPre: true,
		hooks.MLPPost: true, hooks.MLPRouterLogits: true, hooks.MLPExpertIndices: true, hooks.MLPExpertWeights: true,
		hooks.MLPOut: true, hooks.ResidPost: true, hooks.AttnBranchOut: true}
	eachFamily(t, 4, func(t *testing.T, gen func() *Model) {
		m := gen()
		_, own := m.ext.(ownPass)
		names, err := m.HookNames()
		if err != nil {
			t.Fatal(err)
		}
		ids := seqs(1, 7, m.Vocab)
		// run reads target and watches every block point; it returns
		// the captured target and the watched points the pass reached
		run := func(target string, logits bool) (*tensor.Dense, map[string]bool) {
			hs := &hooks.Set{}
			cap := hs.Capture(target)
			reached := map[string]bool{}
			for _, n := range names {
				if strings.HasPrefix(n, "blocks.") {
					hs.Watch(n, func(name string, _ int, _ *tensor.Dense) error {
						reached[name] = true
						return nil
					})
				}
			}
			if _, err := m.Forward(ids, Options{Hooks: hs, Logits: logits}); err != nil {
				t.Fatal(err)
			}
			return cap.Get(target), reached
		}
		for _, l := range []int{0, 2} {
			// the last point of layer l before its heads' output ends
			// (hook_z, or a mixer's last point), and resid_pre of l
			var heads string
			for _, n := range names {
				p := strings.Replace(n, fmt.Sprintf("blocks.%d.", l), "blocks.{l}.", 1)
				if p != n && !after[p] && p != hooks.ResidPre {
					heads = n
				}
			}
			for _, target := range []string{heads, hooks.Name(hooks.ResidPre, l), hooks.Name(hooks.MLPOut, l)} {
				if !slices.Contains(names, target) {
					continue // a block without a channel mixer (Mamba-2)
				}
				got, reached := run(target, false)
				want, all := run(target, true)
				if got == nil || want == nil {
					t.Fatalf("%s not captured", target)
				}
				if rel, i := relErr(got.Data().([]float32), want.Data().([]float32)); rel != 0 {
					t.Errorf("%s: differs from the whole pass's by %.3g at %d", target, rel, i)
				}
				stop := 2 * l // the pass's depth: 2·blocks, less 1 when the last runs to its heads only
				switch {
				case target == heads:
					stop = 2*l + 1
				case target != hooks.Name(hooks.ResidPre, l):
					stop = 2 * (l + 1)
				}
				if own {
					stop = 2 * len(m.Layers)
				}
				for _, n := range names {
					nl, ok := layerIndex(n)
					if !ok || !all[n] {
						continue
					}
					p := strings.Replace(n, fmt.Sprintf("blocks.%d.", nl), "blocks.{l}.", 1)
					depth := 2*nl + 1 // a point of block nl needs that much of the pass
					if after[p] {
						depth = 2 * (nl + 1)
					} else if p == hooks.ResidPre {
						depth = 2 * nl
					}
					if want := depth <= stop; reached[n] != want {
						t.Errorf("reading %s, the pass reached %s: %v, want %v", target, n, reached[n], want)
					}
				}
			}
		}
	})
}

// eachFamily runs fn as a subtest for every family that can be generated,
// with gen making a random model of it (layers blocks, d_model 32, 4
// heads, 2 KV heads where the family groups them), anew at each call.
func eachFamily(t *testing.T, layers int, fn func(t *testing.T, gen func() *Model)) {
	for _, f := range families {
		if f.small == nil {
			continue
		}
		t.Run(string(f.arch), func(t *testing.T) {
			kv := 2
			if f.arch == ArchSelRoPE {
				kv = 4 // no grouped-query attention
			}
			cfg, err := SmallConfig(f.arch, Size{Layers: layers, DModel: 32, Heads: 4, KVHeads: kv, Vocab: 61, MaxPos: 64})
			if err != nil {
				t.Fatal(err)
			}
			fn(t, func() *Model {
				m, _, err := Generate(cfg, 5)
				if err != nil {
					t.Fatal(err)
				}
				return m
			})
		})
	}
}

// layerIndex is the block of a per-layer hook name.
func layerIndex(name string) (int, bool) {
	var l int
	if _, err := fmt.Sscanf(name, "blocks.%d.", &l); err != nil {
		return 0, false
	}
	return l, true
}
