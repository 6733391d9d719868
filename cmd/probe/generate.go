package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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

// GenerateOptions are the options of probe generate.
type GenerateOptions struct {
	cmdIO
	Arch    string
	Layers  int
	DModel  int
	Heads   int
	KVHeads int
	Shape   shapeFlags // widths beyond the model.Size ones (0: the family's default)
	Vocab   int
	MaxPos  int
	Tied    bool
	Seed    uint64
	DType   string
	// ExpertFormat is how the experts' matrices are stored: "float" (the
	// --dtype, the default) or "mxfp4" (gpt_oss's released layout).
	ExpertFormat string
	// Set are config.json fields field=JSON value, applied after the
	// shape flags (--set).
	Set       []string
	ShardSize string
	Out       string
	Force     bool
}

// flags declares the flags of probe generate into f and their relations.
func (o *GenerateOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	f.StringVar(&o.Arch, "arch", "qwen3", "architecture: "+archList()+" (gated: Qiu et al.'s headwise output gate)")
	f.IntVar(&o.Layers, "layers", 4, "layers")
	f.IntVar(&o.DModel, "d-model", 256, "model width")
	f.IntVar(&o.Heads, "heads", 8, "query heads")
	f.IntVar(&o.KVHeads, "kv-heads", 4, "key/value heads")
	f.IntVar(&o.Shape.DMLP, "d-mlp", 0, "MLP width (default 3·d_model; GPT-2 4·d_model)")
	f.IntVar(&o.Shape.HeadDim, "head-dim", 0, "softmax attention head width, head_dim (default d_model/heads; a partial rotary factor is kept)")
	f.IntVar(&o.Shape.LinearKeyHeads, "linear-key-heads", 0, "qwen3_5: Gated DeltaNet key heads, linear_num_key_heads (default --heads)")
	f.IntVar(&o.Shape.LinearValueHeads, "linear-value-heads", 0, "qwen3_5: Gated DeltaNet value heads, linear_num_value_heads (default 2·--heads)")
	f.IntVar(&o.Shape.LinearKeyDim, "linear-key-dim", 0, "qwen3_5: Gated DeltaNet key head width, linear_key_head_dim (default d_model/heads)")
	f.IntVar(&o.Shape.LinearValueDim, "linear-value-dim", 0, "qwen3_5: Gated DeltaNet value head width, linear_value_head_dim (default d_model/heads)")
	f.IntVar(&o.Vocab, "vocab", 1024, "vocabulary size")
	f.IntVar(&o.MaxPos, "max-pos", 32768, "max_position_embeddings")
	f.BoolVar(&o.Tied, "tie-embeddings", true, "the LM head is the token embedding (config.json's tie_word_embeddings); false writes its own lm_head.weight, as Llama 3.1 8B has")
	f.Uint64Var(&o.Seed, "seed", 1, "random seed")
	f.StringVar(&o.DType, "dtype", "f32", "stored dtype of the weights: f32, bf16 or f16 (rounded to nearest even, as torch's .to(torch.bfloat16)); config.json's torch_dtype and dtype say it")
	f.StringVar(&o.ExpertFormat, "expert-format", "float", "stored format of the experts' matrices: float (the --dtype) or mxfp4 (gpt_oss only: the released layout, *_blocks and *_scales uint8 tensors with quantization_config quant_method mxfp4; each weight drawn as the float ones are, then rounded to MXFP4 per block of 32)")
	f.StringArrayVar(&o.Set, "set", nil, "a config.json field as field=value, the value in JSON (e.g. --set num_experts=64 --set state_size=128), applied after the shape flags; repeatable; a field the family does not read back with that value is refused")
	f.StringVar(&o.ShardSize, "shard-size", "", "split the weights into shards of at most this many bytes, as Hugging Face's save_pretrained(max_shard_size=...) does: model-00001-of-0000N.safetensors and model.safetensors.index.json; 500MB and 2GB are decimal, 5GiB binary (default: one model.safetensors)")
	f.StringVar(&o.Out, "out", "", "output folder; it must be new or empty unless --force")
	f.BoolVar(&o.Force, "force", false, "write into an --out that already holds files (config.json and the checkpoint's files are replaced; other files stay and are listed)")
	markRequired(cmd, "out", "")
}

