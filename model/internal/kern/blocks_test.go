//go:build amd64

package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/filterlens/probe/checkpoint"
)

// randomBlocks returns n blocks of ggml type typ of random bytes whose
// values are finite and below 1e4 in magnitude (blocks with a NaN,
// infinite or huge scale are drawn again), and their float32 reading.
func randomBlocks(t *testing.T, rng *rand.Rand, typ checkpoint.GGMLType, n int) (*Blocks, []float32) {
	t.Helper()
	block, size, fn, ok := checkpoint.RowDequantizer(typ)
	if !ok {
		t.Fatalf("no dequantizer for %v", typ)
	}
	data, vals := make([]byte, n*size), make([]float32, n*block)
	for i := 0; i < n; i++ {
		for {
			b := data[i*size : (i+1)*size]
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			v := vals[i*block : (i+1)*block]
			fn(v, b)
			good := true
			for _, x := range v {
				if math.IsNaN(float64(x)) || math.Abs(float64(x)) > 1e4 {
					good = false
				}
			}
			if good {
				break
			}
		}
	}
	return &Blocks{Data: data, Block: block, Size: size, Row: fn}, vals
}

var testGGMLTypes = []checkpoint.GGMLType{checkpoint.GGMLQ8_0, checkpoint.GGMLQ4_0, checkpoint.GGMLQ4_1, checkpoint.GGMLQ5_0,
	checkpoint.GGMLQ5_1, checkpoint.GGMLQ2_K, checkpoint.GGMLQ3_K, checkpoint.GGMLQ4_K, checkpoint.GGMLQ5_K, checkpoint.GGMLQ6_K}

// TestBlocksDequantAllocs: the runs the products' packing asks for
// (gemmKC columns from a multiple of gemmKC, whole blocks of every type)
// allocate nothing: the packing dequantizes every weight once per panel,
// so a 1 KiB allocation per run became the garbage collector's work.
func TestBlocksDequantAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	dst := make([]float32, gemmKC)
	for _, typ := range testGGMLTypes {
		q, _ := randomBlocks(t, rng, typ, 2*gemmKC/32) // ≥ 2·gemmKC elements: blocks hold ≥ 32
		if gemmKC%q.Block != 0 {
			t.Fatalf("%v: gemmKC %d is not a multiple of its block %d", typ, gemmKC, q.Block)
		}
		if n := testing.AllocsPerRun(10, func() { q.Dequant(dst, gemmKC) }); n != 0 {
			t.Errorf("%v: Dequant of %d elements from %d: %g allocations, want 0", typ, gemmKC, gemmKC, n)
		}
	}
}

// TestBlocksDequant: any run of elements (starting and ending inside a
// block or on its boundary) reads the values of the whole-block reading.
func TestBlocksDequant(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range testGGMLTypes {
		q, vals := randomBlocks(t, rng, typ, 4)
		for _, r := range [][2]int{{0, len(vals)}, {1, 2}, {q.Block - 1, q.Block + 1}, {q.Block, 3 * q.Block}, {5, len(vals) - 3}, {0, 0}} {
			dst := make([]float32, r[1]-r[0])
			q.Dequant(dst, r[0])
			for i, v := range dst {
				if math.Float32bits(v) != math.Float32bits(vals[r[0]+i]) {
					t.Fatalf("%v elements [%d, %d): element %d = %g, want %g", typ, r[0], r[1], r[0]+i, v, vals[r[0]+i])
				}
			}
		}
	}
}

// TestSgemmRowsBlocks: the product with rows in ggml's blocks equals the
// product with their float32 reading bit for bit, on the narrow path and
// the packed one, contiguous and in runs.
func TestSgemmRowsBlocks(t *testing.T) {
	if !Available() {
		t.Skip("this CPU has no AVX-512F+BMI2: package model uses gonum's kernels")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, typ := range testGGMLTypes {
		bs := typ.BlockSize()
		for _, sh := range []struct{ m, n, k, run, pitch int }{{3, 37, 2 * 256, 0, 0}, {NarrowM + 5, 70, 3 * 256, 0, 0}, {20, 64, 256, 16, 48}, {1, 1, 256, 0, 0}} {
			stored := sh.n
			if sh.run > 0 {
				stored = (sh.n/sh.run)*sh.pitch + sh.pitch
			}
			q, vals := randomBlocks(t, rng, typ, stored*sh.k/bs)
			a := make([]float32, sh.m*sh.k)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			got, want := make([]float32, sh.m*sh.n), make([]float32, sh.m*sh.n)
			SgemmRows(sh.m, sh.n, sh.k, a, sh.k, Rows{Q: q, Cols: sh.k, Run: sh.run, Pitch: sh.pitch}, got, sh.n)
			SgemmRows(sh.m, sh.n, sh.k, a, sh.k, Rows{F32: vals, Cols: sh.k, Run: sh.run, Pitch: sh.pitch}, want, sh.n)
			name := fmt.Sprintf("%v m%d n%d k%d run%d", typ, sh.m, sh.n, sh.k, sh.run)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s: C[%d] = %g, the float32 rows give %g", name, i, got[i], want[i])
				}
			}
		}
	}
}
