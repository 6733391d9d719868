package model

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
)

// ggufCases lists the shared GGUF fixtures (golden/gguf/<case>: a
// generated checkpoint written to GGUF as llama.cpp's converter does and
// quantized by llama.cpp; see its README).
func ggufCases(t *testing.T) []string {
	dirs, _ := filepath.Glob(filepath.Join("..", "..", "shared", "golden", "gguf", "*", "model.gguf"))
	if len(dirs) == 0 {
		t.Skip("no ../shared/golden/gguf/*/model.gguf")
	}
	for i, d := range dirs {
		dirs[i] = filepath.Dir(d)
	}
	return dirs
}

// TestGGUFConfigMatchesHF: the config made from each fixture's GGUF
// metadata parses to the Config of the Hugging Face config.json it was
// converted from (dequant/config.json): sizes, RoPE (Gemma 3's local and
// global bases), the sliding pattern, the tied head.
func TestGGUFConfigMatchesHF(t *testing.T) {
	for _, dir := range ggufCases(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			g, err := checkpoint.OpenGGUF(filepath.Join(dir, "model.gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			fields, err := GGUFConfig(g)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := json.Marshal(fields)
			got, err := ParseConfig(data)
			if err != nil {
				t.Fatalf("%s: %v", data, err)
			}
			want, err := LoadConfig(filepath.Join(dir, "dequant"))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("config from GGUF:\n%+v\nHugging Face config.json:\n%+v", *got, *want)
			}
		})
	}
}

// ggufBounds are a fixture's bounds.json: what probe on the GGUF may differ
// from llama.cpp's probabilities (1.5× what was measured with probe on
// ggml's own dequantization, compare.json).
type ggufBounds struct {
	DLogP float64 `json:"dlogp_top100"`
	KLMax float64 `json:"kl_max"`
	Top1  float64 `json:"top1"`
}

// ggufCompare holds compare.json's measurements of probe on dequant/.
type ggufCompare struct {
	MaxDLogP float64 `json:"max_abs_dlogp_top100"`
	Top1     int     `json:"top1_agree"`
}

