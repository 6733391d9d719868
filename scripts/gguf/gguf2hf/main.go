// Command gguf2hf writes the Hugging Face checkpoint a GGUF file of llama,
// qwen2, qwen3, gemma2 or gemma3 was converted from (model.ConvertGGUF:
// config.json from its metadata, float32 model.safetensors dequantized bit
// for bit as ggml does, llama's q/k permutation and Gemma's +1 on the norms
// undone) into a folder every probe command reads.
//
//	go run ./scripts/gguf/gguf2hf <model.gguf> <folder>
package main

import (
	"fmt"
	"os"

	"github.com/filterlens/probe/model"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gguf2hf <model.gguf> <out folder>")
		os.Exit(2)
	}
	if err := model.ConvertGGUF(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "gguf2hf:", err)
		os.Exit(1)
	}
}
