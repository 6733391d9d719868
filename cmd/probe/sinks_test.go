package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
)

// TestSinksCommandGolden runs probe sinks on sequence 0 of every golden case
// whose model has a sliding window or Gated DeltaNet layers (qwen35_text:
// its gated softmax layer beside its Gated DeltaNet layers; gemma2,
// gemma3_text: sliding and global layers; hidden variants of them) and
// checks every head's first-token attention, left-out rows, entropy,
// largest weight and gate statistics against the same quantities computed
// here in float64 from the golden attn.{l} and gate.{l}: rows where
// position 0 lies outside the window must have exactly 0 weight there in
// the golden file, and are the ones left out.
func TestSinksCommandGolden(t *testing.T) {
	needGolden(t)
	ran := 0
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*", "golden.safetensors"))
	for _, f := range files {
		dir := filepath.Dir(f)
		name := filepath.Base(dir)
		cfg, err := model.LoadConfig(dir)
		// the cases this command is for: a sliding window, or softmax layers beside Gated DeltaNet layers
		if err != nil || (cfg.Sliding == 0 && cfg.DeltaNet == nil) {
			continue
		}
		gold, err := checkpoint.OpenFile(f)
		if err != nil {
			t.Fatal(err)
		}
		defer gold.Close()
		ran++
		idsFile, _, T := goldenIDs(t, gold, false)
		info, _ := gold.Info("input_ids") // [B, T]: the gate tensor's layout
		tmp := filepath.Dir(idsFile)
		out := filepath.Join(tmp, "out")
		code, stdout, stderr := probe(t, "sinks", "--model", dir, "--ids", idsFile, "--lengths", fmt.Sprint(T), "--eps", "0.05,0.1,0.3",
			"--out", out, "--tile", "5")
		if code != 0 {
			t.Fatalf("%s: probe sinks: exit %d: %s", name, code, stderr)
		}
		heads, err := results.ReadTable[results.SinkHeadRow](filepath.Join(out, "sinks_heads.parquet"))
		if err != nil {
			t.Fatal(err)
		}
		windows := analysis.LayerWindows(cfg)
		if want := len(cfg.SoftmaxLayers()) * cfg.Heads; len(heads) != want {
			t.Fatalf("%s: %d head rows, want %d", name, len(heads), want)
		}
		var worst float64
		var leftOut int64
		for _, r := range heads {
			a, err := gold.Float32(fmt.Sprintf("attn.%d", r.Layer))
			if err != nil {
				t.Fatal(err)
			}
			w := windows[r.Layer]
			// a model with learned sinks: the command reads the rows
			// renormalised (--sink-rows renorm, the default)
			_, sinks := gold.Info(fmt.Sprintf("sink_mass.%d", r.Layer))
			var first, ent, maxW float64
			var n, left int64
			for q := 0; q < T; q++ {
				row := a[(r.Head*T+q)*T:][:q+1] // batch 0
				sum := 1.0
				if sinks {
					sum = 0
					for _, x := range row {
						sum += float64(x)
					}
				}
				if w > 0 && q >= w {
					if row[0] != 0 {
						t.Fatalf("%s layer %d head %d query %d: golden weight on position 0 is %v outside the window of %d", name, r.Layer, r.Head, q, row[0], w)
					}
					left++
				} else {
					first += float64(row[0]) / sum
					n++
				}
				var m float64
				for _, x := range row {
					if x > 0 {
						p := float64(x) / sum
						ent -= p * math.Log(p)
					}
					m = max(m, float64(x)/sum)
				}
				maxW += m
			}
			if r.LeftOut != left || r.BOSN != n {
				t.Errorf("%s layer %d head %d: left out %d, bos_n %d; want %d, %d", name, r.Layer, r.Head, r.LeftOut, r.BOSN, left, n)
			}
			leftOut += left
			worst = max(worst, math.Abs(r.BOSMass-first/float64(n)), math.Abs(r.Entropy-ent/float64(T))/max(1, ent/float64(T)), math.Abs(r.MaxWeight-maxW/float64(T)))
			if g, err := gold.Float32(fmt.Sprintf("gate.%d", r.Layer)); err == nil {
				per := len(g) / (info.Shape[0] * T * cfg.Heads)
				var vals []float64
				var f, rest float64
				for q := 0; q < T; q++ {
					for _, x := range g[(q*cfg.Heads+r.Head)*per:][:per] {
						vals = append(vals, float64(x))
						if q == 0 {
							f += float64(x)
						} else {
							rest += float64(x)
						}
					}
				}
				slices.Sort(vals)
				k := len(vals)
				med := (vals[k/2-1] + vals[k/2]) / 2
				var sum, below float64
				for _, v := range vals {
					sum += v
					if v < 0.1 {
						below++
					}
				}
				worst = max(worst, math.Abs(r.GateMean-sum/float64(k)), math.Abs(r.GateMedian-med), math.Abs(r.GateFirst-f/float64(per)),
					math.Abs(r.GateRest-rest/float64((T-1)*per)))
				if math.Abs(r.GateBelow-below/float64(k)) > 2.0/float64(k) {
					t.Errorf("%s layer %d head %d: gate fraction below 0.1 = %v, golden %v", name, r.Layer, r.Head, r.GateBelow, below/float64(k))
				}
			} else if !math.IsNaN(r.GateMean) {
				t.Errorf("%s: layer %d has gate statistics but no golden gate", name, r.Layer)
			}
		}
		t.Logf("%s: worst |Δ| over first-token mean, entropy (rel. above 1), largest weight, gate statistics: %.2g; %d rows left out", name, worst, leftOut)
		if worst > 6e-5 {
			t.Errorf("%s: worst difference %.3g above 6e-5", name, worst)
		}
		if leftOut > 0 && !strings.Contains(stdout, fmt.Sprintf("%d of", leftOut)) {
			t.Errorf("%s: stdout does not report the %d left-out rows: %s", name, leftOut, stdout)
		}
		rates, err := results.ReadTable[results.SinkRateRow](filepath.Join(out, "sinks_rate.parquet"))
		if err != nil {
			t.Fatal(err)
		}
		prev := map[string]float64{}
		for _, r := range rates {
			if p, ok := prev[r.Layers]; ok && r.Rate > p {
				t.Errorf("%s %s layers: sink rate %v at ε = %v above %v at a smaller ε", name, r.Layers, r.Rate, r.Eps, p)
			}
			prev[r.Layers] = r.Rate
		}
	}
	if ran == 0 {
		t.Skip("golden data not available: none of the cases was found")
	}
}