// TestGGUFMatchesLlamaCpp: each fixture, read from GGUF (ConvertGGUF, then
// Load), gives next-token distributions within the fixture's bounds of
// llama.cpp's own on the same file (max |Δ log p| over probe's top-100
// tokens, KL both ways, top-1 agreement), and the same max |Δ log p| (to
// 1e-6 relative: the float64 comparisons' own rounding; measured equal to
// 9 digits) and top-1 count as probe on ggml's float32 dequantization of
// the file (compare.json): the weights, the undone Q/K permutation and +1
// on the norms, and the config are what the Hugging Face checkpoint holds.
func TestGGUFMatchesLlamaCpp(t *testing.T) {
	for _, dir := range ggufCases(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var bounds ggufBounds
			var cmp ggufCompare
			var ids [][]int
			for _, f := range []struct {
				name string
				v    any
			}{{"bounds.json", &bounds}, {"compare.json", &cmp}, {"ids.json", &ids}} {
				b, err := os.ReadFile(filepath.Join(dir, f.name))
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, f.v); err != nil {
					t.Fatalf("%s: %v", f.name, err)
				}
			}
			hf := t.TempDir()
			// the fixtures' placeholder tokenizer (tokens "<tN>", one merge
			// "<t0> <t1>" whose result is no token) is refused, naming why
			err := ConvertGGUF(filepath.Join(dir, "model.gguf"), hf, GGUFOptions{})
			if err == nil || !strings.Contains(err.Error(), `merged token "<t0><t1>" is not in the vocabulary (convert without it: GGUFOptions.NoTokenizer)`) {
				t.Errorf("placeholder tokenizer: %v", err)
			}
			if err := ConvertGGUF(filepath.Join(dir, "model.gguf"), hf, GGUFOptions{NoTokenizer: true}); err != nil {
				t.Fatal(err)
			}
			m, err := Load(hf, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ck, err := checkpoint.OpenFile(filepath.Join(dir, "llamacpp_probs.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			probs, err := ck.Float32("probs")
			ck.Close()
			if err != nil {
				t.Fatal(err)
			}
			out, err := m.Forward(ids, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			V := m.Config.Vocab
			var maxD, klMax float64
			top1, n := 0, 0
			for p := 0; p < len(ids)*len(ids[0]); p++ {
				d, klPL, klLP, same := ggufPosition(out.Logits[p*V:(p+1)*V], probs[p*V:(p+1)*V])
				maxD, klMax = math.Max(maxD, d), math.Max(klMax, math.Max(klPL, klLP))
				if same {
					top1++
				}
				n++
			}
			t.Logf("max |Δ log p| top-100 %.9g (compare.json %.9g, bound %.4g), KL max %.3g (bound %.3g), top-1 %d/%d (compare.json %d)",
				maxD, cmp.MaxDLogP, bounds.DLogP, klMax, bounds.KLMax, top1, n, cmp.Top1)
			if maxD > bounds.DLogP || klMax > bounds.KLMax || float64(top1) < bounds.Top1*float64(n) {
				t.Errorf("outside bounds.json %+v", bounds)
			}
			// compare.json is the same statistic of probe's pure-Go build on
			// ggml's float32 reading: equal to ~1e-8 there; the OpenBLAS
			// build sums the products in another order, which moves the
			// tail tokens' log p (|log p| up to ~30) by ~1e-5 relative
			if math.Abs(maxD-cmp.MaxDLogP) > 1e-4*cmp.MaxDLogP || top1 != cmp.Top1 {
				t.Errorf("probe on the GGUF differs from probe on ggml's dequantization: max |Δ log p| %.6g vs %.6g, top-1 %d vs %d", maxD, cmp.MaxDLogP, top1, cmp.Top1)
			}
		})
	}
}

// ggufPosition compares one position's logits with llama.cpp's
// probabilities as the fixtures' README does: log-softmax in float64; max
// |Δ log p| over probe's 100 most likely tokens whose llama.cpp probability
// is a normal float32; KL(probe‖llama) and KL(llama‖probe) over the tokens
// both give a probability; whether the argmaxes agree.
func ggufPosition(logits, probs []float32) (maxD, klPL, klLP float64, same bool) {
	V := len(logits)
	mx := math.Inf(-1)
	for _, z := range logits {
		mx = math.Max(mx, float64(z))
	}
	var sum float64
	for _, z := range logits {
		sum += math.Exp(float64(z) - mx)
	}
	logp := make([]float64, V)
	for i, z := range logits {
		logp[i] = float64(z) - mx - math.Log(sum)
	}
	order := make([]int, V)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return logp[order[a]] > logp[order[b]] })
	for _, i := range order[:min(100, V)] {
		if float64(probs[i]) >= 0x1p-126 {
			maxD = math.Max(maxD, math.Abs(logp[i]-math.Log(float64(probs[i]))))
		}
	}
	best := 0
	for i, q := range probs {
		if q > probs[best] {
			best = i
		}
		if q > 0 {
			lq := math.Log(float64(q))
			klLP += float64(q) * (lq - logp[i])
			klPL += math.Exp(logp[i]) * (logp[i] - lq)
		}
	}
	return maxD, klPL, klLP, best == order[0]
}

// TestGGUFUnpermute: ggufUnpermute inverts LlamaModel.permute (written
// here as the converter writes it: reshape(n, 2, d/2, in), swap axes 1
// and 2, reshape back) on a weight and a bias.
func TestGGUFUnpermute(t *testing.T) {
	const n, d, in = 3, 8, 5
	permute := func(x []float32, cols int) []float32 {
		out := make([]float32, len(x))
		for h := 0; h < n; h++ {
			for s := 0; s < 2; s++ {
				for i := 0; i < d/2; i++ {
					// source index [h, s, i] → destination [h, i, s]
					copy(out[(h*d+i*2+s)*cols:(h*d+i*2+s+1)*cols], x[(h*d+s*d/2+i)*cols:(h*d+s*d/2+i+1)*cols])
				}
			}
		}
		return out
	}
	for _, cols := range []int{in, 1} {
		x := make([]float32, n*d*cols)
		for i := range x {
			x[i] = float32(i)
		}
		shape := []int{n * d, cols}
		if cols == 1 {
			shape = []int{n * d}
		}
		got, err := ggufUnpermute(permute(x, cols), shape, n, d, "w")
		if err != nil || !reflect.DeepEqual(got, x) {
			t.Fatalf("cols %d: unpermute(permute(x)) = %v, %v", cols, got, err)
		}
	}
	if _, err := ggufUnpermute(make([]float32, 10), []int{10}, n, d, "blk.0.attn_q.weight"); err == nil || !strings.Contains(err.Error(), `tensor "blk.0.attn_q.weight": shape [10], want 3 heads × 8 rows`) {
		t.Errorf("bad shape: %v", err)
	}
}

