package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/checkpoint"
)

// hubify lays the checkpoint folder src out in the hub cache as
// huggingface_hub does for repo at commit: every file stored once in
// blobs/<sha256>, the snapshot folder made of relative symbolic links into
// blobs/, refs/main naming the commit. model.safetensors is split into two
// shards with an index on the way, as large checkpoints ship.
func hubify(t *testing.T, src, cache, repo, commit string) string {
	t.Helper()
	entry := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	blobs, snap := filepath.Join(entry, "blobs"), filepath.Join(entry, "snapshots", commit)
	for _, d := range []string{blobs, snap, filepath.Join(entry, "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	put := func(name string, data []byte) {
		sum := sha256.Sum256(data)
		blob := hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(blobs, blob), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, name)); err != nil {
			t.Fatal(err)
		}
	}
	ck, err := checkpoint.OpenFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	names := ck.Names()
	weightMap := map[string]string{}
	tmp := t.TempDir()
	for s, part := range [][]string{names[:len(names)/2], names[len(names)/2:]} {
		file := fmt.Sprintf("model-%05d-of-00002.safetensors", s+1)
		var ts []checkpoint.Tensor
		for _, n := range part {
			info, _ := ck.Info(n)
			x, err := ck.Float32(n)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, checkpoint.Tensor{Name: n, Shape: info.Shape, Data: x})
			weightMap[n] = file
		}
		p := filepath.Join(tmp, file)
		if err := checkpoint.WriteSafetensors(p, ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(p)
		put(file, data)
	}
	ck.Close()
	index, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	put("model.safetensors.index.json", index)
	for _, f := range []string{"config.json", "tokenizer.json"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		put(f, data)
	}
	os.WriteFile(filepath.Join(entry, "refs", "main"), []byte(commit), 0o644)
	return entry
}

// TestHubModelEveryCommand: --model org/name finds a sharded checkpoint
// in the hub cache (HF_HUB_CACHE) and every command that takes a model
// runs on it through the snapshot's symbolic links, with the model
// folder's tokenizer.json for --text; the manifests record the hub id and
// commit.
func TestHubModelEveryCommand(t *testing.T) {
	needGolden(t)
	withProgress(t)
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	if code, _, errs := probe(t, "generate", "--arch", "qwen3", "--layers", "2", "--d-model", "16", "--heads", "2",
		"--kv-heads", "1", "--vocab", "50257", "--max-pos", "64", "--out", src); code != 0 {
		t.Fatal(errs)
	}
	tok, err := os.ReadFile(filepath.Join(goldenDir, "tokenizers", "gpt2", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "tokenizer.json"), tok, 0o644)
	cache := filepath.Join(tmp, "cache")
	const commit = "3f1c0ffee0123456789abcdef0123456789abcde"
	entry := hubify(t, src, cache, "org/tiny", commit)
	t.Setenv("HF_HUB_CACHE", cache)
	text := filepath.Join(tmp, "t.txt")
	os.WriteFile(text, []byte("The jury said it did find that many of the problems were real, and that the city should act."), 0o644)

	code, out, errs := probe(t, "inspect", "org/tiny")
	if code != 0 || !strings.Contains(out, "hub cache:     org/tiny@"+commit+" (revision main)") ||
		!strings.Contains(out, "safetensors-sharded") || !strings.Contains(out, filepath.Join(entry, "snapshots", commit)) {
		t.Errorf("inspect org/tiny: exit %d %s\n%s", code, errs, out)
	}
	code, ids, errs := probe(t, "tokenize", "--model", "org/tiny", "--text", text)
	if code != 0 || !strings.HasPrefix(ids, "[464,9002,531,") {
		t.Errorf("tokenize: exit %d %s\n%s", code, errs, ids)
	}
	idsFile := filepath.Join(tmp, "ids.json")
	os.WriteFile(idsFile, []byte(ids), 0o644)
	runs := [][]string{
		{"capture", "--model", "org/tiny", "--text", text, "--max-tokens", "5", "--hook", "logits", "--out", filepath.Join(tmp, "c.safetensors")},
		{"capture", "--model", "org/tiny", "--ids", idsFile, "--hook", "logits", "--out", filepath.Join(tmp, "c2.safetensors")},
		{"diag", "--model", "org/tiny", "--text", text, "--out", filepath.Join(tmp, "d.csv")},
		{"diag", "--model", "org/tiny", "--ids", idsFile, "--out", filepath.Join(tmp, "d2.csv")},
		{"bench", "--model", "org/tiny", "--text", text, "--tokens", "8", "--reps", "1"},
		{"sweep", "--model", "org/tiny", "--text", text, "--lengths", "8", "--samples", "1", "--bootstrap", "0", "--out", filepath.Join(tmp, "sw")},
		{"ppl", "--model", "org/tiny", "--ids", idsFile, "--lengths", "8", "--samples", "1", "--out", filepath.Join(tmp, "ppl")},
	}
	for _, args := range runs {
		if code, out, errs := probe(t, args...); code != 0 {
			t.Errorf("probe %s: exit %d: %s\n%s", strings.Join(args, " "), code, errs, out)
		}
	}
	if m, err := analysis.ReadManifest(filepath.Join(tmp, "sw", "manifest.json")); err != nil {
		t.Error(err)
	} else if h := m.Model.Hub; h == nil || h.Repo != "org/tiny" || h.Commit != commit || h.Revision != "main" {
		t.Errorf("sweep manifest model.hub = %+v", h)
	}
	if r, err := analysis.ReadPPL(filepath.Join(tmp, "ppl")); err != nil {
		t.Error(err)
	} else if ms := r.Manifest.Models; len(ms) != 1 || ms[0].Label != "org/tiny" || ms[0].Info.Hub == nil || ms[0].Info.Hub.Commit != commit {
		t.Errorf("ppl manifest models = %+v", ms)
	}
}

