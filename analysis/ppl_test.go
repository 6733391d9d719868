package analysis

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// pplModel writes a small generated checkpoint of arch into dir/name.
func pplModel(t *testing.T, dir, name string, arch model.Arch, maxPos int) string {
	t.Helper()
	cfg, err := model.SmallConfig(arch, model.Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 61, MaxPos: maxPos})
	if err != nil {
		t.Fatal(err)
	}
	_, tensors, err := model.Generate(cfg, 17)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := model.WriteHF(path, cfg, tensors); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTokenNLL: the NLL is −log softmax(z)[y], computed here the long way
// (normalized probabilities in float64), also for logits far from 0.
func TestTokenNLL(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const T, V = 5, 37
	logits := make([]float32, T*V)
	targets := make([]int, T)
	for i := range logits {
		logits[i] = float32(3 * rng.NormFloat64())
	}
	for i := V; i < 2*V; i++ {
		logits[i] += 800 // exp would overflow without the row maximum
	}
	for t := range targets {
		targets[t] = rng.IntN(V)
	}
	got := TokenNLL(nil, logits, V, targets)
	for p, y := range targets {
		z := logits[p*V : (p+1)*V]
		var sum float64
		for _, x := range z {
			sum += math.Exp(float64(x) - float64(z[y]))
		}
		if want := math.Log(sum); math.Abs(got[p]-want) > 1e-12*max(1, want) {
			t.Fatalf("position %d: NLL %v, want %v", p, got[p], want)
		}
	}
}

// TestTInterval checks the Student-t interval against hand values:
// x = 1, 2, 3, 4: std 1.2910, se 0.6455, t(0.975, 3) = 3.18245.
func TestTInterval(t *testing.T) {
	std, se, lo, hi := tInterval([]float64{1, 2, 3, 4}, 0.95)
	want := 3.182446305284263 * math.Sqrt(5.0/3) / 2
	if math.Abs(std-math.Sqrt(5.0/3)) > 1e-12 || math.Abs(se-math.Sqrt(5.0/3)/2) > 1e-12 ||
		math.Abs(lo-(2.5-want)) > 1e-9 || math.Abs(hi-(2.5+want)) > 1e-9 {
		t.Fatalf("std %v se %v interval [%v, %v], want half-width %v", std, se, lo, hi, want)
	}
	if std, _, lo, _ := tInterval([]float64{3}, 0.95); !math.IsNaN(std) || !math.IsNaN(lo) {
		t.Fatalf("one value: std %v, lo %v; want NaN", std, lo)
	}
}

// TestPPLOptions: positions, variants and the chunk plan (calibration
// first, then T + 1 tokens per chunk, disjoint).
func TestPPLOptions(t *testing.T) {
	o := DefaultPPLOptions()
	o.Lengths, o.Samples = []int{8, 16}, 2
	for _, c := range []struct {
		pos   string
		T     int
		first int
		err   string
	}{{"all", 16, 0, ""}, {"last-quarter", 16, 12, ""}, {"last-quarter", 10, 8, ""}, {"from:4", 16, 4, ""},
		{"from:16", 16, 0, "score nothing"}, {"from:x", 16, 0, "from:N"}, {"middle", 16, 0, "want all"}} {
		o.Positions = c.pos
		first, err := o.FirstPosition(c.T)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("positions %q at T=%d: err %v, want %q", c.pos, c.T, err, c.err)
			}
			continue
		}
		if err != nil || first != c.first {
			t.Errorf("positions %q at T=%d: first %d (err %v), want %d", c.pos, c.T, first, err, c.first)
		}
	}
	o.Positions = ""
	if _, err := ParseVariants("learned,one,k,learned"); err == nil {
		t.Error("a repeated variant was accepted")
	}
	if _, err := ParseVariants("learned,sigmoid"); err == nil {
		t.Error("an unknown variant was accepted")
	}
	o.Offset = 3
	if err := ValidatePPLOptions(&o); err != nil {
		t.Fatal(err)
	}
	if o.CalibLength != 8 || o.CalibSamples != 1 {
		t.Fatalf("calibration defaults: %d × %d, want 1 × 8 (the smallest length)", o.CalibSamples, o.CalibLength)
	}
	eval, calib, err := planPPL(100, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(calib) != 1 || calib[0].Start != 3 || calib[0].End != 11 {
		t.Fatalf("calibration chunks %+v, want [3, 11)", calib)
	}
	end := 11
	for _, c := range eval {
		if c.Start != end || c.End-c.Start != c.T+1 {
			t.Fatalf("chunk %+v: want start %d and T+1 tokens", c, end)
		}
		end = c.End
	}
	if len(eval) != 4 || end != 11+2*9+2*17 {
		t.Fatalf("%d chunks ending at %d", len(eval), end)
	}
	if _, _, err := planPPL(60, o); err == nil || !strings.Contains(err.Error(), "calibration tokens") {
		t.Fatalf("short stream: err %v", err)
	}
	o.Variants = []string{results.VariantLearned, results.VariantOne, "k"}
	if eval, calib, _ := planPPL(100, o); len(calib) != 0 || eval[0].Start != 3 {
		t.Fatalf("without a calibrated variant there is no calibration chunk: %v %v", calib, eval[0])
	}
}