// TestGGUFRoundTrip: a generated checkpoint of each family (and llama with
// Llama 3.1's rope scaling, which GGUF holds as a table), written to GGUF
// as llama.cpp's converter does (WriteGGUFFromHF: permuted q/k rows, 1 + w
// norms), reads back (GGUFConfig, GGUFTensors) to the same Config and the
// same tensors — exactly, but for Gemma's norms, where (w + 1) − 1 may
// round (to within 2^-23).
func TestGGUFRoundTrip(t *testing.T) {
	for _, name := range []string{"llama", "llama3-rope", "qwen2", "qwen3", "gemma2", "gemma3"} {
		arch := Arch(strings.TrimSuffix(name, "3-rope"))
		t.Run(name, func(t *testing.T) {
			cfg, err := SmallConfig(arch, Size{Layers: 4, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 96, MaxPos: 256})
			if err != nil {
				t.Fatal(err)
			}
			if name == "llama3-rope" { // Llama 3.1's rope scaling: a rope_freqs.weight table in GGUF
				cfg.RoPE = RoPEConfig{Theta: 500000, Type: "llama3", Factor: 8, LowFreq: 1, HighFreq: 4, OrigMax: 8192}
			}
			_, tensors, err := Generate(cfg, 5)
			if err != nil {
				t.Fatal(err)
			}
			g := writeOpenGGUF(t, &cfg, tensors)
			fields, err := GGUFConfig(g)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := json.Marshal(fields)
			got, err := ParseConfig(data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, cfg) {
				t.Errorf("config read back:\n%+v\nwritten:\n%+v", *got, cfg)
			}
			back, err := GGUFTensors(g, fields)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]checkpoint.Tensor{}
			for _, w := range tensors {
				want[w.Name] = w
			}
			if len(back) != len(want) {
				t.Fatalf("%d tensors read back, %d written", len(back), len(want))
			}
			for _, b := range back {
				w, ok := want[b.Name]
				if !ok || !reflect.DeepEqual(b.Shape, w.Shape) {
					t.Fatalf("%s %v: written as %v (%v)", b.Name, b.Shape, w.Shape, ok)
				}
				x, y := b.Data.([]float32), w.Data.([]float32)
				tol := 0.0
				if arch == ArchGemma2 || arch == ArchGemma3 {
					tol = 0x1p-23
				}
				for i := range y {
					if math.Abs(float64(x[i]-y[i])) > tol {
						t.Fatalf("%s[%d] = %g, written %g", b.Name, i, x[i], y[i])
					}
				}
			}
		})
	}
}

