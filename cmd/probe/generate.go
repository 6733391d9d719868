package main

import (
	"fmt"
	"io"

	"github.com/filterlens/probe/checkpoint"
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
	var m *model.Model
	var cfg model.Config
	var err error
	switch a := model.Arch(*arch); a {
	case model.ArchBFT, model.ArchRT, model.ArchAFA:
		// The filter mechanisms have their own generator and layout.
		switch a {
		case model.ArchBFT:
			cfg, err = model.SmallBFTConfig(*layers, *dModel, *heads, *kvHeads, *vocab, *maxPos)
		case model.ArchRT:
			cfg, err = model.SmallRTConfig(*layers, *dModel, *heads, *vocab, *maxPos)
		default:
			cfg, err = model.SmallAFAConfig(*layers, *dModel, *heads, *vocab, *maxPos)
		}
		if err != nil {
			return err
		}
		var tensors []checkpoint.Tensor
		if m, tensors, err = model.GenerateFilter(cfg, *seed); err != nil {
			return err
		}
		if err := model.WriteFilter(*out, cfg, tensors); err != nil {
			return err
		}
	default:
		if cfg, err = model.SmallConfig(a, *layers, *dModel, *heads, *kvHeads, *vocab, *maxPos); err != nil {
			return err
		}
		if *dMLP > 0 {
			cfg.DMLP = *dMLP
		}
		var tensors []checkpoint.Tensor
		m, tensors = model.Generate(cfg, *seed)
		if err := model.WriteHF(*out, cfg, tensors); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "wrote a random %s checkpoint (%d parameters) to %s\n", cfg.Arch, m.Parameters, *out)
	return nil
}
