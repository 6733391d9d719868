package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// CaptureOptions are the options of probe capture.
type CaptureOptions struct {
	cmdIO
	Model              modelFlag
	Input              tokenFlags
	Hooks              []string // hook points or patterns (* matches every layer)
	File               string   // the .safetensors file to write (--out)
	AllowExtrapolation bool
	Progress           bool
}

// flags declares the flags of probe capture into f and their relations.
func (o *CaptureOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	o.Model.registerModel(f, "checkpoint")
	o.Input.registerInput(f, true)
	f.StringVar(&o.File, "out", "", "output .safetensors file")
	extrapolationVar(f, &o.AllowExtrapolation)
	f.StringArrayVar(&o.Hooks, "hook", nil, "hook point to capture, a `name` as probe hooks lists them (repeatable; * matches every layer)")
	progressVar(f, &o.Progress)
	markRequired(cmd, "model", modelHint)
	markRequired(cmd, "out", "")
	markRequired(cmd, "hook", "at least one; probe hooks lists them")
	markExactlyOne(cmd, "ids", "text")
}

// runCapture runs one forward pass with the hooks captured and writes
// them, with the input ids and the token strings, to opts.File.
func runCapture(opts *CaptureOptions) error {
	dir, cfg, err := opts.Model.loadConfig()
	if err != nil {
		return err
	}
	for _, h := range opts.Hooks {
		if err := hooks.Valid(h, cfg.Layers); err != nil {
			return err
		}
	}
	ids, err := opts.Input.checkedBatch(dir, cfg, opts.AllowExtrapolation)
	if err != nil {
		return err
	}
	m, err := model.Load(dir, opts.Model.loadOptions())
	if err != nil {
		return err
	}
	hs := &hooks.Set{}
	cap := hs.Capture(opts.Hooks...)
	if err := checkCaptureMemory(m, hs, opts.Hooks, len(ids), len(ids[0])); err != nil {
		return err
	}
	end := func(error) {}
	if opts.Progress {
		end = passProgress(hs, cfg.Layers, len(ids[0]))
	}
	res, err := m.Forward(ids, model.Options{Hooks: hs, AllowExtrapolation: opts.AllowExtrapolation})
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
	if toks, err := tokenStrings(dir, opts.Input.Tokenizer, ids); err == nil {
		data, _ := json.Marshal(toks)
		meta["tokens"] = string(data)
	}
	if err := checkpoint.WriteSafetensors(opts.File, tensors, meta); err != nil {
		return err
	}
	fmt.Fprintf(opts.Stdout, "wrote %d tensors (%d tokens × %d sequences) to %s\n", len(tensors), res.T, res.Batch, opts.File)
	return nil
}

// checkCaptureMemory refuses, before the pass, a capture of B × T tokens
// whose kept values (every point patterns match) do not fit beside the
// pass (which checks itself alone).
func checkCaptureMemory(m *model.Model, hs *hooks.Set, patterns []string, B, T int) error {
	points, _ := m.HookNames() // (an error here, the pass reports)
	var kept int64
	for _, n := range points {
		for _, p := range patterns {
			if hooks.Match(p, n) {
				kept += m.PointBytes(n, B, T)
				break
			}
		}
	}
	if err := m.CheckMemory(B, T, model.Options{Hooks: hs}, kept); err != nil {
		return fmt.Errorf("capturing %d × %d tokens keeps %.2f GiB of values: %w", B, T, float64(kept)/(1<<30), err)
	}
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

// checkLength refuses, before the weights are read, sequences of T tokens
// longer than the model's max_position_embeddings unless
// --allow-extrapolation, with the flag that fixes it: --max-tokens for
// --text, shorter sequences for --ids.
func checkLength(T int, cfg *model.Config, tf *tokenFlags, allowExt bool) error {
	if T <= cfg.MaxPos || (allowExt && !cfg.LearnedPositions()) {
		return nil
	}
	ext := ", or --allow-extrapolation to run past the trained positions"
	if cfg.LearnedPositions() {
		ext = fmt.Sprintf(" (the learned positions of %s cannot extrapolate)", cfg.Arch)
	}
	if tf.Text != "" {
		return fmt.Errorf("%s gives %d tokens, more than the model's max_position_embeddings %d: pass --max-tokens %d to keep the first %d%s",
			inputName(tf.Text), T, cfg.MaxPos, cfg.MaxPos, cfg.MaxPos, ext)
	}
	return fmt.Errorf("%s: sequences of %d tokens, more than the model's max_position_embeddings %d: shorten them%s",
		inputName(tf.IDs), T, cfg.MaxPos, ext)
}
