// Package zoo holds the project's reference zoo: small checkpoints of every
// supported architecture, trained here with the PyTorch scripts in
// zoo/train/ on the Brown corpus (see zoo/README.md), each in the layout its
// users have (Hugging Face style config.json + model.safetensors +
// tokenizer.json; RFA in its authors' state_dict naming).
//
// The checkpoints live in zoo/checkpoints/<name>/. Each has a zoo.json
// saying which script trained it and how to run that script in eval mode;
// the parity test runs every one against the Go forward pass.
package zoo

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Entry is a checkpoint's zoo.json.
type Entry struct {
	Name string `json:"name"`
	// Arch names the architecture as model.Config reports it.
	Arch string `json:"arch"`
	// Script is the training script (relative to zoo/); run with
	// "--eval <dir> --ids <ids.json> --logits <out.safetensors>" it writes
	// the PyTorch logits of the checkpoint for a batch of ids.
	Script string `json:"script"`
	// LM is false for checkpoints that are not token language models (the
	// AFA toy filter), which the logits parity test skips.
	LM bool `json:"lm"`
	// Demo marks the checkpoints embedded in the probe binary for `probe demo`.
	Demo bool `json:"demo"`
}

// Read reads dir/zoo.json.
func Read(dir string) (*Entry, error) {
	data, err := os.ReadFile(filepath.Join(dir, "zoo.json"))
	if err != nil {
		return nil, err
	}
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("zoo: %s: %v", filepath.Join(dir, "zoo.json"), err)
	}
	if e.Name == "" || e.Script == "" {
		return nil, fmt.Errorf("zoo: %s: name and script are required", filepath.Join(dir, "zoo.json"))
	}
	return &e, nil
}

// List returns the checkpoint directories under root (zoo/checkpoints) that
// hold a zoo.json, sorted by name.
func List(root string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(root, "*", "zoo.json"))
	if err != nil {
		return nil, err
	}
	dirs := make([]string, len(m))
	for i, f := range m {
		dirs[i] = filepath.Dir(f)
	}
	return dirs, nil
}
