package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/tokenizer"
)

// readIDBatch reads --ids: a JSON list of equal-length, non-empty token id
// lists of non-negative ids. Errors name the file, and the sequence and
// position at fault.
func readIDBatch(path string) ([][]int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ids [][]int
	if err := json.Unmarshal(data, &ids); err != nil {
		return nil, fmt.Errorf("%s: want a JSON list of token id lists (one batch), e.g. [[1,2,3],[4,5,6]]: %v", path, err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: empty batch", path)
	}
	for b, seq := range ids {
		switch {
		case len(seq) == 0:
			return nil, fmt.Errorf("%s: sequence %d is empty", path, b)
		case len(seq) != len(ids[0]):
			return nil, fmt.Errorf("%s: sequence %d has %d tokens, sequence 0 has %d (the batch must be rectangular)",
				path, b, len(seq), len(ids[0]))
		}
		if t := firstNegative(seq); t >= 0 {
			return nil, fmt.Errorf("%s: token id %d at sequence %d position %d is negative", path, seq[t], b, t)
		}
	}
	return ids, nil
}

// firstNegative returns the index of the first negative id, or -1.
func firstNegative(ids []int) int {
	for i, id := range ids {
		if id < 0 {
			return i
		}
	}
	return -1
}

// loadTokenizer finds tokenizer.json in a model directory.
func loadTokenizer(modelDir, file string) (*tokenizer.Tokenizer, error) {
	if file == "" {
		file = filepath.Join(modelDir, "tokenizer.json")
		if _, err := os.Stat(file); err != nil {
			return nil, fmt.Errorf("%s has no tokenizer.json: pass --ids, or --tokenizer <file>", modelDir)
		}
	}
	return tokenizer.Load(file)
}

// readText tokenizes a text file into one sequence.
func readText(modelDir, tokFile, textFile string, maxTokens int, addSpecial bool) ([]int, error) {
	tok, err := loadTokenizer(modelDir, tokFile)
	if err != nil {
		return nil, err
	}
	text, err := os.ReadFile(textFile)
	if err != nil {
		return nil, err
	}
	ids, err := tok.Encode(string(text), addSpecial)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", textFile, err)
	}
	if maxTokens > 0 && len(ids) > maxTokens {
		ids = ids[:maxTokens]
	}
	return ids, nil
}

func cmdCapture(args []string, w io.Writer) error {
	fs := newFlags("capture")
	dir := fs.String("model", "", "checkpoint directory")
	idsFile := fs.String("ids", "", "JSON list of equal-length token id lists (one batch)")
	textFile := fs.String("text", "", "text file to tokenize with the model's tokenizer.json")
	tokFile := fs.String("tokenizer", "", "tokenizer.json (default: the model's)")
	maxTokens := fs.Int("max-tokens", 0, "keep at most this many tokens of --text (0: all)")
	out := fs.String("out", "", "output .safetensors file")
	allowExt := fs.Bool("allow-extrapolation", false, "run sequences longer than max_position_embeddings")
	allowUnexp := fs.Bool("allow-unexpected", false, "ignore checkpoint tensors the architecture does not use")
	var hookNames multi
	fs.Var(&hookNames, "hook", "hook point to capture (repeatable; * matches every layer)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *dir == "":
		return fmt.Errorf("--model is required")
	case *out == "":
		return fmt.Errorf("--out is required")
	case len(hookNames) == 0:
		return fmt.Errorf("at least one --hook is required (probe hooks lists them)")
	case (*idsFile == "") == (*textFile == ""):
		return fmt.Errorf("give exactly one of --ids and --text")
	}
	cfg, err := model.LoadConfig(*dir)
	if err != nil {
		return err
	}
	for _, h := range hookNames {
		if err := hooks.Valid(h, cfg.Layers); err != nil {
			return err
		}
		if strings.HasSuffix(h, "attn.hook_gate") && cfg.Gate == model.GateNone {
			return fmt.Errorf("hook %q: %s has no attention output gate", h, *dir)
		}
		if h == "hook_pos_embed" && cfg.Arch != model.ArchGPT2 {
			return fmt.Errorf("hook %q: only GPT-2 has learned positions", h)
		}
	}
	var ids [][]int
	if *idsFile != "" {
		if ids, err = readIDBatch(*idsFile); err != nil {
			return err
		}
	} else {
		seq, err := readText(*dir, *tokFile, *textFile, *maxTokens, true)
		if err != nil {
			return err
		}
		ids = [][]int{seq}
	}
	m, err := model.Load(*dir, model.LoadOptions{AllowUnexpected: *allowUnexp})
	if err != nil {
		return err
	}
	hs := &hooks.Set{}
	cap := hs.Capture(hookNames...)
	res, err := m.Forward(ids, model.Options{Hooks: hs, AllowExtrapolation: *allowExt})
	if err != nil {
		return err
	}
	tensors := []checkpoint.Tensor{{Name: "input_ids", Shape: []int{res.Batch, res.T}, Data: flatIDs(ids)}}
	for _, n := range cap.Names() {
		x := cap.Get(n)
		tensors = append(tensors, checkpoint.Tensor{Name: n, Shape: x.Shape(), Data: x.Data().([]float32)})
	}
	if err := checkpoint.WriteSafetensors(*out, tensors, map[string]string{"model": *dir, "tool": "probe capture"}); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %d tensors (%d tokens × %d sequences) to %s\n", len(tensors), res.T, res.Batch, *out)
	return nil
}

func flatIDs(ids [][]int) []int64 {
	var flat []int64
	for _, s := range ids {
		for _, id := range s {
			flat = append(flat, int64(id))
		}
	}
	return flat
}

func cmdTokenize(args []string, w io.Writer) error {
	fs := newFlags("tokenize")
	dir := fs.String("model", "", "checkpoint directory holding tokenizer.json")
	tokFile := fs.String("tokenizer", "", "tokenizer.json file")
	textFile := fs.String("text", "", "text file")
	noSpecial := fs.Bool("no-special-tokens", false, "do not add the post-processor's special tokens")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if (*dir == "") == (*tokFile == "") {
		return fmt.Errorf("give exactly one of --model and --tokenizer")
	}
	if *textFile == "" {
		return fmt.Errorf("--text is required")
	}
	ids, err := readText(*dir, *tokFile, *textFile, 0, !*noSpecial)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(ids)
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}