// TestHubModelRefusals: a hub id that is not in the cache and a ref that
// points at a missing snapshot are refused before anything runs, naming
// the places looked at and the ref file.
func TestHubModelRefusals(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	entry := filepath.Join(cache, "models--org--gone")
	os.MkdirAll(filepath.Join(entry, "refs"), 0o755)
	os.MkdirAll(filepath.Join(entry, "snapshots", "1111111"), 0o755)
	os.WriteFile(filepath.Join(entry, "refs", "main"), []byte("2222222"), 0o644)
	out := filepath.Join(t.TempDir(), "o")
	for _, cmd := range [][]string{
		{"inspect"}, {"params"}, {"capture", "--ids", "-", "--hook", "logits", "--out", out}, {"diag", "--ids", "-", "--out", out},
		{"sweep", "--ids", "-", "--lengths", "8", "--out", out}, {"ppl", "--ids", "-", "--out", out}, {"bench"},
		{"tokenize", "--text", "-"},
	} {
		for _, c := range []struct{ model, want string }{
			{"org/absent", "model org/absent (revision main) is not on disk; looked in:\n  org/absent (not a file or folder here)\n  hub cache " + cache + " (from $HF_HUB_CACHE)\n  " + filepath.Join(cache, "models--org--absent") + ": no such folder"},
			{"org/gone", filepath.Join(entry, "refs", "main") + " points at commit 2222222, but its snapshot " + filepath.Join(entry, "snapshots", "2222222") + " is missing"},
		} {
			args := append([]string{cmd[0]}, cmd[1:]...)
			if cmd[0] == "inspect" || cmd[0] == "params" {
				args = append(args, c.model)
			} else {
				args = append(args, "--model", c.model)
			}
			code, _, errs := probe(t, args...)
			if code != 1 || !strings.Contains(errs, c.want) {
				t.Errorf("probe %s: exit %d, stderr %q\nwant %q", strings.Join(args, " "), code, errs, c.want)
			}
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused command wrote %s", out)
	}
}

// TestInspectFolderOfCheckpoints: inspect on a folder that holds
// checkpoints (a zoo, a run's checkpoint-* folders) lists them.
func TestInspectFolderOfCheckpoints(t *testing.T) {
	tmp := t.TempDir()
	for _, d := range []string{"a", filepath.Join("run", "checkpoint-100")} {
		if code, _, errs := probe(t, "generate", "--arch", "llama", "--layers", "1", "--d-model", "16", "--heads", "2",
			"--kv-heads", "2", "--vocab", "32", "--max-pos", "16", "--out", filepath.Join(tmp, d)); code != 0 {
			t.Fatal(errs)
		}
	}
	code, out, errs := probe(t, "inspect", tmp)
	want := tmp + " holds no config.json; it is a folder of 2 checkpoints (inspect one of them: probe inspect <folder>):\n  " +
		filepath.Join(tmp, "a") + "\n  " + filepath.Join(tmp, "run", "checkpoint-100") + "\n"
	if code != 0 || out != want {
		t.Errorf("inspect a folder of checkpoints: exit %d %s\n%q\nwant %q", code, errs, out, want)
	}
}
