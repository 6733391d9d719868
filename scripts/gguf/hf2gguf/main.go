// Command hf2gguf writes a Hugging Face checkpoint folder (llama, qwen2,
// qwen3, gemma2, gemma3; say one made by `probe generate`) to an F32 GGUF
// file as llama.cpp's converter lays it out (model.WriteGGUFFromHF: q/k
// rows permuted for llama, Gemma norms stored as 1 + w, a placeholder
// tokenizer), the input llama.cpp's llama_model_quantize takes
// (scripts/gguf/ggml_ref.py quantize).
//
//	go run ./scripts/gguf/hf2gguf <folder> <out.gguf>
package main

import (
	"fmt"
	"os"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: hf2gguf <Hugging Face checkpoint folder> <out.gguf>")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "hf2gguf:", err)
		os.Exit(1)
	}
}

func run(dir, out string) error {
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return err
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return err
	}
	defer ck.Close()
	var ts []checkpoint.Tensor
	for _, name := range ck.Names() {
		info, _ := ck.Info(name)
		x, err := ck.Float32(name)
		if err != nil {
			return err
		}
		ts = append(ts, checkpoint.Tensor{Name: name, Shape: info.Shape, Data: x})
	}
	return model.WriteGGUFFromHF(out, cfg, ts)
}
