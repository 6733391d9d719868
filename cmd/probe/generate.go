package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
)

// generateArchs are the architectures probe generate makes.
var generateArchs = model.SmallArchs()

// generateArchNames are generateArchs as strings (--arch's completion).
func generateArchNames() []string {
	s := make([]string, len(generateArchs))
	for i, a := range generateArchs {
		s[i] = string(a)
	}
	return s
}

// archList spells generateArchs for messages.
func archList() string { return strings.Join(generateArchNames(), ", ") }

func cmdGenerate(args []string, w io.Writer) error {
	fs := newFlags("generate")
	arch := fs.String("arch", "qwen3", "architecture: "+archList()+" (gated: Qiu et al.'s headwise output gate)")
	layers := fs.Int("layers", 4, "layers")
	dModel := fs.Int("d-model", 256, "model width")
	heads := fs.Int("heads", 8, "query heads")
	kvHeads := fs.Int("kv-heads", 4, "key/value heads")
	dMLP := fs.Int("d-mlp", 0, "MLP width (default 3·d_model; GPT-2 4·d_model)")
	headDim := fs.Int("head-dim", 0, "softmax attention head width, head_dim (default d_model/heads; a partial rotary factor is kept)")
	linKeyHeads := fs.Int("linear-key-heads", 0, "qwen3_5: Gated DeltaNet key heads, linear_num_key_heads (default --heads)")
	linValueHeads := fs.Int("linear-value-heads", 0, "qwen3_5: Gated DeltaNet value heads, linear_num_value_heads (default 2·--heads)")
	linKeyDim := fs.Int("linear-key-dim", 0, "qwen3_5: Gated DeltaNet key head width, linear_key_head_dim (default d_model/heads)")
	linValueDim := fs.Int("linear-value-dim", 0, "qwen3_5: Gated DeltaNet value head width, linear_value_head_dim (default d_model/heads)")
	vocab := fs.Int("vocab", 1024, "vocabulary size")
	maxPos := fs.Int("max-pos", 32768, "max_position_embeddings")
	tied := fs.Bool("tie-embeddings", true, "the LM head is the token embedding (config.json's tie_word_embeddings); false writes its own lm_head.weight, as Llama 3.1 8B has")
	seed := fs.Uint64("seed", 1, "random seed")
	dtype := fs.String("dtype", "f32", "stored dtype of the weights: f32, bf16 or f16 (rounded to nearest even, as torch's .to(torch.bfloat16)); config.json's torch_dtype and dtype say it")
	shardSize := fs.String("shard-size", "", "split the weights into shards of at most this many bytes, as Hugging Face's save_pretrained(max_shard_size=...) does: model-00001-of-0000N.safetensors and model.safetensors.index.json; 500MB and 2GB are decimal, 5GiB binary (default: one model.safetensors)")
	out := fs.String("out", "", "output folder; it must be new or empty unless --force")
	force := fs.Bool("force", false, "write into an --out that already holds files (config.json and the checkpoint's files are replaced; other files stay and are listed)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("unexpected argument %q", pos[0])
	case *out == "":
		return fmt.Errorf("--out is required")
	case !slices.Contains(generateArchs, model.Arch(*arch)):
		return fmt.Errorf("--arch %q: probe generate makes %s", *arch, archList())
	}
	dt, ok := generateDTypes[*dtype]
	if !ok {
		return fmt.Errorf("--dtype %q: want f32, bf16 or f16", *dtype)
	}
	maxShard := int64(math.MaxInt64)
	if *shardSize != "" {
		if maxShard, err = checkpoint.ParseSize(*shardSize); err != nil {
			return fmt.Errorf("--shard-size: %v", err)
		}
	}
	if err := refuseNonEmpty(*out, "a random checkpoint (config.json, model.safetensors)", *force); err != nil {
		return err
	}
	before, err := folderContents(*out)
	if err != nil {
		return err
	}
	if *shardSize == "" && slices.Contains(before, checkpoint.ShardIndexName) {
		// checkpoint.Open reads a sharded index before model.safetensors:
		// the old weights would load instead of the new ones.
		return fmt.Errorf("--out %s holds model.safetensors.index.json, which would be read instead of the new model.safetensors: remove the old checkpoint's files first, or choose another --out", *out)
	}
	cfg, err := model.SmallConfig(model.Arch(*arch), model.Size{Layers: *layers, DModel: *dModel, Heads: *heads, KVHeads: *kvHeads, Vocab: *vocab, MaxPos: *maxPos})
	if err != nil {
		return fmt.Errorf("--arch %s: %w", *arch, err)
	}
	if cfg, err = reshape(cfg, shapeFlags{DMLP: *dMLP, HeadDim: *headDim, LinearKeyHeads: *linKeyHeads, LinearValueHeads: *linValueHeads,
		LinearKeyDim: *linKeyDim, LinearValueDim: *linValueDim}); err != nil {
		return fmt.Errorf("--arch %s: %w", *arch, err)
	}
	if !*tied {
		cfg.TiedHead = false
		if back, err := model.ParseConfig(mustJSON(cfg.HFConfig())); err != nil || back.TiedHead {
			return fmt.Errorf("--tie-embeddings=false does not apply to --arch %s (its head is always the embedding)", *arch)
		}
	}
	// The weight matrices are made in the stored dtype (an 8B model in
	// bf16 is generated in 16 GB); the rest is converted here.
	cfg.DType = dt.torch
	m, tensors, err := model.Generate(cfg, *seed)
	if err != nil {
		return err
	}
	for i := range tensors {
		if x, ok := tensors[i].Data.([]float32); ok {
			if tensors[i].Data, err = checkpoint.Convert(x, dt.stored); err != nil {
				return err
			}
		}
	}
	// config.json as Hugging Face writes it for these weights: Gemma's
	// embedding scale √d is rounded to this dtype when the model runs.
	fields := cfg.HFConfig()
	fields["torch_dtype"], fields["dtype"] = dt.torch, dt.torch
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "config.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	written, err := checkpoint.WriteSharded(*out, tensors, maxShard, map[string]string{"format": "pt"})
	if err != nil {
		return err
	}
	if !slices.Contains(written, checkpoint.ShardIndexName) && slices.Contains(before, checkpoint.ShardIndexName) {
		return fmt.Errorf("--out %s: the weights fit in one model.safetensors (--shard-size %s), but the folder's old model.safetensors.index.json would be read instead: remove it and its shards", *out, *shardSize)
	}
	fmt.Fprintf(w, "wrote a random %s checkpoint (%d parameters, %s) to %s: %s\n", cfg.Arch, m.Parameters, dt.torch, *out, listNames(written))
	var kept []string
	for _, n := range before {
		if n != "config.json" && !slices.Contains(written, n) {
			kept = append(kept, n)
		}
	}
	if len(kept) > 0 {
		fmt.Fprintf(w, "left as they were (not from this checkpoint; remove them if they belonged to the one replaced): %s\n", listNames(kept))
	}
	return nil
}

