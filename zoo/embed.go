package zoo

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// demo holds the checkpoints `probe demo` runs on — the gated model and
// its baseline, both RFA models (without M2's intermediate checkpoints),
// the Qwen3.5-style hybrid, the Gemma-3-style model, the gpt-oss-style
// model (sinks, 4 experts top-2), the Falcon-H1-style model (attention and
// Mamba-2 in every layer) and the AFA toy filters — and the token stream
// sampled from the gated model: about 42 MB
// in the binary, so that the demo needs no download and no third-party
// text.
//
//go:embed checkpoints/demo_stream.json checkpoints/gated_headwise checkpoints/qwen3_base checkpoints/afa_toy
//go:embed checkpoints/qwen35_hybrid checkpoints/gemma3_tiny
//go:embed checkpoints/gpt_oss_tiny/config.json checkpoints/gpt_oss_tiny/model.safetensors
//go:embed checkpoints/gpt_oss_tiny/tokenizer.json checkpoints/gpt_oss_tiny/zoo.json
//go:embed checkpoints/gpt_oss_tiny/MODEL_CARD.md checkpoints/gpt_oss_tiny/train_log.jsonl
//go:embed checkpoints/falcon_h1_tiny
//go:embed checkpoints/rfa_m2_sc/config.json checkpoints/rfa_m2_sc/model.safetensors
//go:embed checkpoints/rfa_m2_sc/tokenizer.json checkpoints/rfa_m2_sc/history.json
//go:embed checkpoints/rfa_m2_sc/zoo.json checkpoints/rfa_m2_sc/MODEL_CARD.md
//go:embed checkpoints/rfa_m1/config.json checkpoints/rfa_m1/model.safetensors
//go:embed checkpoints/rfa_m1/tokenizer.json checkpoints/rfa_m1/history.json
//go:embed checkpoints/rfa_m1/zoo.json checkpoints/rfa_m1/MODEL_CARD.md
var demo embed.FS

// Unpack writes the embedded demo checkpoints and stream to dst (created),
// keeping their layout: dst/gated_headwise/, dst/qwen3_base/, dst/rfa_m1/,
// dst/rfa_m2_sc/, dst/qwen35_hybrid/, dst/gemma3_tiny/, dst/gpt_oss_tiny/,
// dst/falcon_h1_tiny/, dst/afa_toy/, dst/demo_stream.json. Existing files are overwritten.
func Unpack(dst string) error {
	root, err := fs.Sub(demo, "checkpoints")
	if err != nil {
		return err
	}
	return fs.WalkDir(root, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out := filepath.Join(dst, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		data, err := fs.ReadFile(root, path)
		if err != nil {
			return err
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			return fmt.Errorf("zoo: unpacking %s: %w", path, err)
		}
		return nil
	})
}