// TestPPLRun runs a gated and an ungated generated checkpoint over three
// lengths (the last beyond max_position_embeddings) and checks the NLLs
// against independent passes, the summaries against the chunks, the
// paired differences, the calibration, the manifest, and that a second run
// writes byte-identical tables.
func TestPPLRun(t *testing.T) {
	dir := t.TempDir()
	gated := pplModel(t, dir, "gated", model.ArchGated, 40)
	plain := pplModel(t, dir, "plain", model.ArchQwen3, 40)
	stream := randomStream(600, 0, 61, 5)
	o := DefaultPPLOptions()
	o.Lengths, o.Samples, o.TrainLength = []int{8, 24, 48}, 3, 24
	src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: len(stream), Digest: TokenDigest(stream)}
	var seen []Progress
	run := func(out string) *results.PPLResults {
		r := &PPLRun{RunSpec: RunSpec{Source: src, Stream: stream, Out: out, Threads: 2, Progress: func(p Progress) { seen = append(seen, p) }},
			Dirs: []string{gated, plain}, Options: o}
		res, err := r.Run()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	out := filepath.Join(dir, "out")
	res := run(out)
	man := res.Manifest
	if !man.Complete || len(man.Models) != 2 || man.Models[0].Label != "gated" || man.Models[1].Label != "plain" {
		t.Fatalf("manifest: complete %v, models %+v", man.Complete, man.Models)
	}
	if !reflect.DeepEqual(man.Models[0].Variants, o.Variants) || !reflect.DeepEqual(man.Models[1].Variants, []string{results.VariantLearned}) ||
		len(man.Models[1].Notes) == 0 {
		t.Fatalf("variants: gated %v, plain %v (notes %v)", man.Models[0].Variants, man.Models[1].Variants, man.Models[1].Notes)
	}
	if want := 6*9 + 9; len(res.Chunks) != want { // 6 variants × 3 lengths × 3 samples, and the plain model's 9
		t.Fatalf("%d chunk rows, want %d", len(res.Chunks), want)
	}
	last := seen[len(seen)-1]
	if last.Pass != last.Passes || last.Passes != 6*9+1+9 || !last.Done || last.WorkLeft > 1e-6*last.Work || last.Label != "plain learned" {
		t.Fatalf("last progress %+v", last)
	}
	if first := seen[0]; first.Label != "gated calibration" || first.Layers != 2 {
		t.Errorf("first progress %+v: want the gated model's calibration pass over its 2 layers", first)
	}

	// independent check of the learned and "one" variants of the gated
	// model: Forward (hook_gate set to 1 for "one"), log-softmax by hand
	m, err := model.Load(gated, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hsOne := &hooks.Set{}
	for h := 0; h < m.Heads; h++ {
		hsOne.Add("blocks.*.attn.hook_gate", hooks.SetHead(h, 1))
	}
	for _, c := range res.Chunks {
		if c.Model != "gated" || (c.Variant != results.VariantLearned && c.Variant != results.VariantOne) {
			continue
		}
		opt := model.Options{Logits: true, AllowExtrapolation: true}
		if c.Variant == results.VariantOne {
			opt.Hooks = hsOne
		}
		outp, err := m.Forward([][]int{stream[c.Start : c.End-1]}, opt)
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for p := c.First; p < c.T; p++ {
			z := outp.Logits[p*m.Vocab : (p+1)*m.Vocab]
			var s float64
			for _, x := range z {
				s += math.Exp(float64(x))
			}
			sum += math.Log(s) - float64(z[stream[c.Start+p+1]])
		}
		if math.Abs(sum-c.NLLSum) > 1e-9*math.Abs(sum) {
			t.Fatalf("%s T=%d sample %d: NLL sum %v, independent %v", c.Variant, c.T, c.Sample, c.NLLSum, sum)
		}
		if c.Extrap != (c.T > 40) {
			t.Fatalf("T=%d: extrapolated = %v", c.T, c.Extrap)
		}
	}

	// summaries from the chunks; paired differences
	for _, s := range res.Summary {
		var sum float64
		var n int
		var d float64
		for _, c := range res.Chunks {
			if c.Model == s.Model && c.Variant == s.Variant && c.T == s.T {
				sum += c.NLLSum
				n += c.N
				for _, b := range res.Chunks {
					if b.Model == c.Model && b.Variant == results.VariantLearned && b.T == c.T && b.Sample == c.Sample {
						d += c.NLL - b.NLL
					}
				}
			}
		}
		if n != s.N || s.Samples != 3 || math.Abs(sum/float64(n)-s.NLL) > 1e-12 || math.Abs(math.Exp(s.NLL)-s.PPL) > 1e-9*s.PPL {
			t.Fatalf("summary %+v: from the chunks n %d, mean %v", s, n, sum/float64(n))
		}
		if !(s.PPLLo <= s.PPL && s.PPL <= s.PPLHi) {
			t.Fatalf("summary %+v: ppl outside its interval", s)
		}
		if s.Variant == results.VariantLearned {
			if !math.IsNaN(s.DNLL) {
				t.Fatalf("learned: d_nll %v, want NaN", s.DNLL)
			}
		} else if math.Abs(s.DNLL-d/3) > 1e-12 {
			t.Fatalf("%s T=%d: d_nll %v, want %v", s.Variant, s.T, s.DNLL, d/3)
		}
		if s.TMinusTr != s.T-24 {
			t.Fatalf("t_minus_train %d at T=%d", s.TMinusTr, s.T)
		}
	}
	if len(res.Calibration) != 3*2*4 {
		t.Fatalf("%d calibration rows, want 3 mappings × 2 layers × 4 heads", len(res.Calibration))
	}
	for _, c := range res.Calibration {
		if c.Rows != 8 || !(c.MeanGate > 0 && c.MeanGate < 1) || !(c.MeanK > 0 && c.MeanK < 1) {
			t.Fatalf("calibration row %+v", c)
		}
	}

	// read back; a second run writes the same tables byte for byte
	back, err := ReadPPL(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Summary) != len(res.Summary) || len(back.Chunks) != len(res.Chunks) || len(back.Calibration) != len(res.Calibration) {
		t.Fatalf("read back %d/%d/%d rows", len(back.Summary), len(back.Chunks), len(back.Calibration))
	}
	if back.Summary[4].NLL != res.Summary[4].NLL || back.Chunks[7] != res.Chunks[7] {
		t.Fatalf("read back differs: %+v vs %+v", back.Chunks[7], res.Chunks[7])
	}
	out2 := filepath.Join(dir, "out2")
	run(out2)
	for _, f := range []string{"ppl_summary.parquet", "ppl_summary.csv", "ppl_chunks.parquet", "ppl_chunks.csv", "ppl_calibration.parquet"} {
		a, err1 := os.ReadFile(filepath.Join(out, f))
		b, err2 := os.ReadFile(filepath.Join(out2, f))
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s differs between two runs (%v, %v)", f, err1, err2)
		}
	}
}