// runGenerate writes a random checkpoint of opts.Arch to opts.Out:
// config.json and the weights in the stored dtype, in shards when asked.
func runGenerate(opts *GenerateOptions) error {
	if !slices.Contains(generateArchs, model.Arch(opts.Arch)) {
		return fmt.Errorf("--arch %q: probe generate makes %s", opts.Arch, archList())
	}
	dt, ok := generateDTypes[opts.DType]
	if !ok {
		return fmt.Errorf("--dtype %q: want f32, bf16 or f16", opts.DType)
	}
	maxShard := int64(math.MaxInt64)
	if opts.ShardSize != "" {
		var err error
		if maxShard, err = checkpoint.ParseSize(opts.ShardSize); err != nil {
			return fmt.Errorf("--shard-size: %v", err)
		}
	}
	if err := refuseNonEmpty(opts.Out, "a random checkpoint (config.json, model.safetensors)", opts.Force); err != nil {
		return err
	}
	before, err := folderContents(opts.Out)
	if err != nil {
		return err
	}
	if opts.ShardSize == "" && slices.Contains(before, checkpoint.ShardIndexName) {
		// checkpoint.Open reads a sharded index before model.safetensors:
		// the old weights would load instead of the new ones.
		return fmt.Errorf("--out %s holds model.safetensors.index.json, which would be read instead of the new model.safetensors: remove the old checkpoint's files first, or choose another --out", opts.Out)
	}
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	cfg.DType = dt.torch
	params, written, err := writeRandomCheckpoint(cfg, opts.Seed, dt.stored, opts.Out, maxShard)
	if err != nil {
		return err
	}
	if !slices.Contains(written, checkpoint.ShardIndexName) && slices.Contains(before, checkpoint.ShardIndexName) {
		return fmt.Errorf("--out %s: the weights fit in one model.safetensors (--shard-size %s), but the folder's old model.safetensors.index.json would be read instead: remove it and its shards", opts.Out, opts.ShardSize)
	}
	fmt.Fprintf(opts.Stdout, "wrote a random %s checkpoint (%d parameters, %s) to %s: %s\n", cfg.Arch, params, dt.torch, opts.Out, listNames(written))
	var kept []string
	for _, n := range before {
		if n != "config.json" && !slices.Contains(written, n) {
			kept = append(kept, n)
		}
	}
	if len(kept) > 0 {
		fmt.Fprintf(opts.Stdout, "left as they were (not from this checkpoint; remove them if they belonged to the one replaced): %s\n", listNames(kept))
	}
	return nil
}

