package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// gdnGoldenCases returns the golden folders whose model has Gated DeltaNet
// layers (qwen35_text and hidden variants of it), or skips.
func gdnGoldenCases(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*", "golden.safetensors"))
	var dirs []string
	for _, f := range files {
		if c, err := model.LoadConfig(filepath.Dir(f)); err == nil && c.DeltaNet != nil {
			dirs = append(dirs, filepath.Dir(f))
		}
	}
	if len(dirs) == 0 {
		t.Skipf("golden data not available: no case with Gated DeltaNet layers under %s (it comes with ../shared in CI)", goldenDir)
	}
	return dirs
}

// TestGDNCommandGolden runs probe gdn on sequence 0 of each Qwen3.5 golden
// case and checks the table against the golden tensors: beta and decay
// against beta.l and exp(g.l), the W-row columns against those of the
// golden eff_attn.l, and the Parquet table against the CSV.
func TestGDNCommandGolden(t *testing.T) {
	for _, dir := range gdnGoldenCases(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			gold, err := checkpoint.OpenFile(filepath.Join(dir, "golden.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer gold.Close()
			idsFile, _, T := goldenIDs(t, gold, false)
			tmp := filepath.Dir(idsFile)
			out := filepath.Join(tmp, "out")
			code, stdout, stderr := probe(t, "gdn", "--model", dir, "--ids", idsFile, "--lengths", fmt.Sprint(T), "--out", out, "--tile", "5", "--w-rows")
			if code != 0 {
				t.Fatalf("probe gdn: exit %d: %s", code, stderr)
			}
			if !strings.Contains(stdout, "wrote") {
				t.Errorf("stdout %q", stdout)
			}
			header, cols, _ := readDiagCSV(t, filepath.Join(out, "gdn.csv"))
			col := map[string][]float64{}
			for i, h := range header {
				col[h] = cols[i]
			}
			pq, err := results.ReadTable[results.GDNRow](filepath.Join(out, "gdn.parquet"))
			if err != nil {
				t.Fatal(err)
			}
			if len(pq) != len(col["beta"]) {
				t.Fatalf("parquet has %d rows, csv %d", len(pq), len(col["beta"]))
			}
			cfg, err := model.LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			Hv := cfg.DeltaNet.ValueHeads
			var worstBeta, worstNeff, worstSum float64
			for i, r := range pq {
				if r.Beta != col["beta"][i] || r.Innovation != col["innovation"][i] {
					t.Fatalf("row %d: parquet beta %v innovation %v, csv %v %v", i, r.Beta, r.Innovation, col["beta"][i], col["innovation"][i])
				}
				gb, _ := gold.Float32(fmt.Sprintf("beta.%d", r.Layer))
				gg, _ := gold.Float32(fmt.Sprintf("g.%d", r.Layer))
				W, _ := gold.Float32(fmt.Sprintf("eff_attn.%d", r.Layer))
				j := r.Token*Hv + r.Head // batch 0
				worstBeta = max(worstBeta, math.Abs(r.Beta-float64(gb[j])), math.Abs(r.Decay-math.Exp(float64(gg[j]))))
				ref := probes.EffAttnRow(W[(r.Head*T+r.Token)*T:][:r.Token+1])
				worstNeff = max(worstNeff, math.Abs(r.NEffW-ref.NEff)/ref.NEff)
				worstSum = max(worstSum, math.Abs(r.RowSum-ref.RowSum), math.Abs(r.FirstShare-ref.FirstShare))
			}
			nl := len(cfg.DeltaNet.LinearLayers())
			if want := nl * Hv * T; len(pq) != want {
				t.Errorf("%d rows, want %d layers × %d heads × %d tokens = %d", len(pq), nl, Hv, T, want)
			}
			if worstBeta > 3e-5 || worstNeff > 1e-4 || worstSum > 6e-5 {
				t.Errorf("vs golden: β, e^g %.3g abs (tol 3e-5); n_eff^W %.3g rel (1e-4); row sum, first share %.3g abs (6e-5)", worstBeta, worstNeff, worstSum)
			}
			heads, err := results.ReadTable[results.GDNHeadRow](filepath.Join(out, "gdn_heads.parquet"))
			if err != nil {
				t.Fatal(err)
			}
			if len(heads) != len(pq)/T {
				t.Fatalf("%d head rows, want %d", len(heads), len(pq)/T)
			}
			for k, h := range heads {
				var sum float64
				for _, r := range pq[k*T : (k+1)*T] {
					if r.Layer != h.Layer || r.Head != h.Head {
						t.Fatalf("head row %d is layer %d head %d, its tokens are layer %d head %d", k, h.Layer, h.Head, r.Layer, r.Head)
					}
					sum += r.Innovation
				}
				if math.Abs(h.Innovation-sum/float64(T)) > 1e-12*max(1, h.Innovation) || h.Tokens != T {
					t.Errorf("layer %d head %d: mean innovation %v, the gdn table's tokens give %v", h.Layer, h.Head, h.Innovation, sum/float64(T))
				}
			}
			var man results.GDNManifest
			data, err := os.ReadFile(filepath.Join(out, results.GDNManifestName))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &man); err != nil {
				t.Fatal(err)
			}
			if man.Options.Innovation != "decayed" || man.Options.Weights != "abs" || fmt.Sprint(man.Layers) != fmt.Sprint(cfg.DeltaNet.LinearLayers()) || len(man.Chunks) != 1 {
				t.Errorf("manifest: innovation %q weights %q layers %v chunks %v", man.Options.Innovation, man.Options.Weights, man.Layers, man.Chunks)
			}
		})
	}
}

