package model

import (
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model/internal/kern"
)

// TestQuantizeMXFP4Codes: quantizeMXFP4 on blocks whose values are chosen
// on the E2M1 grid, at the midpoints between its magnitudes (ties to the
// even code), above 6·2^e, negative, and all zero.
func TestQuantizeMXFP4Codes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vals  []float32 // the first values of the block (the rest 0)
		scale uint8
		codes []uint8 // their codes
	}{
		// max 6 → e = ⌊log₂ 6⌋ − 2 = 0: the values are the magnitudes
		{"grid", []float32{6, 0, 0.5, 1, 1.5, 2, 3, 4}, 127, []uint8{7, 0, 1, 2, 3, 4, 5, 6}},
		{"negative", []float32{-6, -0.5, -3, 0.1}, 127, []uint8{15, 9, 13, 0}},
		// ties: 0.25 → 0 (code 0), 0.75 → 1 (code 2), 1.25 → 1 (2), 1.75 → 2 (4), 2.5 → 2 (4), 3.5 → 4 (6), 5 → 4 (6)
		{"ties to even", []float32{4, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}, 127, []uint8{6, 0, 2, 2, 4, 4, 6, 6}},
		// max 7.9 → e = 0; 7.9 and 6.5 round to 6
		{"above 6", []float32{7.9, 6.5, 5.1}, 127, []uint8{7, 7, 7}},
		// max 0.1 → e = ⌊log₂ 0.1⌋ − 2 = −6: values in units of 1/64
		{"scaled", []float32{0.1, 0.1 / 6.4 * 3, -1.0 / 64}, 121, []uint8{7, 5, 10}},
		{"zeros", nil, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := make([]float32, kern.MXFP4Block)
			copy(x, tc.vals)
			dst := make([]uint8, kern.MXFP4Block/2)
			scale := quantizeMXFP4(dst, x)
			if scale != tc.scale {
				t.Errorf("scale byte %d, want %d", scale, tc.scale)
			}
			for i := range x {
				want := uint8(0)
				if i < len(tc.codes) {
					want = tc.codes[i]
				}
				if got := dst[i/2] >> (4 * (i % 2)) & 15; got != want {
					t.Errorf("value %d (%v): code %d, want %d", i, x[i], got, want)
				}
			}
		})
	}
}

// TestQuantizeMXFP4Golden: the golden gpt_oss case's float32 experts are
// the dequantized MXFP4 values of gpt_oss_mxfp4 (its README); quantized
// again by quantizeMXFP4 (which Generate uses) they give the stored scales
// byte for byte and the same values, so the generator writes what the
// golden case's quantizer (and the release) writes.
func TestQuantizeMXFP4Golden(t *testing.T) {
	plain, err := checkpoint.Open(filepath.Join(goldenDir, "gpt_oss"))
	if err != nil {
		t.Skipf("golden case gpt_oss not present: %v", err)
	}
	defer plain.Close()
	fp4, err := checkpoint.Open(filepath.Join(goldenDir, "gpt_oss_mxfp4"))
	if err != nil {
		t.Skipf("golden case gpt_oss_mxfp4 not present: %v", err)
	}
	defer fp4.Close()
	for l := 0; l < 4; l++ {
		for _, mat := range []string{"gate_up_proj", "down_proj"} {
			name := fmt.Sprintf("model.layers.%d.mlp.experts.%s", l, mat)
			info, _ := plain.Info(name)
			x, err := plain.Float32(name) // [E, in, out]
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := fp4.Uint8View(name + "_blocks")
			if err != nil {
				t.Fatal(err)
			}
			scales, err := fp4.Uint8View(name + "_scales")
			if err != nil {
				t.Fatal(err)
			}
			E, in, out := info.Shape[0], info.Shape[1], info.Shape[2]
			row := make([]float32, in)
			got, want := make([]float32, in), make([]float32, in)
			gotB := make([]uint8, in/2)
			for e := range E {
				for o := range out {
					r := e*out + o // row of the [E·out, in] MXFP4 matrix
					for i := range row {
						row[i] = x[(e*in+i)*out+o]
					}
					for b := 0; b < in/kern.MXFP4Block; b++ {
						s := quantizeMXFP4(gotB[b*kern.MXFP4Block/2:(b+1)*kern.MXFP4Block/2], row[b*kern.MXFP4Block:(b+1)*kern.MXFP4Block])
						if ws := scales[r*in/kern.MXFP4Block+b]; s != ws {
							t.Fatalf("%s expert %d row %d block %d: scale byte %d, stored %d", name, e, o, b, s, ws)
						}
					}
					kern.DequantMXFP4(got, gotB, scales[r*in/kern.MXFP4Block:], 0)
					kern.DequantMXFP4(want, blocks[r*in/2:], scales[r*in/kern.MXFP4Block:], 0)
					for i := range got {
						if got[i] != want[i] || got[i] != row[i] {
							t.Fatalf("%s expert %d row %d col %d: requantized %v, stored %v, float32 file %v", name, e, o, i, got[i], want[i], row[i])
						}
					}
				}
			}
		}
	}
}