// TestGGUFWriteBF16: BFloat16 tensors are written as llama.cpp's converter
// does with --outtype bf16 — matrices BF16 with their bits as given (q/k
// rows permuted all the same), vectors widened to F32, general.file_type
// 32 — and read back to the checkpoint's values exactly.
func TestGGUFWriteBF16(t *testing.T) {
	cfg, err := SmallConfig(ArchLlama, Size{Layers: 2, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 96, MaxPos: 256})
	if err != nil {
		t.Fatal(err)
	}
	_, tensors, err := Generate(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]float32{}
	for i, w := range tensors {
		b, err := checkpoint.Convert(w.Data.([]float32), "BF16")
		if err != nil {
			t.Fatal(err)
		}
		tensors[i].Data = b
		x := make([]float32, len(w.Data.([]float32)))
		for j, v := range b.(checkpoint.BFloat16) {
			x[j] = checkpoint.BF16ToFloat32(v)
		}
		want[w.Name] = x
	}
	g := writeOpenGGUF(t, &cfg, tensors)
	if ft, err := g.MetaInt("general.file_type"); err != nil || ft != 32 {
		t.Errorf("general.file_type = %d (%v), want 32 (LLAMA_FTYPE_MOSTLY_BF16)", ft, err)
	}
	for _, gt := range g.Tensors {
		wantType := checkpoint.GGMLBF16
		if len(gt.Dims) == 1 {
			wantType = checkpoint.GGMLF32
		}
		if gt.Type != wantType {
			t.Errorf("%s %v: stored as %v, want %v", gt.Name, gt.Dims, gt.Type, wantType)
		}
	}
	fields, err := GGUFConfig(g)
	if err != nil {
		t.Fatal(err)
	}
	back, err := GGUFTensors(g, fields)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(want) {
		t.Fatalf("%d tensors read back, %d written", len(back), len(want))
	}
	for _, b := range back {
		x, y := b.Data.([]float32), want[b.Name]
		if len(x) != len(y) {
			t.Fatalf("%s: %d values read back, %d written", b.Name, len(x), len(y))
		}
		for i := range y {
			if x[i] != y[i] {
				t.Fatalf("%s[%d] = %g, written %g", b.Name, i, x[i], y[i])
			}
		}
	}
}

// TestGGUFRefuses: what GGUF or this mapping cannot say is refused naming
// the key, tensor or field.
func TestGGUFRefuses(t *testing.T) {
	dir := t.TempDir()
	cfg, _ := SmallConfig(ArchLlama, Size{Layers: 1, DModel: 32, Heads: 2, KVHeads: 2, Vocab: 16, MaxPos: 64})
	_, tensors, _ := Generate(cfg, 1)
	write := func(name string, kv []checkpoint.GGUFKV, ts []checkpoint.GGUFWriteTensor) string {
		p := filepath.Join(dir, name)
		if err := checkpoint.WriteGGUF(p, kv, ts); err != nil {
			t.Fatal(err)
		}
		return p
	}
	arch := func(a string) checkpoint.GGUFKV {
		return checkpoint.GGUFKV{Key: "general.architecture", Type: checkpoint.GGUFString, Value: a}
	}
	emb := checkpoint.GGUFWriteTensor{Name: "token_embd.weight", Type: checkpoint.GGMLF32, Dims: []int64{4, 2}, Data: make([]byte, 32)}
	cases := []struct {
		name string
		path func() string
		want string
	}{
		{"unknown architecture", func() string { return write("phi.gguf", []checkpoint.GGUFKV{arch("phi3")}, nil) },
			`general.architecture "phi3" is not supported from GGUF (supported: llama, qwen2, qwen3, gemma2, gemma3)`},
		{"missing hyper-parameter", func() string { return write("nohp.gguf", []checkpoint.GGUFKV{arch("qwen3")}, nil) },
			`metadata "qwen3.embedding_length" is missing`},
		{"per-layer array", func() string {
			return write("arr.gguf", []checkpoint.GGUFKV{arch("llama"),
				{Key: "llama.embedding_length", Type: checkpoint.GGUFUint32, Value: uint32(4)},
				{Key: "llama.block_count", Type: checkpoint.GGUFUint32, Value: uint32(1)},
				{Key: "llama.feed_forward_length", Type: checkpoint.GGUFArrayT, Value: checkpoint.GGUFArray{Elem: checkpoint.GGUFInt32, Values: []int32{8}}}}, nil)
		}, `metadata "llama.feed_forward_length" is a array`},
		{"llama3 rope factors", func() string {
			g := writeOpenGGUF(t, &cfg, tensors)
			var ts []checkpoint.GGUFWriteTensor
			for _, ti := range g.Tensors {
				b, _ := g.TensorData(ti.Name)
				ts = append(ts, checkpoint.GGUFWriteTensor{Name: ti.Name, Type: ti.Type, Dims: ti.Dims, Data: b})
			}
			ts = append(ts, checkpoint.GGUFWriteTensor{Name: "rope_freqs.weight", Type: checkpoint.GGMLF32, Dims: []int64{8}, Data: make([]byte, 32)})
			return write("l3b.gguf", g.KV, ts)
		}, `tensor rope_freqs.weight (factor 0) is not the llama3 rope scaling of any known parameters`},
		{"unknown tensor", func() string {
			kv := []checkpoint.GGUFKV{arch("qwen3")}
			for _, k := range []string{"embedding_length", "block_count", "feed_forward_length", "attention.head_count", "context_length"} {
				kv = append(kv, checkpoint.GGUFKV{Key: "qwen3." + k, Type: checkpoint.GGUFUint32, Value: uint32(2)})
			}
			return write("unk.gguf", kv, []checkpoint.GGUFWriteTensor{emb, {Name: "blk.0.ffn_gate_exps.weight", Type: checkpoint.GGMLF32, Dims: []int64{4}, Data: make([]byte, 16)}})
		}, `tensor "blk.0.ffn_gate_exps.weight" has no Hugging Face name in the qwen3 family`},
	}
	for _, tc := range cases {
		p := tc.path()
		err := ConvertGGUF(p, filepath.Join(dir, "out-"+filepath.Base(p)), GGUFOptions{NoTokenizer: true})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v\nwant the file and %q", tc.name, err, tc.want)
		}
	}
	g2, _ := SmallConfig(ArchGemma2, Size{Layers: 2, DModel: 32, Heads: 2, KVHeads: 2, Vocab: 16, MaxPos: 64})
	g2.AttnScalar = 100
	if err := WriteGGUFFromHF(filepath.Join(dir, "g2.gguf"), &g2, nil); err == nil || !strings.Contains(err.Error(), "query_pre_attn_scalar 100: GGUF does not store it and llama.cpp would use 16") {
		t.Errorf("gemma2 scalar: %v", err)
	}
}

