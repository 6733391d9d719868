package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/filterlens/probe/model"
)

func cmdGenerate(args []string, w io.Writer) error {
	fs := newFlags("generate")
	arch := fs.String("arch", "qwen3", "qwen3, gated (Qiu headwise), llama, qwen2, gpt2, selrope, bft, rt_transformer or afa")
	layers := fs.Int("layers", 4, "layers")
	dModel := fs.Int("d-model", 256, "model width")
	heads := fs.Int("heads", 8, "query heads")
	kvHeads := fs.Int("kv-heads", 4, "key/value heads")
	dMLP := fs.Int("d-mlp", 0, "MLP width (default 3·d_model; GPT-2 4·d_model)")
	vocab := fs.Int("vocab", 1024, "vocabulary size")
	maxPos := fs.Int("max-pos", 32768, "max_position_embeddings")
	seed := fs.Uint64("seed", 1, "random seed")
	out := fs.String("out", "", "output directory")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	cfg, err := model.SmallConfig(model.Arch(*arch), model.Size{Layers: *layers, DModel: *dModel, Heads: *heads, KVHeads: *kvHeads, Vocab: *vocab, MaxPos: *maxPos})
	if err != nil {
		return fmt.Errorf("--arch %s: %w", *arch, err)
	}
	if *dMLP > 0 {
		// Only a width that the family's config.json carries takes effect.
		cfg.DMLP = *dMLP
		if back, err := model.ParseConfig(mustJSON(cfg.HFConfig())); err != nil || back.DMLP != *dMLP {
			return fmt.Errorf("--d-mlp does not apply to --arch %s (its MLP width follows from --d-model)", *arch)
		}
	}
	m, tensors, err := model.Generate(cfg, *seed)
	if err != nil {
		return err
	}
	if err := model.WriteHF(*out, cfg, tensors); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote a random %s checkpoint (%d parameters) to %s\n", cfg.Arch, m.Parameters, *out)
	return nil
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
