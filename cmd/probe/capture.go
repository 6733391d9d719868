package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

func cmdCapture(args []string, w io.Writer) error {
	fs := newFlags("capture")
	mf := addModelFlag(fs, "checkpoint")
	tf := addTokenFlags(fs, true)
	out := fs.String("out", "", "output .safetensors file")
	allowExt := addExtrapolationFlag(fs)
	var hookNames multi
	fs.Var(&hookNames, "hook", "hook point to capture (repeatable; * matches every layer)")
	progress := addProgressFlag(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *out == "":
		return fmt.Errorf("--out is required")
	case len(hookNames) == 0:
		return fmt.Errorf("at least one --hook is required (probe hooks lists them)")
	}
	if err := tf.check(); err != nil {
		return err
	}
	dir, err := mf.dir()
	if err != nil {
		return err
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return err
	}
	for _, h := range hookNames {
		if err := hooks.Valid(h, cfg.Layers); err != nil {
			return err
		}
	}
	ids, err := tf.batch(dir)
	if err != nil {
		return err
	}
	if err := checkLength(len(ids[0]), cfg, tf, *allowExt); err != nil {
		return err
	}
	m, err := model.Load(dir, mf.loadOptions())
	if err != nil {
		return err
	}
	hs := &hooks.Set{}
	cap := hs.Capture(hookNames...)
	// the captured values are kept beside the pass: check both before it
	// starts (the pass checks itself alone)
	B, T := len(ids), len(ids[0])
	points, _ := m.HookNames() // (an error here, the pass reports)
	var kept int64
	for _, n := range points {
		for _, p := range hookNames {
			if hooks.Match(p, n) {
				kept += m.PointBytes(n, B, T)
				break
			}
		}
	}
	if err := m.CheckMemory(B, T, model.Options{Hooks: hs}, kept); err != nil {
		return fmt.Errorf("capturing %d × %d tokens keeps %.2f GiB of values: %w", B, T, float64(kept)/(1<<30), err)
	}
	end := func(error) {}
	if *progress {
		end = passProgress(hs, cfg.Layers, T)
	}
	res, err := m.Forward(ids, model.Options{Hooks: hs, AllowExtrapolation: *allowExt})
	end(err)
	if err != nil {
		return err
	}
	tensors := []checkpoint.Tensor{{Name: "input_ids", Shape: []int{res.Batch, res.T}, Data: flatIDs(ids)}}
	for _, n := range cap.Names() {
		x := cap.Get(n)
		tensors = append(tensors, checkpoint.Tensor{Name: n, Shape: x.Shape(), Data: x.Data().([]float32)})
	}
	meta := map[string]string{"model": dir, "tool": "probe capture"}
	// the token strings, for labels (probe report attention), when a
	// tokenizer is at hand
	if toks, err := tokenStrings(dir, *tf.tokenizer, ids); err == nil {
		data, _ := json.Marshal(toks)
		meta["tokens"] = string(data)
	}
	if err := checkpoint.WriteSafetensors(*out, tensors, meta); err != nil {
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
	mf := addModelRef(fs, "checkpoint whose tokenizer.json to use")
	tokFile := fs.String("tokenizer", "", "tokenizer.json file (instead of --model)")
	textFile := fs.String("text", "", "text file to tokenize; - reads standard input")
	noSpecial := fs.Bool("no-special-tokens", false, "do not add the post-processor's special tokens")
	tokens := fs.Bool("tokens", false, "print the token strings (a JSON list parallel to the ids) instead of the ids")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("unexpected argument %q (the text is given with --text <file>, or --text - for standard input)", pos[0])
	case (*mf.name == "") == (*tokFile == ""):
		return fmt.Errorf("give exactly one of --model and --tokenizer")
	case *textFile == "":
		return fmt.Errorf("--text is required (a file, or - for standard input)")
	}
	dir := ""
	if *mf.name != "" {
		if dir, _, err = mf.locate(); err != nil {
			return err
		}
	}
	tok, err := loadTokenizer(dir, *tokFile)
	if err != nil {
		return err
	}
	text, err := readInput(*textFile)
	if err != nil {
		return err
	}
	ids, err := tok.Encode(string(text), !*noSpecial)
	if err != nil {
		return fmt.Errorf("%s: %w", inputName(*textFile), err)
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "<|endoftext|>", not "\u003c|endoftext|\u003e"
	if *tokens {
		return enc.Encode(tok.Tokens(ids))
	}
	return enc.Encode(ids)
}

// checkLength refuses, before the weights are read, sequences of T tokens
// longer than the model's max_position_embeddings unless
// --allow-extrapolation, with the flag that fixes it: --max-tokens for
// --text, shorter sequences for --ids.
func checkLength(T int, cfg *model.Config, tf tokenFlags, allowExt bool) error {
	if T <= cfg.MaxPos || (allowExt && !cfg.LearnedPositions()) {
		return nil
	}
	ext := ", or --allow-extrapolation to run past the trained positions"
	if cfg.LearnedPositions() {
		ext = fmt.Sprintf(" (the learned positions of %s cannot extrapolate)", cfg.Arch)
	}
	if *tf.text != "" {
		return fmt.Errorf("%s gives %d tokens, more than the model's max_position_embeddings %d: pass --max-tokens %d to keep the first %d%s",
			inputName(*tf.text), T, cfg.MaxPos, cfg.MaxPos, cfg.MaxPos, ext)
	}
	return fmt.Errorf("%s: sequences of %d tokens, more than the model's max_position_embeddings %d: shorten them%s",
		inputName(*tf.ids), T, cfg.MaxPos, ext)
}
