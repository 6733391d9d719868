// Command hf2gguf writes a Hugging Face checkpoint folder (llama, qwen2,
// qwen3, gemma2, gemma3; say one made by `probe generate`) to a GGUF file
// as llama.cpp's converter lays it out (model.WriteGGUFFromHF: q/k rows
// permuted for llama, Gemma norms stored as 1 + w, a placeholder
// tokenizer), the input llama.cpp's llama_model_quantize takes
// (scripts/gguf/ggml_ref.py quantize).
//
//	go run ./scripts/gguf/hf2gguf [-type f32|bf16] <folder> <out.gguf>
//
// -type f32 (the default) stores every tensor in F32. -type bf16 stores the
// matrices in BF16 and the vectors (norms) in F32, as llama.cpp's
// converter does with --outtype bf16: BF16 tensors of the checkpoint are
// written from its mapping as stored, others rounded to nearest even; an
// 8B model becomes a 16 GB file rather than 32 GB, without its weights on
// the heap.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
)

func main() {
	typ := flag.String("type", "f32", "the matrices' GGUF type: f32 or bf16 (vectors stay f32)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: hf2gguf [-type f32|bf16] <Hugging Face checkpoint folder> <out.gguf>")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), *typ); err != nil {
		fmt.Fprintln(os.Stderr, "hf2gguf:", err)
		os.Exit(1)
	}
}

func run(dir, out, typ string) error {
	if typ != "f32" && typ != "bf16" {
		return fmt.Errorf("-type %q: want f32 or bf16", typ)
	}
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
		var data any
		switch {
		case typ == "bf16" && info.DType == "BF16":
			v, err := ck.Uint16View(name)
			if err != nil {
				return err
			}
			data = checkpoint.BFloat16(v)
		default:
			x, err := ck.Float32(name)
			if err != nil {
				return err
			}
			if data, err = checkpoint.Convert(x, map[string]string{"f32": "F32", "bf16": "BF16"}[typ]); err != nil {
				return err
			}
		}
		ts = append(ts, checkpoint.Tensor{Name: name, Shape: info.Shape, Data: data})
	}
	return model.WriteGGUFFromHF(out, cfg, ts)
}
