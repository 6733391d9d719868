package model

import (
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/filterlens/probe/hooks"
	"gorgonia.org/tensor"
)

func smallModel(t testing.TB, arch Arch) *Model {
	t.Helper()
	cfg, err := SmallConfig(arch, Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 97, MaxPos: 4096})
	if arch == ArchGPT2 {
		cfg, err = SmallConfig(arch, Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 4, Vocab: 97, MaxPos: 256})
	}
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := Generate(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// writeGenerated generates a model of cfg from seed and writes it as a
// Hugging Face checkpoint into a new temporary folder: the generated model
// and the folder.
func writeGenerated(t testing.TB, cfg Config, seed uint64) (*Model, string) {
	t.Helper()
	gen, tensors, err := Generate(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteHF(dir, cfg, tensors); err != nil {
		t.Fatal(err)
	}
	return gen, dir
}

func seqs(B, T, vocab int) [][]int {
	ids := make([][]int, B)
	for b := range ids {
		ids[b] = make([]int, T)
		for t := range ids[b] {
			ids[b][t] = (b*131 + t*17 + t*t) % vocab
		}
	}
	return ids
}

// rowCollector keeps every streamed row, to compare with the pattern.
type rowCollector struct {
	mu   sync.Mutex
	T, H int
	rows []float32 // [B, H, T, T]
	seen []int     // rows delivered per (b, h)
	vOK  bool
}

func (c *rowCollector) ConsumeAttn(a *hooks.AttnTile) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for r := 0; r < a.Rows; r++ {
		t := a.Q0 + r
		copy(c.rows[((a.Batch*c.H+a.Head)*c.T+t)*c.T:], a.Row(r))
		c.seen[a.Batch*c.H+a.Head]++
	}
	return nil
}

// TestStreamingEqualsPattern: rows streamed in tiles of every size equal the
// materialized pattern, each row exactly once.
func TestStreamingEqualsPattern(t *testing.T) {
	for _, arch := range []Arch{ArchQwen3, ArchGated, ArchLlama, ArchGPT2} {
		m := smallModel(t, arch)
		B, T := 2, 45
		for _, tile := range []int{1, 7, 64} {
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
					t.Fatalf("%s tile %d: streamed row value at flat %d = %v, pattern %v", arch, tile, i, c.rows[i], want[i])
				}
			}
			for bh, n := range c.seen {
				if n != T {
					t.Fatalf("%s tile %d: (batch,head) %d got %d rows, want %d", arch, tile, bh, n, T)
				}
			}
		}
	}
}

// TestHookPatternDoesNotChangeOutput: materializing the pattern (and
// computing z from it) gives the same logits as streaming.
func TestHookPatternDoesNotChangeOutput(t *testing.T) {
	m := smallModel(t, ArchGated)
	ids := seqs(2, 30, m.Vocab)
	plain, err := m.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	hs.Capture("blocks.*.attn.hook_pattern")
	with, err := m.Forward(ids, Options{Logits: true, Hooks: hs})
	if err != nil {
		t.Fatal(err)
	}
	if rel, i := relErr(with.Logits, plain.Logits); rel > 1e-6 {
		t.Fatalf("logits differ with the pattern hooked: rel %.3g at %d", rel, i)
	}
}

