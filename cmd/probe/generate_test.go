package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
)

// TestGenerateDTypeSharded: for every architecture probe generate makes, a
// checkpoint written with --dtype bf16 or f16 and a --shard-size that
// splits it loads back with the stored dtype, runs to the logits of the
// float32 model whose weights were rounded to that dtype first (bit for
// bit: the model keeps the 16-bit weights as stored and its products widen
// them exactly, summing in the float32 products' order), and its index is what
// Hugging Face's save_pretrained writes.
func TestGenerateDTypeSharded(t *testing.T) {
	const shardSize = 12000 // bytes ("12KB"): several shards of these tiny models
	ids := [][]int{{1, 5, 9, 2, 7, 3, 8, 4, 6, 0, 11, 12}}
	for _, dt := range []struct{ flag, stored, torch string }{{"bf16", "BF16", "bfloat16"}, {"f16", "F16", "float16"}} {
		for _, arch := range model.SmallArchs() {
			t.Run(dt.flag+"/"+string(arch), func(t *testing.T) {
				size := model.Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 4, Vocab: 64, MaxPos: 128}
				dir := filepath.Join(t.TempDir(), "ck")
				if code, _, errs := probe(t, "generate", "--arch", string(arch), "--layers", "2", "--d-model", "32", "--heads", "4",
					"--kv-heads", "4", "--vocab", "64", "--max-pos", "128", "--dtype", dt.flag, "--shard-size", "12KB", "--out", dir); code != 0 {
					t.Fatalf("generate: %s", errs)
				}
				m, err := model.Load(dir, model.LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(m.DTypes, []string{dt.stored}) || m.Format != checkpoint.FormatSafetensorsSharded {
					t.Fatalf("loaded dtypes %v, format %s; want [%s], %s", m.DTypes, m.Format, dt.stored, checkpoint.FormatSafetensorsSharded)
				}
				cj, err := os.ReadFile(filepath.Join(dir, "config.json"))
				if err != nil {
					t.Fatal(err)
				}
				var fields map[string]any
				if err := json.Unmarshal(cj, &fields); err != nil || fields["torch_dtype"] != dt.torch || fields["dtype"] != dt.torch {
					t.Fatalf("config.json torch_dtype %v, dtype %v (%v); want %s for both", fields["torch_dtype"], fields["dtype"], err, dt.torch)
				}

				// The reference: the same tensors rounded to the dtype and
				// widened again, stored as F32 under the same config.json.
				cfg, err := model.SmallConfig(arch, size)
				if err != nil {
					t.Fatal(err)
				}
				_, tensors, err := model.Generate(cfg, 1)
				if err != nil {
					t.Fatal(err)
				}
				var bytesTotal, elems int64
				for i, tn := range tensors {
					x := tn.Data.([]float32)
					r := make([]float32, len(x))
					for j, v := range x {
						if dt.stored == "BF16" {
							r[j] = checkpoint.BF16ToFloat32(checkpoint.Float32ToBF16(v))
						} else {
							r[j] = checkpoint.F16ToFloat32(checkpoint.Float32ToF16(v))
						}
					}
					tensors[i].Data = r
					bytesTotal += 2 * int64(len(x))
					elems += int64(len(x))
				}
				ref := filepath.Join(t.TempDir(), "ref")
				os.MkdirAll(ref, 0o755)
				os.WriteFile(filepath.Join(ref, "config.json"), cj, 0o644)
				if err := checkpoint.WriteSafetensors(filepath.Join(ref, "model.safetensors"), tensors, nil); err != nil {
					t.Fatal(err)
				}
				want, err := model.Load(ref, model.LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				a, err := m.Forward(ids, model.Options{Logits: true})
				if err != nil {
					t.Fatal(err)
				}
				b, err := want.Forward(ids, model.Options{Logits: true})
				if err != nil {
					t.Fatal(err)
				}
				for i := range b.Logits {
					if math.Float32bits(a.Logits[i]) != math.Float32bits(b.Logits[i]) {
						t.Fatalf("logit %d: %v from the %s checkpoint, %v from float32 weights rounded to %s", i, a.Logits[i], dt.stored, b.Logits[i], dt.stored)
					}
				}
				checkIndex(t, dir, tensors, shardSize, bytesTotal, elems)
			})
		}
	}
}

// checkIndex checks a sharded checkpoint's model.safetensors.index.json
// against Hugging Face's layout: metadata.total_size (bytes) and
// total_parameters, a weight_map that names every tensor and the shard that
// holds it, shards named model-0000i-of-0000N.safetensors of at most
// shardSize bytes of data unless they hold one tensor, and the JSON
// indented by 2 with sorted keys and a final newline.
func checkIndex(t *testing.T, dir string, tensors []checkpoint.Tensor, shardSize, bytesTotal, elems int64) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, checkpoint.ShardIndexName))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Metadata  map[string]json.Number `json:"metadata"`
		WeightMap map[string]string      `json:"weight_map"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&index); err != nil {
		t.Fatal(err)
	}
	if index.Metadata["total_size"].String() != strconv.FormatInt(bytesTotal, 10) ||
		index.Metadata["total_parameters"].String() != strconv.FormatInt(elems, 10) || len(index.Metadata) != 2 {
		t.Errorf("index metadata %v, want total_size %d and total_parameters %d", index.Metadata, bytesTotal, elems)
	}
	// Python's json.dumps(index, indent=2, sort_keys=True) + "\n".
	var b strings.Builder
	fmt.Fprintf(&b, "{\n  \"metadata\": {\n    \"total_parameters\": %d,\n    \"total_size\": %d\n  },\n  \"weight_map\": {\n", elems, bytesTotal)
	names := make([]string, 0, len(index.WeightMap))
	for n := range index.WeightMap {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		sep := ","
		if i == len(names)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "    %q: %q%s\n", n, index.WeightMap[n], sep)
	}
	b.WriteString("  }\n}\n")
	if string(raw) != b.String() {
		t.Errorf("index file is not laid out as transformers writes it:\n%s\nwant\n%s", raw, b.String())
	}
	shards := map[string][]string{}
	for n, s := range index.WeightMap {
		shards[s] = append(shards[s], n)
	}
	if len(shards) < 2 {
		t.Fatalf("%d shards, want several", len(shards))
	}
	for i := 1; i <= len(shards); i++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i, len(shards))
		held := shards[name]
		if len(held) == 0 {
			t.Fatalf("weight_map names no tensor in %s (shards %v)", name, slices.Collect(func(yield func(string) bool) {
				for s := range shards {
					yield(s)
				}
			}))
		}
		c, err := checkpoint.OpenFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(held)
		if !slices.Equal(c.Names(), held) {
			t.Errorf("%s holds %v, weight_map puts %v there", name, c.Names(), held)
		}
		var data int64
		for _, n := range c.Names() {
			info, _ := c.Info(n)
			e := int64(2)
			for _, d := range info.Shape {
				e *= int64(d)
			}
			data += e
		}
		if data > shardSize && len(held) > 1 {
			t.Errorf("%s holds %d bytes of %d tensors, over the shard size %d", name, data, len(held), shardSize)
		}
		if c.Metadata()["format"] != "pt" {
			t.Errorf("%s: __metadata__ %v, want format pt", name, c.Metadata())
		}
		c.Close()
	}
	if len(index.WeightMap) != len(tensors) {
		t.Errorf("weight_map has %d tensors, the model %d", len(index.WeightMap), len(tensors))
	}
}

// TestGenerateDTypeFlags: bad --dtype and --shard-size values are refused
// naming the flag; f32 is the default and one shard is model.safetensors.
func TestGenerateDTypeFlags(t *testing.T) {
	base := []string{"generate", "--arch", "llama", "--layers", "1", "--d-model", "16", "--heads", "2", "--kv-heads", "2", "--vocab", "32", "--max-pos", "64"}
	for _, c := range []struct{ flag, value, want string }{
		{"--dtype", "fp8", `--dtype "fp8": want f32, bf16 or f16`},
		{"--shard-size", "0", `--shard-size: size "0"`},
		{"--shard-size", "5XB", `--shard-size: size "5XB"`},
		{"--shard-size", "-2GB", `--shard-size: size "-2GB"`},
	} {
		code, _, errs := probe(t, append(base, c.flag, c.value, "--out", filepath.Join(t.TempDir(), "x"))...)
		if code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("%s %s: exit %d, %q; want exit 1 and %q", c.flag, c.value, code, errs, c.want)
		}
	}
	dir := filepath.Join(t.TempDir(), "one")
	if code, _, errs := probe(t, append(base, "--shard-size", "5GB", "--out", dir)...); code != 0 {
		t.Fatal(errs)
	}
	names, _ := folderContents(dir)
	if !slices.Equal(names, []string{"config.json", "model.safetensors"}) {
		t.Errorf("one shard wrote %v, want config.json and model.safetensors", names)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil || !slices.Equal(m.DTypes, []string{"F32"}) {
		t.Fatalf("loaded %v, %v; want F32 weights", m, err)
	}
}

// TestGenerateUntied: --tie-embeddings=false writes an lm_head of its own
// (Llama 3.1 8B's layout), which loads as an untied head with one more
// vocabulary × d_model matrix of parameters.
func TestGenerateUntied(t *testing.T) {
	base := []string{"generate", "--arch", "llama", "--layers", "1", "--d-model", "16", "--heads", "2", "--kv-heads", "2", "--vocab", "32", "--max-pos", "64", "--dtype", "bf16"}
	tied, untied := filepath.Join(t.TempDir(), "tied"), filepath.Join(t.TempDir(), "untied")
	if code, _, errs := probe(t, append(base, "--out", tied)...); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := probe(t, append(base, "--tie-embeddings=false", "--out", untied)...); code != 0 {
		t.Fatal(errs)
	}
	a, err := model.Load(tied, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := model.Load(untied, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !a.TiedHead || b.TiedHead || b.Parameters != a.Parameters+32*16 {
		t.Errorf("tied %v with %d parameters, untied %v with %d; want true, false and 512 more", a.TiedHead, a.Parameters, b.TiedHead, b.Parameters)
	}
}

// TestGenerateMappedLoad: a float32, bf16 or f16 checkpoint loads without
// copying its weights onto the heap (they are views of the mapped file,
// which model.Load closes; 16-bit matrices stay 16-bit, so the model holds
// about 2 bytes per parameter), and the model runs after the checkpoint is
// closed and its heap collected; a float32 one to the logits of the model
// generated in memory, bit for bit (16-bit ones: TestGenerateDTypeSharded).
// (GPT-2's loader transposes its Conv1D weights, which copies them.)
func TestGenerateMappedLoad(t *testing.T) {
	size := model.Size{Layers: 2, DModel: 128, Heads: 4, KVHeads: 2, Vocab: 1000, MaxPos: 128}
	for _, dtype := range []string{"f32", "bf16", "f16"} {
		for _, arch := range []model.Arch{model.ArchQwen3, model.ArchGated, model.ArchGPT2} {
			copied := arch == model.ArchGPT2
			t.Run(dtype+"/"+string(arch), func(t *testing.T) {
				mappedLoad(t, arch, size, dtype, copied)
			})
		}
	}
}

// mappedLoad is TestGenerateMappedLoad for one architecture and dtype.
func mappedLoad(t *testing.T, arch model.Arch, size model.Size, dtype string, copied bool) {
	dir := filepath.Join(t.TempDir(), "ck")
	if code, _, errs := probe(t, "generate", "--arch", string(arch), "--layers", "2", "--d-model", "128", "--heads", "4",
		"--kv-heads", "2", "--vocab", "1000", "--max-pos", "128", "--dtype", dtype, "--out", dir); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m, err := model.Load(dir, model.LoadOptions{})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var loaded runtime.MemStats
	runtime.ReadMemStats(&loaded)
	alloc, weights := after.TotalAlloc-before.TotalAlloc, uint64(m.WeightBytes)
	heap := int64(loaded.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%s: Load allocated %d bytes, heap grew by %d, for %d bytes of weights (%d parameters)", dtype, alloc, heap, weights, m.Parameters)
	if canMapFiles() && !copied && (alloc > weights/4 || heap > int64(weights)/4) {
		t.Errorf("Load allocated %d bytes, heap %d bytes, for %d bytes of %s weights: they were copied, not mapped", alloc, heap, weights, dtype)
	}
	// norms, biases and GPT-2's position embeddings are widened: a few %
	if dtype != "f32" && float64(m.WeightBytes) > 2.25*float64(m.Parameters) {
		t.Errorf("%d %s parameters held in %d bytes, want about 2 per parameter (matrices kept as stored)", m.Parameters, dtype, m.WeightBytes)
	}
	runtime.GC() // nothing the model runs on may be collected
	cfg, err := model.SmallConfig(arch, size)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := model.Generate(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	ids := [][]int{{1, 5, 9, 2, 7, 3, 8, 4, 6, 0, 11, 12, 999}}
	a, err := m.Forward(ids, model.Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	if dtype != "f32" {
		return
	}
	b, err := want.Forward(ids, model.Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range b.Logits {
		if math.Float32bits(a.Logits[i]) != math.Float32bits(b.Logits[i]) {
			t.Fatalf("logit %d: %v from the mapped checkpoint after Close, %v generated in memory", i, a.Logits[i], b.Logits[i])
		}
	}
}

// canMapFiles reports whether checkpoint files are memory-mapped here
// (checkpoint/mmap_unix.go).
func canMapFiles() bool {
	switch runtime.GOOS {
	case "windows", "plan9", "js", "wasip1":
		return false
	}
	return true
}

// qwen35Small08B are the probe generate flags of the Qwen3.5-0.8B text
// shape (docs/performance.md): 24 layers, d_model 1024, 3:1 Gated DeltaNet
// to gated softmax, 16 × 128 key and value heads for Gated DeltaNet, 8 query
// and 2 key/value heads of 256 for softmax, MLP 3584, vocabulary 248320,
// tied embeddings.
var qwen35Small08B = []string{"--arch", "qwen3_5", "--layers", "24", "--d-model", "1024", "--heads", "8", "--kv-heads", "2",
	"--head-dim", "256", "--linear-key-heads", "16", "--linear-value-heads", "16", "--linear-key-dim", "128",
	"--linear-value-dim", "128", "--d-mlp", "3584", "--vocab", "248320", "--max-pos", "262144"}

// TestGenerateQwen35Shape: the widths beyond --d-model/--heads reach the
// Qwen3.5-0.8B shape (checked on its config, without writing its 3 GB of
// weights), whose config.json carries every shape field the golden
// qwen35_text config.json has; at a tiny size the same flags write a
// checkpoint that loads and runs; a width a family does not carry is an
// error naming its flag.
func TestGenerateQwen35Shape(t *testing.T) {
	flag := func(name string) int {
		i := slices.Index(qwen35Small08B, name)
		v, _ := strconv.Atoi(qwen35Small08B[i+1])
		return v
	}
	cfg, err := model.SmallConfig(model.ArchQwen35, model.Size{Layers: flag("--layers"), DModel: flag("--d-model"), Heads: flag("--heads"),
		KVHeads: flag("--kv-heads"), Vocab: flag("--vocab"), MaxPos: flag("--max-pos")})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = reshape(cfg, shapeFlags{DMLP: flag("--d-mlp"), HeadDim: flag("--head-dim"), LinearKeyHeads: flag("--linear-key-heads"),
		LinearValueHeads: flag("--linear-value-heads"), LinearKeyDim: flag("--linear-key-dim"), LinearValueDim: flag("--linear-value-dim")})
	if err != nil {
		t.Fatal(err)
	}
	hf := cfg.HFConfig()
	var got map[string]any
	json.Unmarshal(mustJSON(hf), &got)
	for k, want := range map[string]any{"num_hidden_layers": 24.0, "hidden_size": 1024.0, "num_attention_heads": 8.0, "num_key_value_heads": 2.0,
		"head_dim": 256.0, "linear_num_key_heads": 16.0, "linear_num_value_heads": 16.0, "linear_key_head_dim": 128.0,
		"linear_value_head_dim": 128.0, "intermediate_size": 3584.0, "vocab_size": 248320.0, "tie_word_embeddings": true,
		"partial_rotary_factor": 0.25, "attn_output_gate": true} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	types := got["layer_types"].([]any)
	for l, ty := range types {
		if want := map[bool]string{true: "full_attention", false: "linear_attention"}[l%4 == 3]; ty != want {
			t.Errorf("layer %d: %v, want %s (3 Gated DeltaNet layers to 1 softmax layer)", l, ty, want)
		}
	}
	if fmt.Sprint(got["rope_parameters"].(map[string]any)["mrope_section"]) != "[11 11 10]" {
		t.Errorf("mrope_section %v, want [11 11 10] (32 rotated pairs of a 256 head)", got["rope_parameters"])
	}
	if b, err := os.ReadFile(filepath.Join(goldenDir, "qwen35_text", "config.json")); err != nil {
		t.Logf("golden qwen35_text not available (%v): field names not compared", err)
	} else {
		var gold map[string]any
		json.Unmarshal(b, &gold)
		for k := range gold {
			switch k {
			case "bos_token_id", "eos_token_id", "pad_token_id", "transformers_version", "use_cache", "initializer_range", "attention_dropout":
				continue // not shape
			}
			if _, ok := got[k]; !ok {
				t.Errorf("config.json of the 0.8B shape has no %q (the golden qwen35_text config has)", k)
			}
		}
	}

	tmp := t.TempDir()
	out := filepath.Join(tmp, "tiny")
	args := []string{"generate", "--arch", "qwen3_5", "--layers", "4", "--d-model", "64", "--heads", "2", "--kv-heads", "1", "--head-dim", "48",
		"--linear-key-heads", "4", "--linear-value-heads", "8", "--linear-key-dim", "16", "--linear-value-dim", "24", "--d-mlp", "100",
		"--vocab", "300", "--out", out}
	if code, _, errs := probe(t, args...); code != 0 {
		t.Fatal(errs)
	}
	m, err := model.Load(out, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dn := m.Config.DeltaNet
	if m.Config.DHead != 48 || m.Config.RoPE.Dims != 12 || dn.KeyHeads != 4 || dn.ValueHeads != 8 || dn.KeyDim != 16 || dn.ValueDim != 24 || m.Config.DMLP != 100 {
		t.Errorf("loaded config: head dim %d, rotated %d, DeltaNet %+v, MLP %d", m.Config.DHead, m.Config.RoPE.Dims, *dn, m.Config.DMLP)
	}
	if o, err := m.Forward([][]int{{1, 2, 3, 4, 5, 6, 7, 8}}, model.Options{Logits: true}); err != nil || len(o.Logits) != 8*300 {
		t.Errorf("forward: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--arch", "llama", "--linear-key-heads", "2"}, "--linear-key-heads applies to models with Gated DeltaNet layers"},
		{[]string{"--arch", "gpt2", "--kv-heads", "2", "--head-dim", "8"}, "--head-dim does not apply"},
	} {
		args := append([]string{"generate", "--layers", "1", "--d-model", "32", "--heads", "2", "--kv-heads", "1", "--out", filepath.Join(tmp, "x")}, c.args...)
		if code, _, errs := probe(t, args...); code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d: %s", c.args, code, errs)
		}
	}
}

// TestGenerateMXFP4Experts: --expert-format mxfp4 writes gpt_oss's experts
// in the released layout (uint8 *_blocks [E, out, in/32, 16] and *_scales
// [E, out, in/32], quantization_config quant_method mxfp4, no float expert
// matrices), which loads with its experts kept in MXFP4 and runs to the
// logits of the model generated in memory, bit for bit; the flag is
// refused for a family without that layout, and --set for a field the
// family does not read back.
func TestGenerateMXFP4Experts(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "ck")
	args := []string{"--arch", "gpt_oss", "--layers", "2", "--d-model", "64", "--heads", "4", "--kv-heads", "2", "--vocab", "80", "--max-pos", "128",
		"--set", "num_local_experts=5", "--set", "num_experts_per_tok=3", "--set", "intermediate_size=96", "--expert-format", "mxfp4"}
	if code, _, errs := probe(t, append(append([]string{"generate"}, args...), "--shard-size", "40KB", "--out", dir)...); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ck.Names() {
		info, _ := ck.Info(name)
		switch {
		case strings.HasSuffix(name, "proj_blocks") || strings.HasSuffix(name, "proj_scales"):
			out, in := 2*96, 64
			if strings.Contains(name, "down_proj") {
				out, in = 64, 96
			}
			want := []int{5, out, in / 32, 16}
			if strings.HasSuffix(name, "_scales") {
				want = want[:3]
			}
			if info.DType != "U8" || !slices.Equal(info.Shape, want) {
				t.Errorf("%s: %s %v, want U8 %v", name, info.DType, info.Shape, want)
			}
		case strings.Contains(name, "experts.") && !strings.HasSuffix(name, "_bias"):
			t.Errorf("%s: a float expert matrix beside the MXFP4 ones", name)
		}
	}
	ck.Close()
	var fields struct {
		Q struct {
			Method string `json:"quant_method"`
		} `json:"quantization_config"`
	}
	cj, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(cj, &fields); err != nil || fields.Q.Method != "mxfp4" {
		t.Errorf("config.json quantization_config %+v (%v), want quant_method mxfp4", fields.Q, err)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m.DTypes) != "[F32 MXFP4]" || m.Config.MoE.Experts != 5 || m.Config.MoE.TopK != 3 || m.Config.MoE.DExpert != 96 {
		t.Fatalf("loaded dtypes %v, experts %+v; want [F32 MXFP4], 5 experts of width 96, 3 a token", m.DTypes, *m.Config.MoE)
	}
	opts := GenerateOptions{Arch: "gpt_oss", Layers: 2, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 80, MaxPos: 128, Tied: true, ExpertFormat: "mxfp4",
		Set: []string{"num_local_experts=5", "num_experts_per_tok=3", "intermediate_size=96"}}
	cfg, err := opts.config()
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := model.Generate(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	ids := [][]int{{1, 5, 9, 2, 7, 3, 8, 4, 6, 0, 11, 12, 79}}
	a, err := m.Forward(ids, model.Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := want.Forward(ids, model.Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range b.Logits {
		if math.Float32bits(a.Logits[i]) != math.Float32bits(b.Logits[i]) || math.IsNaN(float64(a.Logits[i])) {
			t.Fatalf("logit %d: %v from the written checkpoint, %v generated in memory", i, a.Logits[i], b.Logits[i])
		}
	}

	base := []string{"generate", "--layers", "1", "--d-model", "32", "--heads", "2", "--kv-heads", "1", "--out", filepath.Join(tmp, "x")}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--arch", "mixtral", "--expert-format", "mxfp4"}, "--expert-format mxfp4 applies to gpt_oss"},
		{[]string{"--arch", "gpt_oss", "--expert-format", "fp8"}, `--expert-format "fp8": want float or mxfp4`},
		{[]string{"--arch", "llama", "--set", "hidden_size"}, `--set "hidden_size": want field=value`},
		{[]string{"--arch", "llama", "--set", "no_such_field=3"}, `--set "no_such_field=3" does not apply`},
		{[]string{"--arch", "gpt_oss", "--set", "num_experts_per_tok=9"}, "num_experts_per_tok 9 exceeds the 4 experts"},
	} {
		if code, _, errs := probe(t, append(base, c.args...)...); code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d: %s; want %q", c.args, code, errs, c.want)
		}
	}
}
