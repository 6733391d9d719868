// Command gguf2hf writes the Hugging Face checkpoint a GGUF file of llama,
// qwen2, qwen3, gemma2 or gemma3 was converted from (model.ConvertGGUF:
// config.json from its metadata, float32 model.safetensors dequantized bit
// for bit as ggml does, llama's q/k permutation and Gemma's +1 on the norms
// undone, tokenizer.json from tokenizer.ggml.*) into a folder every probe
// command reads.
//
//	go run ./scripts/gguf/gguf2hf [-no-tokenizer] <model.gguf> <folder>
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/filterlens/probe/model"
)

func main() {
	noTok := flag.Bool("no-tokenizer", false, "write no tokenizer.json (for a GGUF tokenizer that does not convert)")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: gguf2hf [-no-tokenizer] <model.gguf> <out folder>")
		os.Exit(2)
	}
	if err := model.ConvertGGUF(flag.Arg(0), flag.Arg(1), model.GGUFOptions{NoTokenizer: *noTok}); err != nil {
		fmt.Fprintln(os.Stderr, "gguf2hf:", err)
		os.Exit(1)
	}
}