// config returns the configuration the shape flags ask for.
func (opts *GenerateOptions) config() (model.Config, error) {
	cfg, err := model.SmallConfig(model.Arch(opts.Arch), model.Size{Layers: opts.Layers, DModel: opts.DModel, Heads: opts.Heads, KVHeads: opts.KVHeads, Vocab: opts.Vocab, MaxPos: opts.MaxPos})
	if err != nil {
		return cfg, fmt.Errorf("--arch %s: %w", opts.Arch, err)
	}
	if cfg, err = reshape(cfg, opts.Shape); err != nil {
		return cfg, fmt.Errorf("--arch %s: %w", opts.Arch, err)
	}
	if !opts.Tied {
		cfg.TiedHead = false
		if back, err := model.ParseConfig(mustJSON(cfg.HFConfig())); err != nil || back.TiedHead {
			return cfg, fmt.Errorf("--tie-embeddings=false does not apply to --arch %s (its head is always the embedding)", opts.Arch)
		}
	}
	if cfg, err = setFields(cfg, opts.Set); err != nil {
		return cfg, fmt.Errorf("--arch %s: %w", opts.Arch, err)
	}
	switch opts.ExpertFormat {
	case "float":
	case "mxfp4":
		var moe model.MoEConfig
		if cfg.MoE != nil {
			moe = *cfg.MoE // a copy: cfg's may be shared
		}
		moe.MXFP4 = true
		cfg.MoE = &moe
		if back, err := model.ParseConfig(mustJSON(cfg.HFConfig())); err != nil || back.MoE == nil || !back.MoE.MXFP4 {
			return cfg, fmt.Errorf("--expert-format mxfp4 applies to gpt_oss (the layout of its released experts), not --arch %s", opts.Arch)
		}
	default:
		return cfg, fmt.Errorf("--expert-format %q: want float or mxfp4", opts.ExpertFormat)
	}
	return cfg, nil
}

// setFields returns cfg with the config.json fields of sets (field=JSON
// value, --set) written into its config.json and read back; a malformed
// entry, a value the family refuses, or a field that does not read back
// with the value given (one the family does not read) is an error naming
// the entry.
func setFields(cfg model.Config, sets []string) (model.Config, error) {
	if len(sets) == 0 {
		return cfg, nil
	}
	fields := cfg.HFConfig()
	want := map[string]string{}
	for _, kv := range sets {
		k, v, ok := strings.Cut(kv, "=")
		var val any
		if !ok || k == "" || json.Unmarshal([]byte(v), &val) != nil {
			return cfg, fmt.Errorf("--set %q: want field=value with the value in JSON (numbers, true/false, [lists], \"strings\" in quotes)", kv)
		}
		fields[k], want[k] = val, string(mustJSON(val))
	}
	back, err := model.ParseConfig(mustJSON(fields))
	if err != nil {
		return cfg, fmt.Errorf("--set: %w", err)
	}
	var got map[string]any
	if err := json.Unmarshal(mustJSON(back.HFConfig()), &got); err != nil {
		return cfg, err
	}
	for _, kv := range sets {
		k, _, _ := strings.Cut(kv, "=")
		if g, ok := got[k]; !ok || string(mustJSON(g)) != want[k] {
			return cfg, fmt.Errorf("--set %q does not apply: config.json reads back %s = %s", kv, k, mustJSON(got[k]))
		}
	}
	return *back, nil
}

// writeRandomCheckpoint generates the weights of cfg with seed (the weight
// matrices made in cfg.DType: an 8B model in bf16 is generated in 16 GB;
// the rest converted to the safetensors dtype stored) and writes
// config.json, as Hugging Face writes it for them (Gemma's embedding scale
// √d is rounded to this dtype when the model runs), and the weights to
// out; it returns the parameter count and the files written.
func writeRandomCheckpoint(cfg model.Config, seed uint64, stored, out string, maxShard int64) (int64, []string, error) {
	m, tensors, err := model.Generate(cfg, seed)
	if err != nil {
		return 0, nil, err
	}
	for i := range tensors {
		if x, ok := tensors[i].Data.([]float32); ok {
			if tensors[i].Data, err = checkpoint.Convert(x, stored); err != nil {
				return 0, nil, err
			}
		}
	}
	fields := cfg.HFConfig()
	fields["torch_dtype"], fields["dtype"] = cfg.DType, cfg.DType
	if err := os.MkdirAll(out, 0o755); err != nil {
		return 0, nil, err
	}
	data, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return 0, nil, err
	}
	if err := os.WriteFile(filepath.Join(out, "config.json"), append(data, '\n'), 0o644); err != nil {
		return 0, nil, err
	}
	written, err := checkpoint.WriteSharded(out, tensors, maxShard, map[string]string{"format": "pt"})
	return int64(m.Parameters), written, err
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