// TestGGUFFamiliesQuantizedByLlamaCpp: llama.cpp's own loader accepts the
// GGUF file WriteGGUFFromHF makes of each family (llama_model_quantize
// reads its hyper-parameters and quantizes it to Q8_0), and the quantized
// file, read back through ConvertGGUF and Load, predicts as the float32
// model does (top-1 agreement ≥ 95 % and KL(f32‖q8_0) ≤ 0.05 at every
// position of a 64-token sequence; Q8_0's own effect on these random
// models measured 2e-3–9e-3 for llama/qwen2/qwen3, < 1e-7 for the nearly
// certain Gemma ones; a misread file gives KL of order 1 and more). Skipped without llama.cpp's library
// (bash .ci/setup.sh installs it).
func TestGGUFFamiliesQuantizedByLlamaCpp(t *testing.T) {
	lib, _ := filepath.Abs("../third_party/node-llama-cpp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64")
	if _, err := os.Stat(filepath.Join(lib, "libllama.v0.4.0.so")); err != nil {
		t.Skipf("llama.cpp's library is not installed (%v): bash .ci/setup.sh installs npm @node-llama-cpp/linux-x64@3.21.1", err)
	}
	for _, name := range []string{"llama", "llama3-rope", "qwen2", "qwen3", "gemma2", "gemma3"} {
		arch := Arch(strings.TrimSuffix(name, "3-rope"))
		t.Run(name, func(t *testing.T) {
			cfg, err := SmallConfig(arch, Size{Layers: 2, DModel: 128, Heads: 4, KVHeads: 2, Vocab: 256, MaxPos: 256})
			if err != nil {
				t.Fatal(err)
			}
			if name == "llama3-rope" { // llama.cpp takes our rope_freqs.weight
				cfg.RoPE = RoPEConfig{Theta: 500000, Type: "llama3", Factor: 8, LowFreq: 1, HighFreq: 4, OrigMax: 8192}
			}
			ref, tensors, err := Generate(cfg, 9)
			if err != nil {
				t.Fatal(err)
			}
			tmp := t.TempDir()
			f32, q8 := filepath.Join(tmp, "f32.gguf"), filepath.Join(tmp, "q8_0.gguf")
			if err := WriteGGUFFromHF(f32, &cfg, tensors); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("python3", "../scripts/gguf/ggml_ref.py", lib, "quantize", f32, q8, "7")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("llama_model_quantize: %v\n%s", err, out)
			}
			if err := ConvertGGUF(q8, filepath.Join(tmp, "hf"), GGUFOptions{}); err != nil {
				t.Fatal(err)
			}
			m, err := Load(filepath.Join(tmp, "hf"), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]int, 64)
			for i := range ids {
				ids[i] = (i*37 + 11) % cfg.Vocab
			}
			a, err := ref.Forward([][]int{ids}, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			b, err := m.Forward([][]int{ids}, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			V, agree, klMax := cfg.Vocab, 0, 0.0
			for p := range ids {
				la, lb := logSoftmax64(a.Logits[p*V:(p+1)*V]), logSoftmax64(b.Logits[p*V:(p+1)*V])
				ia, ib, kl := 0, 0, 0.0
				for i := range la {
					kl += math.Exp(la[i]) * (la[i] - lb[i])
					if la[i] > la[ia] {
						ia = i
					}
					if lb[i] > lb[ib] {
						ib = i
					}
				}
				if ia == ib {
					agree++
				}
				klMax = math.Max(klMax, kl)
			}
			t.Logf("Q8_0 by llama.cpp vs float32: top-1 %d/%d, KL(f32‖q8_0) max %.3g", agree, len(ids), klMax)
			if agree < len(ids)*95/100 || klMax > 0.05 {
				t.Errorf("the Q8_0 file predicts unlike the float32 model: top-1 %d/%d, KL max %.3g (bounds: 95 %%, 0.05)", agree, len(ids), klMax)
			}
		})
	}
}