// TestPPLRunErrors: ids outside a vocabulary, streams too short and
// unreadable folders fail before any pass, naming what is wrong.
func TestPPLRunErrors(t *testing.T) {
	dir := t.TempDir()
	gated := pplModel(t, dir, "gated", model.ArchGated, 64)
	o := DefaultPPLOptions()
	o.Lengths, o.Samples = []int{8}, 2
	bad := randomStream(100, 0, 61, 1)
	bad[20] = 99
	src := results.SourceInfo{File: results.FileHash{Path: "ids.json"}}
	for _, c := range []struct {
		dirs   []string
		stream []int
		want   string
	}{
		{[]string{gated}, bad, "outside the vocabulary"},
		{[]string{gated}, bad[:15], "ids.json"},
		{[]string{filepath.Join(dir, "none")}, bad[:80], "config.json"},
	} {
		c.stream = append([]int(nil), c.stream...)
		if c.want != "outside the vocabulary" {
			for i := range c.stream {
				c.stream[i] %= 61
			}
		}
		_, err := (&PPLRun{RunSpec: RunSpec{Source: src, Stream: c.stream, Out: filepath.Join(dir, "o")}, Dirs: c.dirs, Options: o}).Run()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want one mentioning %q", err, c.want)
		}
	}
}

// TestPPLShardsResumeCalibration: a perplexity run with calibrated gates
// (k-matched, mean) over a gated and an ungated model, run as two shards
// (each runs the calibration passes its calibrated variants need) and
// merged, gives tables byte-identical to the unsharded run; so does the
// unsharded run resumed after a kill that left a calibration pass and a
// calibrated evaluation pass without files, which it runs again.
func TestPPLShardsResumeCalibration(t *testing.T) {
	dir := t.TempDir()
	gated := pplModel(t, dir, "gated", model.ArchGated, 40)
	plain := pplModel(t, dir, "plain", model.ArchQwen3, 40)
	stream := randomStream(600, 0, 61, 9)
	src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: len(stream), Digest: TokenDigest(stream)}
	o := DefaultPPLOptions()
	o.Lengths, o.Samples, o.CalibSamples, o.CalibLength = []int{8, 16}, 2, 2, 12
	o.Variants = []string{results.VariantLearned, string(probes.MapKMatched), string(probes.MapMean)}
	run := func(out string, sh results.Shard) *results.PPLManifest {
		t.Helper()
		res, err := (&PPLRun{RunSpec: RunSpec{Source: src, Stream: stream, Out: out, Threads: 2, Shard: sh},
			Dirs: []string{gated, plain}, Options: o}).Run()
		if err != nil {
			t.Fatal(err)
		}
		return res.Manifest
	}
	tmp := t.TempDir()
	whole := filepath.Join(tmp, "whole")
	if man := run(whole, results.Shard{}); len(man.Passes) != 2+3*4+4 || len(man.Tables) != 6 {
		t.Fatalf("unsharded: %d passes, tables %v; want 2 calibration + 3 variants × 4 + 4 passes, 3 tables × 2 formats", len(man.Passes), man.Tables)
	}
	want := tableFiles(t, whole)
	s0, s1 := filepath.Join(tmp, "s0"), filepath.Join(tmp, "s1")
	for i, d := range []string{s0, s1} {
		man := run(d, results.Shard{Index: i, Count: 2})
		calib := 0
		for _, p := range man.Passes {
			if strings.HasSuffix(p.Key.Pass, "/"+pplCalibration) {
				calib++
			}
		}
		if calib != 2 || len(man.Tables) != 0 {
			t.Errorf("shard %d/2: %d calibration passes, tables %v; want both calibration passes and no tables", i, calib, man.Tables)
		}
	}
	merged := filepath.Join(tmp, "merged")
	if _, err := MergeStream([]string{s0, s1}, merged, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, "merged shards", want, tableFiles(t, merged))
	if res, err := ReadPPL(merged); err != nil || len(res.Calibration) == 0 {
		t.Errorf("ReadPPL of the merged folder: %v", err)
	}

	// a kill: one calibration pass and one k-matched pass lost, no tables
	for _, c := range []results.Chunk{{T: 12, Sample: 1, Pass: "m0/calibration"}, {T: 16, Sample: 0, Pass: "m0/k-matched"}} {
		if err := os.Remove(streamPassPath(whole, "ppl", c)); err != nil {
			t.Fatal(err)
		}
	}
	for name := range want {
		os.Remove(filepath.Join(whole, name))
	}
	man := run(whole, results.Shard{})
	if len(man.Reused) != len(man.Passes)-2 {
		t.Errorf("resumed: %d of %d passes reused, want all but 2", len(man.Reused), len(man.Passes))
	}
	sameFiles(t, "resumed run", want, tableFiles(t, whole))
}
