package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo runs probe demo end to end on the embedded zoo (README's first
// command) and checks that the report holds every protocol's figures,
// makes no network request and renders in headless Chromium when it is
// installed.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("probe demo takes about a minute")
	}
	out := t.TempDir()
	code, stdout, errs := probe(t, "demo", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"7/7 writing the report", "report.html", "token stream: 16384 ids sampled from gated_headwise",
		"measured the softmax layers [3]"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout)
		}
	}
	html := filepath.Join(out, "report.html")
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"bft-fig2", "bft-fig3", "bft-fig4", "rfa-ckpt-fig3", "rfa-ckpt-fig4", "afa-fig1", "afa-fig2", "afa-fig3",
		"gdn-heads", "gdn-tokens", "sinks-first-token", "sinks-length", "bft-fig4-gate", "retrieval-heads",
		"gpt-oss-sinks-first-token", "gpt-oss-experts-load", "gpt-oss-experts-router", "gpt-oss-experts-first",
		"falcon-h1-gdn-side-by-side"} {
		if !strings.Contains(string(page), id) {
			t.Errorf("report lacks figure %s", id)
		}
	}
	for _, dir := range []string{"zoo/gated_headwise", "zoo/rfa_m2_sc", "zoo/afa_toy", "zoo/qwen35_hybrid", "zoo/gemma3_tiny", "zoo/gpt_oss_tiny", "zoo/falcon_h1_tiny", "falcon-h1-gdn/gdn_manifest.json",
		"gpt-oss-sinks/sinks_manifest.json", "gpt-oss-experts/experts_manifest.json", "bft-sweep", "hybrid-diag.csv", "hybrid-gdn/gdn_manifest.json", "hybrid-sinks/sinks_manifest.json", "hybrid-retrieval/retrieval_manifest.json", "ppl", "ppl-hybrid-gemma"} {
		if _, err := os.Stat(filepath.Join(out, dir)); err != nil {
			t.Error(err)
		}
	}
	m := regexp.MustCompile(`(\d+) figures in `).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no figure count in the output:\n%s", stdout)
	}
	n, _ := strconv.Atoi(m[1])
	if n < 16 {
		t.Errorf("%d figures, want at least 16", n)
	}
	checkPage(t, browserOrSkip(t), html, strings.Count(string(page), `class="chart"`))
}

// TestReportPPL: probe report on a probe ppl folder draws the
// extrapolation and Prediction 3 figures.
func TestReportPPL(t *testing.T) {
	tmp := t.TempDir()
	ck := filepath.Join(tmp, "gated")
	if code, _, errs := probe(t, "generate", "--arch", "gated", "--layers", "2", "--d-model", "32", "--heads", "2",
		"--kv-heads", "1", "--vocab", "64", "--max-pos", "512", "--out", ck); code != 0 {
		t.Fatal(errs)
	}
	ids := make([]string, 1400)
	for i := range ids {
		ids[i] = strconv.Itoa((i*i + 3*i) % 64)
	}
	idsFile := filepath.Join(tmp, "ids.json")
	os.WriteFile(idsFile, []byte("["+strings.Join(ids, ",")+"]"), 0o644)
	pplDir := filepath.Join(tmp, "ppl")
	if code, _, errs := probe(t, "ppl", "--model", ck, "--ids", idsFile, "--lengths", "64,128", "--samples", "2",
		"--gate", "learned,one,k", "--progress=false", "--out", pplDir); code != 0 {
		t.Fatal(errs)
	}
	html := filepath.Join(tmp, "rep", "report.html")
	code, stdout, errs := probe(t, "report", pplDir, "--static", "--out", html)
	if code != 0 {
		t.Fatal(errs)
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"zoo-extrapolation", "bft-prediction3"} {
		if !strings.Contains(string(page), id) {
			t.Errorf("report lacks %s (%s)", id, stdout)
		}
	}
	checkPage(t, browserOrSkip(t), html, -1)
}