// TestGDNCommandErrors: a model without Gated DeltaNet layers and a bad
// option are refused with messages that name them.
func TestGDNCommandErrors(t *testing.T) {
	tmp := t.TempDir()
	ck := filepath.Join(tmp, "llama")
	if code, _, stderr := probe(t, "generate", "--arch", "llama", "--layers", "1", "--d-model", "32", "--heads", "2", "--kv-heads", "1", "--vocab", "64", "--out", ck); code != 0 {
		t.Fatal(stderr)
	}
	ids := filepath.Join(tmp, "ids.json")
	os.WriteFile(ids, []byte("[1,2,3,4,5,6,7,8]"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", ck, "--ids", ids, "--lengths", "8"}, "no Gated DeltaNet, Mamba-2 or RWKV-7 layers"},
		{[]string{"--model", ck, "--ids", ids, "--lengths", "8", "--innovation", "prior"}, `innovation form "prior"`},
		{[]string{"--model", ck, "--ids", ids, "--lengths", "8", "--rwkv-decay", "median"}, `decay summary "median"`},
		{[]string{"--model", ck, "--ids", ids, "--lengths", "8", "--rwkv-gain", "max"}, `gain summary "max"`},
		{[]string{"--model", ck, "--ids", ids, "--lengths", "16"}, "16"},
		{[]string{"--model", ck, "--ids", ids}, "--lengths is required"},
	} {
		args := append([]string{"gdn", "--out", filepath.Join(tmp, "out")}, c.args...)
		code, _, stderr := probe(t, args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want it to mention %q", c.args, code, stderr, c.want)
		}
	}
}

// TestGDNShardsMergeCLI: probe gdn --shard 0/2 and 1/2, then probe merge,
// give the tables of the unsharded run byte for byte; the default set
// leaves the W-row columns empty and says so in the manifest; a re-run
// reuses every pass; a folder of other files is refused.
func TestGDNShardsMergeCLI(t *testing.T) {
	tmp := t.TempDir()
	ck := filepath.Join(tmp, "q35")
	if code, _, stderr := probe(t, "generate", "--arch", "qwen3_5", "--layers", "4", "--d-model", "64", "--heads", "2", "--kv-heads", "1",
		"--vocab", "128", "--out", ck); code != 0 {
		t.Fatal(stderr)
	}
	ids := make([]int, 300)
	for i := range ids {
		ids[i] = (i*37 + 11) % 128
	}
	idsFile := filepath.Join(tmp, "ids.json")
	data, _ := json.Marshal(ids)
	os.WriteFile(idsFile, data, 0o644)
	base := []string{"gdn", "--model", ck, "--ids", idsFile, "--lengths", "24,40", "--samples", "2"}
	run := func(extra ...string) (int, string, string) { return probe(t, append(slices.Clone(base), extra...)...) }
	whole := filepath.Join(tmp, "whole")
	if code, _, stderr := run("--out", whole); code != 0 {
		t.Fatal(stderr)
	}
	for i, d := range []string{"s0", "s1"} {
		code, stdout, stderr := run("--out", filepath.Join(tmp, d), "--shard", fmt.Sprintf("%d/2", i))
		if code != 0 || !strings.Contains(stdout, "probe merge") {
			t.Fatalf("shard %d: exit %d: %s%s", i, code, stdout, stderr)
		}
	}
	merged := filepath.Join(tmp, "merged")
	if code, stdout, stderr := probe(t, "merge", filepath.Join(tmp, "s0"), filepath.Join(tmp, "s1"), "--out", merged); code != 0 || !strings.Contains(stdout, "4 probe gdn passes") {
		t.Fatalf("merge: exit %d: %s%s", code, stdout, stderr)
	}
	if code, _, stderr := probe(t, "merge", filepath.Join(tmp, "s0"), filepath.Join(tmp, "s1"), "--out", filepath.Join(tmp, "m2"), "--ddof", "1"); code == 0 || !strings.Contains(stderr, "--ddof is an option of sweep merges") {
		t.Errorf("merge with a sweep option: exit %d: %s", code, stderr)
	}
	for _, name := range []string{"gdn.parquet", "gdn.csv", "gdn_heads.parquet", "gdn_heads.csv"} {
		a, err := os.ReadFile(filepath.Join(whole, name))
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(merged, name)); !bytes.Equal(a, b) {
			t.Errorf("%s of the merged shards differs from the unsharded run's", name)
		}
	}
	rows, err := results.ReadTable[results.GDNRow](filepath.Join(whole, "gdn.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2*(24+40)*3*4 || !math.IsNaN(rows[5].NEffW) || !math.IsNaN(rows[5].KW) || math.IsNaN(rows[5].Innovation) {
		t.Errorf("%d rows; row 5 %+v: want 2·64 tokens × 3 layers × 4 heads, NaN W-row columns and a finite innovation", len(rows), rows[5])
	}
	var man results.GDNManifest
	b, _ := os.ReadFile(filepath.Join(whole, results.GDNManifestName))
	if err := json.Unmarshal(b, &man); err != nil || man.Options.WRows || !strings.Contains(string(b), `"w_rows": false`) {
		t.Errorf("manifest: %v; w_rows %v", err, man.Options.WRows)
	}
	if code, stdout, _ := run("--out", whole); code != 0 || !strings.Contains(stdout, "4 passes (0 run, 4 already finished)") {
		t.Errorf("re-run: exit %d: %s", code, stdout)
	}
	if code, _, stderr := run("--out", filepath.Join(tmp, "s0")); code == 0 || !strings.Contains(stderr, "shard.count (1 here, 2 in the folder)") {
		t.Errorf("unsharded run into a shard's folder: exit %d: %s", code, stderr)
	}
	if code, _, stderr := run("--out", ck); code == 0 || !strings.Contains(stderr, "pass --force") {
		t.Errorf("run into a checkpoint folder: exit %d: %s", code, stderr)
	}
	if code, _, stderr := run("--out", filepath.Join(tmp, "x"), "--no-dispersion"); code == 0 || !strings.Contains(stderr, "with --w-rows") {
		t.Errorf("--no-dispersion alone: exit %d: %s", code, stderr)
	}
}

// gdnGoldenSeq0 runs probe gdn --w-rows (tiles of 5 rows) on sequence 0
// of a golden case's input_ids and returns its length, the output folder
// and the gdn table.
func gdnGoldenSeq0(t *testing.T, dir string, gold *checkpoint.Checkpoint) (int, string, []results.GDNRow) {
	t.Helper()
	idsFile, _, T := goldenIDs(t, gold, false)
	tmp := filepath.Dir(idsFile)
	out := filepath.Join(tmp, "out")
	if code, _, stderr := probe(t, "gdn", "--model", dir, "--ids", idsFile, "--lengths", fmt.Sprint(T), "--out", out, "--tile", "5", "--w-rows"); code != 0 {
		t.Fatalf("probe gdn: exit %d: %s", code, stderr)
	}
	pq, err := results.ReadTable[results.GDNRow](filepath.Join(out, "gdn.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	return T, out, pq
}

// TestGDNCommandGoldenSSM runs probe gdn on sequence 0 of the Mamba-2 and
// Falcon-H1 golden cases: every layer is measured with mixer mamba2, beta
// and decay match the golden dt.l and decay.l, innovation is empty, and
// the W-row columns match those of the golden eff_attn.l (float64 from the
// reference's own factors); Falcon-H1's softmax heads come as rows of mixer
// attention whose n_eff and first-token mass match the golden attn.l.
func TestGDNCommandGoldenSSM(t *testing.T) {
	for _, name := range []string{"mamba2", "falcon_h1"} {
		dir := filepath.Join(goldenDir, name)
		t.Run(name, func(t *testing.T) {
			gold, err := checkpoint.OpenFile(filepath.Join(dir, "golden.safetensors"))
			if err != nil {
				t.Skipf("golden data not available: %v", err)
			}
			defer gold.Close()
			cfg, err := model.LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			H := cfg.SSM.Heads
			T, _, pq := gdnGoldenSeq0(t, dir, gold)
			Ha := 0 // Falcon-H1: its softmax heads beside, mixer "attention"
			if cfg.SSM.Attention {
				Ha = cfg.Heads
			}
			if want := cfg.Layers * (H + Ha) * T; len(pq) != want {
				t.Fatalf("%d rows, want %d layers × (%d + %d) heads × %d tokens = %d", len(pq), cfg.Layers, H, Ha, T, want)
			}
			var worstDt, worstNeff, worstSum, worstAttn float64
			for _, r := range pq {
				if r.Mixer == results.MixerAttention {
					A, _ := gold.Float32(fmt.Sprintf("attn.%d", r.Layer))
					ref := probes.EffAttnRow(A[(r.Head*T+r.Token)*T:][:r.Token+1])
					worstAttn = max(worstAttn, math.Abs(r.NEffW-ref.NEff)/ref.NEff, math.Abs(r.FirstShare-ref.FirstShare))
					continue
				}
				gdt, _ := gold.Float32(fmt.Sprintf("dt.%d", r.Layer))
				gdec, _ := gold.Float32(fmt.Sprintf("decay.%d", r.Layer))
				M, _ := gold.Float32(fmt.Sprintf("eff_attn.%d", r.Layer))
				j := r.Token*H + r.Head // batch 0
				if r.Mixer != results.MixerMamba2 || !math.IsNaN(r.Innovation) {
					t.Fatalf("row %+v: want mixer mamba2 and no innovation", r)
				}
				worstDt = max(worstDt, math.Abs(r.Beta-float64(gdt[j])), math.Abs(r.Decay-float64(gdec[j])))
				ref := probes.EffAttnRow(M[(r.Head*T+r.Token)*T:][:r.Token+1])
				worstNeff = max(worstNeff, math.Abs(r.NEffW-ref.NEff)/ref.NEff)
				worstSum = max(worstSum, math.Abs(r.RowSum-ref.RowSum)/max(1, ref.AbsSum), math.Abs(r.FirstShare-ref.FirstShare))
			}
			if worstAttn > 1e-4 {
				t.Errorf("attention rows vs the golden attn.l: n_eff rel., first-token mass %.3g (tol 1e-4)", worstAttn)
			}
			if worstDt > 1e-5 || worstNeff > 1e-4 || worstSum > 1e-4 {
				t.Errorf("vs golden: dt, decay %.3g abs (tol 1e-5); n_eff^W %.3g rel (1e-4); row sum (rel. to Σ|M|), first share %.3g (1e-4)", worstDt, worstNeff, worstSum)
			}
		})
	}
}

// TestGDNCommandGoldenRWKV7: probe gdn on sequence 0 of each RWKV-7
// golden case measures every layer with mixer rwkv7: beta and decay are
// the summaries of the golden a, κ̂ and w (GainRemoval, DecayGeoMean, the
// defaults, recorded in the manifest), the state norm at the last token
// is ‖state.l‖_F of the head, and the W-row columns match those of the
// golden float64 eff_attn.l (probes.TestRWKVFilterGolden checks every
// column of both sequences).
func TestGDNCommandGoldenRWKV7(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*", "golden.safetensors"))
	var dirs []string
	for _, f := range files {
		if c, err := model.LoadConfig(filepath.Dir(f)); err == nil && c.RWKV7 != nil {
			dirs = append(dirs, filepath.Dir(f))
		}
	}
	if len(dirs) == 0 {
		t.Skipf("golden data not available: no RWKV-7 case under %s (it comes with ../shared in CI)", goldenDir)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			gold, err := checkpoint.OpenFile(filepath.Join(dir, "golden.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer gold.Close()
			cfg, err := model.LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			H, N := cfg.Heads, cfg.DHead
			T, out, pq := gdnGoldenSeq0(t, dir, gold)
			if want := cfg.Layers * H * T; len(pq) != want {
				t.Fatalf("%d rows, want %d layers × %d heads × %d tokens = %d", len(pq), cfg.Layers, H, T, want)
			}
			var worstGain, worstNorm, worstNeff, worstSum float64
			for _, r := range pq {
				get := func(k string) []float32 { x, _ := gold.Float32(fmt.Sprintf("%s.%d", k, r.Layer)); return x }
				o := (r.Token*H + r.Head) * N // batch 0
				a, kk, w := get("a")[o:o+N], get("kk")[o:o+N], get("w")[o:o+N]
				if r.Mixer != results.MixerRWKV7 || math.IsNaN(r.Innovation) {
					t.Fatalf("row %+v: want mixer rwkv7 with an innovation", r)
				}
				worstGain = max(worstGain, math.Abs(r.Beta-probes.GainRemoval.Of(a, kk)), math.Abs(r.Decay-probes.DecayGeoMean.Of(w)))
				if r.Token == T-1 {
					var n2 float64
					for _, x := range get("state")[r.Head*N*N : (r.Head+1)*N*N] {
						n2 += float64(x) * float64(x)
					}
					worstNorm = max(worstNorm, math.Abs(r.StateNorm-math.Sqrt(n2))/math.Sqrt(n2))
				}
				M, _ := gold.Float64(fmt.Sprintf("eff_attn.%d", r.Layer))
				var abs, sq, sum float64
				for _, x := range M[(r.Head*T+r.Token)*T:][:r.Token+1] {
					abs, sq, sum = abs+math.Abs(x), sq+x*x, sum+x
				}
				worstNeff = max(worstNeff, math.Abs(r.NEffW-abs*abs/sq)/(abs*abs/sq))
				worstSum = max(worstSum, math.Abs(r.RowSum-sum)/max(1, abs))
			}
			if worstGain > 1e-5 || worstNorm > 1e-4 || worstNeff > 1e-4 || worstSum > 1e-4 {
				t.Errorf("vs golden: gain, decay %.3g abs (tol 1e-5); state norm at T %.3g rel (1e-4); n_eff^W %.3g rel (1e-4); row sum %.3g rel. to max(1, Σ|M|) (1e-4)",
					worstGain, worstNorm, worstNeff, worstSum)
			}
			var man results.GDNManifest
			data, err := os.ReadFile(filepath.Join(out, results.GDNManifestName))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &man); err != nil {
				t.Fatal(err)
			}
			if man.Options.RWKVDecay != "geomean" || man.Options.RWKVGain != "removal" || len(man.Layers) != cfg.Layers || man.Conventions["rwkv7"] == "" {
				t.Errorf("manifest: rwkv_decay %q rwkv_gain %q layers %v, rwkv7 convention %q", man.Options.RWKVDecay, man.Options.RWKVGain, man.Layers, man.Conventions["rwkv7"])
			}
		})
	}
}

// TestDiagRefusesMamba2: probe diag on a model without softmax layers says
// so and points to probe gdn, instead of writing an empty table.
func TestDiagRefusesMamba2(t *testing.T) {
	dir := filepath.Join(goldenDir, "mamba2")
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	tmp := t.TempDir()
	ids := filepath.Join(tmp, "ids.json")
	os.WriteFile(ids, []byte("[[1, 2, 3, 4, 5, 6]]"), 0o644)
	code, _, stderr := probe(t, "diag", "--model", dir, "--ids", ids, "--out", filepath.Join(tmp, "d.csv"))
	if code == 0 || !strings.Contains(stderr, "no softmax attention layers") || !strings.Contains(stderr, "probe gdn") {
		t.Errorf("exit %d, stderr %q; want a refusal naming probe gdn", code, stderr)
	}
}

// goldenIDs writes a golden file's input_ids ([B, T]) as one token stream
// to ids.json in a new temporary folder — sequence 0 only, or all B
// sequences back to back — and returns its path, the stream and T.
func goldenIDs(t *testing.T, gold *checkpoint.Checkpoint, all bool) (idsFile string, ids []int, T int) {
	t.Helper()
	raw, err := gold.Int64("input_ids")
	if err != nil {
		t.Fatal(err)
	}
	info, ok := gold.Info("input_ids")
	if !ok || len(info.Shape) != 2 {
		t.Fatalf("input_ids: no [B, T] tensor in the golden file")
	}
	T = info.Shape[1]
	n := T
	if all {
		n = info.Shape[0] * T
	}
	ids = make([]int, n)
	for i := range ids {
		ids[i] = int(raw[i])
	}
	data, err := json.Marshal(ids)
	if err != nil {
		t.Fatal(err)
	}
	idsFile = filepath.Join(t.TempDir(), "ids.json")
	if err := os.WriteFile(idsFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return idsFile, ids, T
}
