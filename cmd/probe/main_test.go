package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/tokenizer"
)

var goldenDir = filepath.Join("..", "..", "..", "shared", "golden")

func needGolden(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(goldenDir); err != nil {
		t.Skipf("golden data not found at %s (it comes with ../shared in CI)", goldenDir)
	}
}

// probe runs one command line and returns its exit code, stdout and stderr.
func probe(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestInspectGolden(t *testing.T) {
	needGolden(t)
	code, out, errs := probe(t, "inspect", "--json", filepath.Join(goldenDir, "qwen3_gate_headwise"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var s summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	want := summary{Arch: "gated", Layers: 3, DModel: 64, Heads: 4, KVHeads: 2, DHead: 16, Vocab: 512, Parameters: 144672, Gate: "headwise"}
	if s.Arch != want.Arch || s.Layers != want.Layers || s.DModel != want.DModel || s.Heads != want.Heads ||
		s.KVHeads != want.KVHeads || s.DHead != want.DHead || s.Vocab != want.Vocab || s.Parameters != want.Parameters || s.Gate != want.Gate {
		t.Errorf("inspect = %+v, want %+v", s, want)
	}
	code, out, _ = probe(t, "inspect", filepath.Join(goldenDir, "gpt2"))
	if code != 0 || !strings.Contains(out, "architecture:  gpt2") || !strings.Contains(out, "parameters:    199232") {
		t.Errorf("inspect gpt2: exit %d\n%s", code, out)
	}
}

func TestCaptureGolden(t *testing.T) {
	needGolden(t)
	dir := filepath.Join(goldenDir, "qwen3_gate_headwise")
	g, err := checkpoint.OpenFile(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	raw, _ := g.Int64("input_ids")
	ids := [][]int64{raw[:48], raw[48:]}
	tmp := t.TempDir()
	idsFile := filepath.Join(tmp, "ids.json")
	data, _ := json.Marshal(ids)
	os.WriteFile(idsFile, data, 0o644)
	outFile := filepath.Join(tmp, "cap.safetensors")
	code, _, errs := probe(t, "capture", "--model", dir, "--ids", idsFile, "--hook", "blocks.*.attn.hook_pattern",
		"--hook", "blocks.1.attn.hook_gate", "--out", outFile)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	c, err := checkpoint.OpenFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wantNames := []string{"blocks.0.attn.hook_pattern", "blocks.1.attn.hook_gate", "blocks.1.attn.hook_pattern", "blocks.2.attn.hook_pattern", "input_ids"}
	if got := c.Names(); strings.Join(got, " ") != strings.Join(wantNames, " ") {
		t.Fatalf("captured %v, want %v", got, wantNames)
	}
	for l, name := range map[string]string{"attn.2": "blocks.2.attn.hook_pattern", "gate.1": "blocks.1.attn.hook_gate"} {
		got, _ := c.Float32(name)
		want, _ := g.Float32(l)
		info, _ := c.Info(name)
		if len(got) != len(want) {
			t.Fatalf("%s: %d values (shape %v), golden %s has %d", name, len(got), info.Shape, l, len(want))
		}
		var worst float64
		for i := range got {
			worst = max(worst, float64(abs(got[i]-want[i])))
		}
		if worst > 3e-5 {
			t.Errorf("%s vs golden %s: max abs error %g", name, l, worst)
		}
	}
	if in, _ := c.Info("input_ids"); in.DType != "I64" || in.Shape[0] != 2 || in.Shape[1] != 48 {
		t.Errorf("input_ids stored as %s %v", in.DType, in.Shape)
	}
}

func abs(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

func TestTokenizeGolden(t *testing.T) {
	needGolden(t)
	tmp := t.TempDir()
	text := filepath.Join(tmp, "t.txt")
	os.WriteFile(text, []byte("Hello world<|endoftext|> again"), 0o644)
	code, out, errs := probe(t, "tokenize", "--tokenizer", filepath.Join(goldenDir, "tokenizers", "gpt2", "tokenizer.json"), "--text", text)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if strings.TrimSpace(out) != "[15496,995,50256,757]" {
		t.Errorf("ids = %s", out)
	}
}

// TestErrors: bad input gives one clear message naming what is wrong, a
// non-zero exit and no panic trace.
func TestErrors(t *testing.T) {
	needGolden(t)
	tmp := t.TempDir()
	gated := filepath.Join(goldenDir, "qwen3_gate_headwise")
	write := func(name, content string) string {
		p := filepath.Join(tmp, name)
		os.WriteFile(p, []byte(content), 0o644)
		return p
	}
	bigID := write("big.json", "[[1,2,512]]")
	empty := write("empty.json", "[]")
	bad := write("bad.json", "{")
	long := make([]int, 2049)
	data, _ := json.Marshal([][]int{long})
	longIDs := write("long.json", string(data))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"nosuch"}, `unknown command "nosuch"`},
		{[]string{"inspect"}, "want one checkpoint (a folder or a hub model id org/name), got 0 arguments"},
		{[]string{"inspect", tmp}, "config.json"},
		{[]string{"capture", "--model", gated, "--ids", bigID, "--hook", "logits", "--out", filepath.Join(tmp, "o.st")}, "token id 512"},
		{[]string{"capture", "--model", gated, "--ids", empty, "--hook", "logits", "--out", filepath.Join(tmp, "o.st")}, "empty.json: empty: no token ids"},
		{[]string{"capture", "--model", gated, "--ids", bad, "--hook", "logits", "--out", filepath.Join(tmp, "o.st")}, "bad.json"},
		{[]string{"capture", "--model", gated, "--ids", longIDs, "--hook", "logits", "--out", filepath.Join(tmp, "o.st")}, "max_position_embeddings 2048"},
		{[]string{"capture", "--model", gated, "--ids", bigID, "--hook", "blocks.9.attn.hook_z", "--out", filepath.Join(tmp, "o.st")}, "layer 9 out of range"},
		{[]string{"capture", "--model", gated, "--ids", bigID, "--hook", "blocks.0.hook_nothing", "--out", filepath.Join(tmp, "o.st")}, `unknown hook "blocks.0.hook_nothing"`},
		{[]string{"capture", "--model", filepath.Join(goldenDir, "llama_gqa"), "--ids", bigID, "--hook", "blocks.0.attn.hook_gate", "--out", filepath.Join(tmp, "o.st")}, `hook "blocks.0.attn.hook_gate" is not issued by this model (llama`},
		{[]string{"capture", "--model", gated, "--hook", "logits", "--out", filepath.Join(tmp, "o.st")}, "exactly one of --ids and --text"},
		{[]string{"capture", "--model", gated, "--text", bigID, "--hook", "logits", "--out", filepath.Join(tmp, "o.st")}, "has no tokenizer.json"},
		{[]string{"capture", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"sweep", "--model", gated, "--ids", bigID, "--lengths", "4", "--out", filepath.Join(tmp, "sw"), "--reductions", "some"}, `reductions "some": want mean or all`},
	}
	for _, c := range cases {
		code, _, errs := probe(t, c.args...)
		if code == 0 || !strings.Contains(errs, c.want) || strings.Contains(errs, "goroutine") {
			t.Errorf("probe %v: exit %d, stderr %q; want an error containing %q", c.args, code, errs, c.want)
		}
	}
}

// TestCaptureText: --text goes through the model's own tokenizer.json.
func TestCaptureText(t *testing.T) {
	needGolden(t)
	tmp := t.TempDir()
	ck := filepath.Join(tmp, "ck")
	if code, _, errs := probe(t, "generate", "--arch", "gpt2", "--layers", "1", "--d-model", "16", "--heads", "2",
		"--kv-heads", "2", "--vocab", "50257", "--max-pos", "64", "--out", ck); code != 0 {
		t.Fatal(errs)
	}
	tok, err := os.ReadFile(filepath.Join(goldenDir, "tokenizers", "gpt2", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ck, "tokenizer.json"), tok, 0o644)
	text := filepath.Join(tmp, "t.txt")
	os.WriteFile(text, []byte("The jury said it did find that many of the problems were real."), 0o644)
	out := filepath.Join(tmp, "c.safetensors")
	code, _, errs := probe(t, "capture", "--model", ck, "--text", text, "--max-tokens", "5", "--hook", "logits", "--out", out)
	if code != 0 {
		t.Fatal(errs)
	}
	c, err := checkpoint.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ids, _ := c.Int64("input_ids")
	tk, err := tokenizer.Load(filepath.Join(ck, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, id := range ids {
		got = append(got, int(id))
	}
	if s, _ := tk.Decode(got, false); len(ids) != 5 || s != "The jury said it did" {
		t.Fatalf("input_ids %v decode to %q, want the first 5 tokens \"The jury said it did\"", ids, s)
	}
	if info, _ := c.Info("logits"); len(info.Shape) != 3 || info.Shape[1] != 5 || info.Shape[2] != 50257 {
		t.Errorf("logits shape %v", info.Shape)
	}
}

// TestEveryArchitecture: every architecture the tool generates loads back,
// inspects, and captures the standard hooks (one vocabulary for all).
func TestEveryArchitecture(t *testing.T) {
	tmp := t.TempDir()
	ids := filepath.Join(tmp, "ids.json")
	os.WriteFile(ids, []byte("[[1,5,9,2,7,3,8,4,6,0,11,12],[3,3,2,1,9,8,7,6,5,4,3,2]]"), 0o644)
	for _, arch := range []string{"qwen3", "gated", "llama", "qwen2", "gpt2", "selrope", "bft", "rt_transformer", "afa", "gemma2", "gemma3"} {
		t.Run(arch, func(t *testing.T) {
			ck := filepath.Join(tmp, arch)
			if code, _, errs := probe(t, "generate", "--arch", arch, "--layers", "2", "--d-model", "32", "--heads", "4",
				"--kv-heads", "4", "--vocab", "64", "--max-pos", "128", "--out", ck); code != 0 {
				t.Fatal(errs)
			}
			if code, out, errs := probe(t, "inspect", ck); code != 0 || !strings.Contains(out, "layers:        2") {
				t.Fatalf("inspect: exit %d %s\n%s", code, errs, out)
			}
			out := filepath.Join(tmp, arch+".safetensors")
			if code, _, errs := probe(t, "capture", "--model", ck, "--ids", ids, "--hook", "blocks.*.attn.hook_pattern",
				"--hook", "blocks.1.hook_resid_post", "--hook", "logits", "--out", out); code != 0 {
				t.Fatal(errs)
			}
			c, err := checkpoint.OpenFile(out)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			p, _ := c.Float32("blocks.1.attn.hook_pattern")
			if len(p) != 2*4*12*12 {
				t.Fatalf("pattern has %d values, want [2,4,12,12]", len(p))
			}
			for q := 0; q < 12; q++ { // causal rows of batch 0, head 0 sum to 1
				var s float64
				for j := 0; j < 12; j++ {
					if j > q && p[q*12+j] != 0 {
						t.Fatalf("pattern[%d,%d] = %v above the diagonal", q, j, p[q*12+j])
					}
					s += float64(p[q*12+j])
				}
				if s < 0.999 || s > 1.001 {
					t.Fatalf("row %d of the pattern sums to %v", q, s)
				}
			}
		})
	}
}

// TestHooksOfModel: probe hooks --model lists exactly the points that
// model issues (a Qwen3.5 hybrid has gdn points and a gate; a Qwen3 model
// neither), and capture refuses a point the model does not issue before
// the pass, naming the closest.
func TestHooksOfModel(t *testing.T) {
	tmp := t.TempDir()
	for _, arch := range []string{"qwen3_5", "qwen3"} {
		dir := filepath.Join(tmp, arch)
		if code, _, errs := probe(t, "generate", "--arch", arch, "--layers", "4", "--d-model", "32", "--heads", "4", "--kv-heads", "2", "--vocab", "64", "--max-pos", "256", "--out", dir); code != 0 {
			t.Fatalf("generate %s: %s", arch, errs)
		}
		code, out, errs := probe(t, "hooks", "--model", dir)
		if code != 0 {
			t.Fatalf("hooks --model %s: %s", arch, errs)
		}
		hybrid := arch == "qwen3_5"
		for _, c := range []struct {
			name string
			want bool
		}{{"blocks.0.gdn.hook_eff_attn", hybrid}, {"blocks.3.attn.hook_gate", hybrid}, {"blocks.0.attn.hook_pattern", !hybrid}, {"blocks.3.attn.hook_pattern", true}, {"logits", true}} {
			if got := strings.Contains(out, c.name+" "); got != c.want {
				t.Errorf("%s: lists %s: %v, want %v", arch, c.name, got, c.want)
			}
		}
		ids := filepath.Join(tmp, "ids.json")
		os.WriteFile(ids, []byte("[1,2,3,4,5]"), 0o644)
		code, _, errs = probe(t, "capture", "--model", dir, "--ids", ids, "--hook", "blocks.0.attn.hook_gate", "--out", filepath.Join(tmp, arch+".safetensors"))
		if code == 0 || !strings.Contains(errs, `hook "blocks.0.attn.hook_gate"`) {
			t.Errorf("%s: capture of a gate the layer does not have: exit %d, %q", arch, code, errs)
		}
		if _, err := os.Stat(filepath.Join(tmp, arch+".safetensors")); err == nil {
			t.Errorf("%s: capture wrote a file although it refused the hook", arch)
		}
	}
	code, _, errs := probe(t, "capture", "--model", filepath.Join(tmp, "qwen3"), "--ids", filepath.Join(tmp, "ids.json"), "--hook", "blocks.2.attn.hook_patern", "--out", filepath.Join(tmp, "x.safetensors"))
	if code == 0 || !strings.Contains(errs, "closest: blocks.2.attn.hook_pattern") {
		t.Errorf("misspelt hook: exit %d, %q", code, errs)
	}
}

// TestInspectLayerKinds: inspect shows each layer's mixer, the soft-caps,
// both RoPE bases and a wrapper's skipped vision tensors (config.json and
// headers only).
func TestInspectLayerKinds(t *testing.T) {
	needGolden(t)
	wrapper := t.TempDir()
	for as, from := range map[string]string{"config.json": "config.vlm.json", "model.safetensors": "model.vlm_names.safetensors"} {
		abs, _ := filepath.Abs(filepath.Join(goldenDir, "qwen35_text", from))
		if err := os.Symlink(abs, filepath.Join(wrapper, as)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		dir  string
		want []string
	}{
		{wrapper, []string{"layer kinds:   0–2 gated DeltaNet (4 key / 8 value heads × 16/16, conv 4); 3 full attention",
			"skipped:       21 stored tensors", "model.visual.", "the first 8 of 32 dimensions"}},
		{filepath.Join(goldenDir, "gemma2"), []string{"0 sliding window 16; 1 full attention; 2 sliding window 16; 3 full attention",
			"soft-caps:     attention logits 50, final logits 30"}},
		{filepath.Join(goldenDir, "gemma3_text"), []string{"0–4 sliding window 16; 5 full attention", "theta 10000, scaling default on sliding layers"}},
	} {
		code, out, errs := probe(t, "inspect", c.dir)
		if code != 0 {
			t.Fatalf("inspect %s: %s", c.dir, errs)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("inspect %s: no %q in\n%s", c.dir, w, out)
			}
		}
	}
}

// TestInspectTokens: inspect --tokens T reports the weights, the pass's
// estimate (model.Model.PassBytes with the diagnostics' consumers) and the
// diagnostics' results of the default reductions (4 bytes × 9 metrics ×
// layers × heads × T), beside the memory available; a family with its own
// pass and a negative count are refused with the flag named.
func TestInspectTokens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if code, _, errs := probe(t, "generate", "--arch", "qwen3", "--layers", "2", "--d-model", "64", "--heads", "4",
		"--kv-heads", "2", "--vocab", "300", "--max-pos", "512", "--out", dir); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	const T = 4096
	code, out, errs := probe(t, "inspect", dir, "--tokens", strconv.Itoa(T), "--json")
	if code != 0 {
		t.Fatalf("inspect --tokens: %s", errs)
	}
	var s summary
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Memory == nil {
		t.Fatalf("inspect --tokens --json: %v, memory %v\n%s", err, s.Memory, out)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	hs.Stream(-1, nil) // the diagnostics' consumers (their moments' squares)
	pass, _ := m.PassBytes(1, T, model.Options{Hooks: hs})
	diag := int64(4 * 9 * m.Config.Layers * m.Heads * T)
	if p := s.Memory; p.Tokens != T || p.WeightMiB != mib(m.WeightBytes) || p.PassMiB != mib(pass) || p.DiagnosticsMiB != mib(diag) {
		t.Errorf("memory %+v: want tokens %d, weights %v, pass %v, diagnostics %v MiB", p, T, mib(m.WeightBytes), mib(pass), mib(diag))
	}
	if runtime.GOOS == "linux" && (s.Memory.AvailableMiB <= 0 || s.Memory.AvailableSource == "") {
		t.Errorf("available memory not reported: %+v", s.Memory)
	}
	if code, out, _ := probe(t, "inspect", dir, "--tokens", "64"); code != 0 || !strings.Contains(out, "memory:        one pass of 64 tokens") {
		t.Errorf("inspect --tokens 64: exit %d\n%s", code, out)
	}

	afa := filepath.Join(t.TempDir(), "afa")
	if code, _, errs := probe(t, "generate", "--arch", "afa", "--out", afa); code != 0 {
		t.Fatalf("generate afa: %s", errs)
	}
	for _, bad := range [][]string{{afa, "--tokens", "64"}, {dir, "--tokens", "-1"}} {
		if code, _, errs := probe(t, append([]string{"inspect"}, bad...)...); code != 1 || !strings.Contains(errs, "--tokens") {
			t.Errorf("inspect %v: exit %d, %s; want a refusal naming --tokens", bad, code, errs)
		}
	}
}

// TestCaptureChecksMemory: probe capture refuses, before the pass, a
// capture whose kept values do not fit beside the pass, although the pass
// alone would (every layer's T×T pattern: one is the pass's, the copies
// are the capture's).
func TestCaptureChecksMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the available memory is read from /proc (Linux)")
	}
	avail, _ := model.AvailableMemory()
	if avail <= 0 {
		t.Skip("available memory unknown")
	}
	// one layer's pattern about avail/8, 32 layers of them: 4 × avail
	T := int(math.Sqrt(float64(avail)/8/4)) + 1
	tmp := t.TempDir()
	ck := filepath.Join(tmp, "ck")
	if code, _, errs := probe(t, "generate", "--arch", "qwen3", "--layers", "32", "--d-model", "16", "--heads", "1",
		"--kv-heads", "1", "--head-dim", "16", "--vocab", "97", "--max-pos", strconv.Itoa(T), "--out", ck); code != 0 {
		t.Fatal(errs)
	}
	ids := make([]int, T)
	for i := range ids {
		ids[i] = i % 97
	}
	idsFile := filepath.Join(tmp, "ids.json")
	data, _ := json.Marshal(ids)
	if err := os.WriteFile(idsFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "c.safetensors")
	code, _, errs := probe(t, "capture", "--model", ck, "--ids", idsFile, "--hook", "blocks.*.attn.hook_pattern", "--progress=false", "--out", out)
	want := fmt.Sprintf("capturing 1 × %d tokens keeps", T)
	if code != 1 || !strings.Contains(errs, want) || !strings.Contains(errs, "--memory-check=false") {
		t.Fatalf("capture of 32 patterns of %d tokens: exit %d, %s; want refused (%q)", T, code, errs, want)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s written", out)
	}
}