// TestGenerateMXFP4: Generate makes gpt-oss's experts in MXFP4 when the
// config says so (MoEConfig.MXFP4): the blocks and scales of the released
// layout, counted as parameters two a byte; the dequantized weights keep
// the draws' spread, N(0, 1/fan_in) within the quantization's error; the
// same seed gives the same codes whatever GOMAXPROCS is.
func TestGenerateMXFP4(t *testing.T) {
	cfg, err := SmallConfig(ArchGptOss, Size{Layers: 1, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 50, MaxPos: 128})
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := Generate(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	moe := *cfg.MoE
	moe.MXFP4 = true
	cfg.MoE = &moe
	m, tensors, err := Generate(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m.DTypes) != "[F32 MXFP4]" || m.Parameters != plain.Parameters {
		t.Errorf("dtypes %v, %d parameters; want [F32 MXFP4] and the float model's %d", m.DTypes, m.Parameters, plain.Parameters)
	}
	E, F, D := moe.Experts, moe.DExpert, cfg.DModel
	shapes := map[string][]int{}
	for _, ts := range tensors {
		shapes[ts.Name] = ts.Shape
	}
	x := "model.layers.0.mlp.experts."
	for name, want := range map[string][]int{
		x + "gate_up_proj_blocks": {E, 2 * F, D / 32, 16}, x + "gate_up_proj_scales": {E, 2 * F, D / 32},
		x + "down_proj_blocks": {E, D, F / 32, 16}, x + "down_proj_scales": {E, D, F / 32},
	} {
		if !slices.Equal(shapes[name], want) {
			t.Errorf("%s: shape %v, want %v", name, shapes[name], want)
		}
	}
	if _, ok := shapes[x+"gate_up_proj"]; ok {
		t.Errorf("float gate_up_proj written beside the MXFP4 blocks")
	}
	prev := runtime.GOMAXPROCS(1)
	_, serial, err := Generate(cfg, 3)
	runtime.GOMAXPROCS(prev)
	if err != nil {
		t.Fatal(err)
	}
	for i, ts := range tensors {
		if b, ok := ts.Data.([]uint8); ok && !slices.Equal(b, serial[i].Data.([]uint8)) {
			t.Errorf("%s: other bytes with GOMAXPROCS 1 than with %d", ts.Name, prev)
		}
	}
	ex := m.Layers[0].ffn.(*moeLayer).experts
	vals := make([]float32, D)
	var sum2 float64
	var n int
	for i := range ex {
		for r := 0; r < ex[i].down.Rows; r++ {
			ex[i].down.widenRow(vals, r)
			for _, v := range vals[:F] {
				sum2 += float64(v) * float64(v)
				n++
			}
		}
	}
	// rounding to 8 magnitudes per block shrinks small values to 0 and
	// keeps the large ones: the spread within 15 % of the draws'
	if sd, want := math.Sqrt(sum2/float64(n)), 1/math.Sqrt(float64(F)); math.Abs(sd/want-1) > 0.15 {
		t.Errorf("down_proj values have rms %.4g, want near the draws' 1/√%d = %.4g", sd, F, want)
	}
}