func logSoftmax64(z []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range z {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range z {
		s += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(z))
	for i, v := range z {
		out[i] = float64(v) - mx - math.Log(s)
	}
	return out
}

// TestGGUFLlama3FactorsMatchRoPE: the rope_freqs table of llama3 scaling
// (what llama.cpp divides each frequency by) agrees with probe's own llama3
// frequencies (rope.go, after transformers): default/table = llama3 for
// every frequency of Llama 3.1 8B's head (θ 500000, d 128, factor 8) and
// Llama 3.2's (factor 32).
func TestGGUFLlama3FactorsMatchRoPE(t *testing.T) {
	for _, factor := range []float64{8, 32} {
		rc := RoPEConfig{Theta: 500000, Type: "llama3", Factor: factor, LowFreq: 1, HighFreq: 4, OrigMax: 8192}
		plain := RoPEConfig{Theta: 500000, Type: "default", Factor: 1}
		want, base := rc.invFreq(128, 16), plain.invFreq(128, 16)
		table := ggufLlama3Factors(rc.Theta, 128, factor, 1, 4, 8192)
		blended := 0
		for i := range want {
			got := base[i] / table[i]
			if math.Abs(float64(got-want[i])) > 1e-6*float64(want[i]) {
				t.Errorf("factor %g, frequency %d: θ-frequency/table = %g, probe's llama3 %g", factor, i, got, want[i])
			}
			if table[i] != 1 && table[i] != float32(factor) {
				blended++
			}
		}
		if blended == 0 {
			t.Errorf("factor %g: no frequency in the blended band: the test does not reach it", factor)
		}
	}
}

// writeOpenGGUF writes cfg's tensors as a GGUF file in a temporary folder
// (WriteGGUFFromHF) and opens it; the file is closed when the test ends.
func writeOpenGGUF(t *testing.T, cfg *Config, tensors []checkpoint.Tensor) *checkpoint.GGUFFile {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := WriteGGUFFromHF(p, cfg, tensors); err != nil {
		t.Fatal(err)
	}
	g, err := checkpoint.OpenGGUF(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}