// TestRowBlocks: the MLP, Gated DeltaNet's projections and convolution
// and the streamed LM head computed a few rows at a time give the same
// logits, bit for bit, as one product over all rows, in every family, with
// blocks that cross the batch boundary and a partial last block. The
// logits streamed to Options.LogitRows are those of Options.Logits, in
// order, each row once, whether or not the whole logits are kept too. A
// hook on mlp.hook_post is called once per layer with the whole [B, T,
// d_ff] tensor, and what it writes is what the down projection reads in
// every row. (Bit for bit on the pure-Go kernels, whose sums do not depend
// on the number of rows; OpenBLAS sums small products in another order, so
// there within 1e-4, the golden tolerance.)
func TestRowBlocks(t *testing.T) {
	defer func(b, h int) { blockRows, headRows = b, h }(blockRows, headRows)
	models := map[string]*Model{}
	for _, f := range families {
		if f.small == nil {
			continue
		}
		kv := 2
		if f.arch == ArchSelRoPE {
			kv = 4 // no grouped-query attention
		}
		cfg, err := SmallConfig(f.arch, Size{Layers: 4, DModel: 32, Heads: 4, KVHeads: kv, Vocab: 53, MaxPos: 64})
		if err != nil {
			t.Fatal(err)
		}
		if models[string(f.arch)], _, err = Generate(cfg, 11); err != nil {
			t.Fatal(err)
		}
	}
	models["rfa"], _ = loadRFASpec(t, defaultRFASpec(), 3) // the head's bias
	for arch, m := range models {
		t.Run(arch, func(t *testing.T) {
			B, T := 2, 37
			ids := seqs(B, T, m.Vocab)
			blockRows, headRows = 1<<30, 1<<30
			whole, err := m.Forward(ids, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			same := func(what string, got []float32) {
				t.Helper()
				if len(got) != len(whole.Logits) {
					t.Fatalf("%s: %d logits, want %d", what, len(got), len(whole.Logits))
				}
				for i, w := range whole.Logits {
					if BLAS() == "openblas" && math.Abs(float64(got[i]-w)) <= 1e-4*math.Max(1, math.Abs(float64(w))) {
						continue
					}
					if math.Float32bits(got[i]) != math.Float32bits(w) {
						t.Fatalf("%s: logit %d is %v, %v in one product", what, i, got[i], whole.Logits[i])
					}
				}
			}
			blockRows, headRows = 5, 3
			for _, keep := range []bool{false, true} {
				var rows []float32
				out, err := m.Forward(ids, Options{Logits: keep, LogitRows: func(first int, z []float32) {
					if first != len(rows)/m.Vocab || len(z)%m.Vocab != 0 || len(z) > headRows*m.Vocab {
						t.Fatalf("block at row %d of %d values after %d rows", first, len(z), len(rows)/m.Vocab)
					}
					rows = append(rows, z...)
				}})
				if err != nil {
					t.Fatal(err)
				}
				if (out.Logits != nil) != keep {
					t.Errorf("Logits %v: whole logits returned: %v", keep, out.Logits != nil)
				}
				same(fmt.Sprintf("streamed (Logits %v)", keep), rows)
				if keep {
					same("in blocks", out.Logits)
				}
			}
			names, err := m.HookNames()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(names, "blocks.0.mlp.hook_post") {
				return // no MLP hidden values (RFA, BFT)
			}

			calls := map[string]int{}
			hs := &hooks.Set{}
			hs.Add("blocks.*.mlp.hook_post", func(name string, _ int, x *tensor.Dense) error {
				calls[name]++
				if s := x.Shape(); len(s) != 3 || s[0] != B || s[1] != T || s[2] != m.DMLP {
					t.Errorf("%s: shape %v, want [%d %d %d]", name, s, B, T, m.DMLP)
				}
				return nil
			})
			hooked, err := m.Forward(ids, Options{Logits: true, Hooks: hs})
			if err != nil {
				t.Fatal(err)
			}
			dense := 0 // the layers with a dense MLP (a mixture of experts has no hook_post)
			for _, n := range names {
				if hooks.Match("blocks.*.mlp.hook_post", n) {
					dense++
				}
			}
			if len(calls) != dense || calls["blocks.0.mlp.hook_post"] != 1 {
				t.Errorf("hook_post calls %v, want one per layer with a dense MLP (%d)", calls, dense)
			}
			same("hook_post hooked", hooked.Logits)

			// zeroing hook_post of layer 0 leaves the down projection's bias
			// (or its post-norm of zero) in every row of hook_mlp_out
			hs = &hooks.Set{}
			hs.Add("blocks.0.mlp.hook_post", func(_ string, _ int, x *tensor.Dense) error {
				clear(x.Data().([]float32))
				return nil
			})
			mlpOut := hs.Capture("blocks.0.hook_mlp_out")
			if _, err := m.Forward(ids, Options{Hooks: hs}); err != nil {
				t.Fatal(err)
			}
			got, D := mlpOut.Get("blocks.0.hook_mlp_out").Data().([]float32), m.DModel
			for r := 1; r < B*T; r++ {
				for i := 0; i < D; i++ {
					if got[r*D+i] != got[i] {
						t.Fatalf("row %d of hook_mlp_out differs from row 0 with hook_post zeroed (%v vs %v): the hook did not reach every row", r, got[r*D+i], got[i])
					}
				}
			}
		})
	}
}

// TestInterventions: a hook that changes a value changes everything after it
// and nothing before it.
func TestInterventions(t *testing.T) {
	m := smallModel(t, ArchGated)
	ids := seqs(1, 20, m.Vocab)
	base := &hooks.Set{}
	baseCap := base.Capture("blocks.0.attn.hook_z", "blocks.1.hook_resid_pre", "blocks.0.attn.hook_gate")
	ref, err := m.Forward(ids, Options{Hooks: base, Logits: true})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("gate forced to 1", func(t *testing.T) {
		hs := &hooks.Set{}
		hs.Add("blocks.0.attn.hook_gate", hooks.SetHead(1, 1))
		cap := hs.Capture("blocks.0.attn.hook_z", "blocks.0.attn.hook_gate")
		out, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		g := cap.Get("blocks.0.attn.hook_gate")
		for p := 0; p < 20; p++ {
			if v, _ := g.At(0, p, 1); v.(float32) != 1 {
				t.Fatalf("gate of head 1 at %d = %v after forcing to 1", p, v)
			}
		}
		// z of head 1 is now the ungated z: z_forced = z_ref / gate_ref.
		zr, zf, gr := baseCap.Get("blocks.0.attn.hook_z"), cap.Get("blocks.0.attn.hook_z"), baseCap.Get("blocks.0.attn.hook_gate")
		for p := 0; p < 20; p++ {
			gv, _ := gr.At(0, p, 1)
			for i := 0; i < m.DHead; i++ {
				a, _ := zr.At(0, p, 1, i)
				b, _ := zf.At(0, p, 1, i)
				if d := math.Abs(float64(b.(float32))*float64(gv.(float32)) - float64(a.(float32))); d > 1e-5 {
					t.Fatalf("z[%d,1,%d] = %v, want %v/%v", p, i, b, a, gv)
				}
			}
		}
		if rel, _ := relErr(out.Logits, ref.Logits); rel < 1e-6 {
			t.Fatal("forcing a gate to 1 did not change the logits")
		}
	})

	t.Run("zero a head's output", func(t *testing.T) {
		hs := &hooks.Set{}
		hs.Add("blocks.0.attn.hook_z", hooks.ScaleHead(2, 0))
		cap := hs.Capture("blocks.0.attn.hook_z", "blocks.1.hook_resid_pre")
		out, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		z := cap.Get("blocks.0.attn.hook_z")
		s, err := z.Slice(nil, nil, tensor.S(2))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range s.(*tensor.Dense).Materialize().Data().([]float32) {
			if v != 0 {
				t.Fatalf("head 2 of z not zeroed: %v", v)
			}
		}
		if rel, _ := relErr(cap.Get("blocks.1.hook_resid_pre").Data().([]float32), baseCap.Get("blocks.1.hook_resid_pre").Data().([]float32)); rel < 1e-6 {
			t.Fatal("zeroing a head did not change the residual stream")
		}
		if rel, _ := relErr(out.Logits, ref.Logits); rel < 1e-6 {
			t.Fatal("zeroing a head did not change the logits")
		}
	})

	t.Run("pattern intervention reaches z", func(t *testing.T) {
		// Put all of head 0's mass on the first key: z at every position
		// becomes v_0 of its KV head.
		hs := &hooks.Set{}
		hs.Add("blocks.0.attn.hook_pattern", func(_ string, _ int, x *tensor.Dense) error {
			T := x.Shape()[2]
			d := x.Data().([]float32)
			for q := 0; q < T; q++ {
				row := d[q*T : (q+1)*T] // batch 0, head 0
				for j := range row {
					row[j] = 0
				}
				row[0] = 1
			}
			return nil
		})
		cap := hs.Capture("blocks.0.attn.hook_z", "blocks.0.attn.hook_v", "blocks.0.attn.hook_gate")
		if _, err := m.Forward(ids, Options{Hooks: hs}); err != nil {
			t.Fatal(err)
		}
		z, v, g := cap.Get("blocks.0.attn.hook_z"), cap.Get("blocks.0.attn.hook_v"), cap.Get("blocks.0.attn.hook_gate")
		for p := 0; p < 20; p++ {
			gv, _ := g.At(0, p, 0)
			for i := 0; i < m.DHead; i++ {
				zv, _ := z.At(0, p, 0, i)
				v0, _ := v.At(0, 0, 0, i)
				if d := math.Abs(float64(zv.(float32)) - float64(v0.(float32))*float64(gv.(float32))); d > 1e-5 {
					t.Fatalf("z[%d,0,%d] = %v, want gate·v_0 = %v", p, i, zv, v0.(float32)*gv.(float32))
				}
			}
		}
	})
}

// TestLongContextMemory runs T = 16384 on a 4-layer model with every head's
// rows streaming to a consumer and checks that the pass allocated far less
// than one T×T matrix (1 GiB in float32): under a quarter of it.
func TestLongContextMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("long context in -short mode")
	}
	cfg, err := SmallConfig(ArchQwen3, Size{Layers: 4, DModel: 32, Heads: 2, KVHeads: 1, Vocab: 64, MaxPos: 16384})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := Generate(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	const T = 16384
	hs := &hooks.Set{}
	var rows int64
	var mu sync.Mutex
	hs.Stream(-1, consumerFunc(func(a *hooks.AttnTile) error {
		mu.Lock()
		rows += int64(a.Rows)
		mu.Unlock()
		return nil
	}))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := m.Forward(seqs(1, T, m.Vocab), Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if want := int64(4 * m.Heads * T); rows != want {
		t.Fatalf("streamed %d rows, want %d", rows, want)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	const tt = 4 * T * T
	t.Logf("T=%d: allocated %.1f MiB in total (one T×T float32 matrix: %d MiB)", T, float64(alloc)/(1<<20), tt>>20)
	if alloc > tt/4 {
		t.Fatalf("forward at T=%d allocated %d bytes, more than 1/4 of one T×T matrix (%d)", T, alloc, tt)
	}
}

type consumerFunc func(*hooks.AttnTile) error

func (f consumerFunc) ConsumeAttn(a *hooks.AttnTile) error { return f(a) }

// TestGenerateRoundTrip: a generated checkpoint written in HF layout loads
// back to the same logits.
func TestGenerateRoundTrip(t *testing.T) {
	for _, arch := range []Arch{ArchQwen3, ArchGated, ArchLlama, ArchQwen2, ArchGPT2} {
		t.Run(string(arch), func(t *testing.T) {
			m := smallModel(t, arch)
			_, tensors, err := Generate(m.Config, 7)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "ck")
			if err := WriteHF(dir, m.Config, tensors); err != nil {
				t.Fatal(err)
			}
			back, err := Load(dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if back.Arch != arch || back.Parameters != m.Parameters {
				t.Fatalf("loaded %s with %d parameters, wrote %s with %d", back.Arch, back.Parameters, arch, m.Parameters)
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

func TestForwardRejectsBadInput(t *testing.T) {
	m := smallModel(t, ArchQwen3)
	gpt := smallModel(t, ArchGPT2)
	long := seqs(1, 4097, m.Vocab)
	cases := []struct {
		name string
		m    *Model
		ids  [][]int
		opt  Options
		want string
	}{
		{"empty batch", m, nil, Options{}, "empty input"},
		{"empty sequence", m, [][]int{{}}, Options{}, "empty input"},
		{"ragged batch", m, [][]int{{1, 2}, {1}}, Options{}, "differ in length"},
		{"id ≥ vocab", m, [][]int{{1, 97}}, Options{}, "token id 97 at sequence 0 position 1"},
		{"negative id", m, [][]int{{-1}}, Options{}, "token id -1"},
		{"too long", m, long, Options{}, "exceeds max_position_embeddings 4096"},
		{"gpt2 too long", gpt, seqs(1, 257, gpt.Vocab), Options{AllowExtrapolation: true}, "learned positions"},
	}
	for _, c := range cases {
		_, err := c.m.Forward(c.ids, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	if _, err := m.Forward(long, Options{AllowExtrapolation: true}); err != nil {
		t.Errorf("--allow-extrapolation: %v", err)
	}
}

func TestNonFiniteWeightReported(t *testing.T) {
	m := smallModel(t, ArchLlama)
	m.Layers[1].WUp.F32[5] = float32(math.NaN())
	_, err := m.Forward(seqs(1, 8, m.Vocab), Options{})
	if err == nil || !strings.Contains(err.Error(), "after layer 1") {
		t.Fatalf("error %v, want a non-finite report naming layer 1", err)
	}
}