// generateDTypes are the stored dtypes probe generate writes, by --dtype:
// the safetensors dtype and config.json's torch_dtype.
var generateDTypes = map[string]struct{ stored, torch string }{
	"f32":  {"F32", "float32"},
	"bf16": {"BF16", "bfloat16"},
	"f16":  {"F16", "float16"},
}

// mustJSON encodes config.json fields (maps of numbers, strings and
// booleans, which always encode).
func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

// shapeFlags are generate's widths beyond model.Size (0: the family's
// default), named as config.json names them: intermediate_size, head_dim,
// linear_num_key_heads, linear_num_value_heads, linear_key_head_dim,
// linear_value_head_dim. They reach e.g. the Qwen3.5-0.8B shape, whose
// head_dim (256) is not d_model/heads.
type shapeFlags struct {
	DMLP, HeadDim                                                  int
	LinearKeyHeads, LinearValueHeads, LinearKeyDim, LinearValueDim int
}

// reshape returns cfg with the widths of f set, as a reader of its
// config.json gets it; a width the family's config.json does not carry is
// an error naming its flag.
func reshape(cfg model.Config, f shapeFlags) (model.Config, error) {
	if f == (shapeFlags{}) {
		return cfg, nil
	}
	if f.DMLP > 0 {
		cfg.DMLP = f.DMLP
	}
	if f.HeadDim > 0 {
		if cfg.RoPE.Dims > 0 { // keep the rotated fraction
			if cfg.RoPE.Dims*f.HeadDim%cfg.DHead != 0 || cfg.RoPE.Dims*f.HeadDim/cfg.DHead%2 != 0 {
				return cfg, fmt.Errorf("--head-dim %d: the rotated fraction %d/%d of a head is not a whole, even number of dimensions", f.HeadDim, cfg.RoPE.Dims, cfg.DHead)
			}
			cfg.RoPE.Dims = cfg.RoPE.Dims * f.HeadDim / cfg.DHead
		}
		cfg.DHead = f.HeadDim
	}
	linear := []struct {
		flag string
		v    int
		dst  func(*model.DeltaNetConfig) *int
	}{
		{"--linear-key-heads", f.LinearKeyHeads, func(d *model.DeltaNetConfig) *int { return &d.KeyHeads }},
		{"--linear-value-heads", f.LinearValueHeads, func(d *model.DeltaNetConfig) *int { return &d.ValueHeads }},
		{"--linear-key-dim", f.LinearKeyDim, func(d *model.DeltaNetConfig) *int { return &d.KeyDim }},
		{"--linear-value-dim", f.LinearValueDim, func(d *model.DeltaNetConfig) *int { return &d.ValueDim }},
	}
	for _, l := range linear {
		if l.v <= 0 {
			continue
		}
		if cfg.DeltaNet == nil {
			return cfg, fmt.Errorf("%s applies to models with Gated DeltaNet layers (qwen3_5)", l.flag)
		}
		dn := *cfg.DeltaNet // a copy: cfg's may be shared
		*l.dst(&dn) = l.v
		cfg.DeltaNet = &dn
	}
	back, err := model.ParseConfig(mustJSON(cfg.HFConfig()))
	if err != nil {
		return cfg, err
	}
	// Only a width that the family's config.json carries takes effect.
	if f.DMLP > 0 && back.DMLP != f.DMLP {
		return cfg, fmt.Errorf("--d-mlp does not apply (the MLP width follows from --d-model)")
	}
	if f.HeadDim > 0 && back.DHead != f.HeadDim {
		return cfg, fmt.Errorf("--head-dim does not apply (the head width is d_model/heads)")
	}
	for _, l := range linear {
		if l.v > 0 && *l.dst(back.DeltaNet) != l.v {
			return cfg, fmt.Errorf("%s %d does not apply", l.flag, l.v)
		}
	}
	return *back, nil
}
