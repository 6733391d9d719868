package kern

import (
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
)

// refuseAMX, set in the environment of TestAMXRefused's child process,
// makes this test binary play a kernel that refuses the tile data
// permission (before the first HasAMX, which asks once per process).
const refuseAMX = "PROBE_TEST_REFUSE_AMX"

func init() {
	if os.Getenv(refuseAMX) != "" {
		requestTileData = func() bool { return false }
	}
}

// TestAMXRefused: where Linux refuses AMX's tile data (kernels before
// 5.16, hypervisors that hide it), HasAMX is false and GemmBF16 runs the
// VDPBF16PS or Go kernel: bit for bit gemmBF16 on bfKernel, with nothing
// else breaking. The refusal is played in a child process of this test
// binary, since the permission is asked once per process.
func TestAMXRefused(t *testing.T) {
	if os.Getenv(refuseAMX) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAMXRefused$", "-test.count=1")
		cmd.Env = append(os.Environ(), refuseAMX+"=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child with the permission refused: %v\n%s", err, out)
		}
		return
	}
	if HasAMX() {
		t.Fatal("HasAMX is true though the tile data permission was refused")
	}
	rng := rand.New(rand.NewPCG(21, 22))
	for _, sh := range [][3]int{{1, 1, 1}, {7, 33, 65}, {40, 70, 300}} {
		m, n, k := sh[0], sh[1], sh[2]
		x, w := normal32(rng, m*k, 1), normal32(rng, n*k, 0.05)
		got, want := make([]float32, m*n), make([]float32, m*n)
		GemmBF16(m, n, k, x, k, denseF32{w, k, k}, got, n)
		gemmBF16(m, n, k, x, k, denseF32{w, k, k}, want, n, bfKernel)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("m=%d n=%d k=%d: element %d = %v, the non-AMX kernel gives %v", m, n, k, i, got[i], want[i])
			}
		}
	}
}

// roundingCases returns n float32 values for the rounding kernels: random
// bit patterns, ties of bfloat16 rounding, the special values (infinities,
// NaNs, the largest finite and values that round to infinity, denormals,
// signed zeros) and values in [0, 1).
func roundingCases(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = math.Float32frombits(rng.Uint32())
		switch rng.IntN(8) {
		case 0, 1:
			x[i] = math.Float32frombits(rng.Uint32()&0xffff0000 | 0x8000) // a tie
		case 2:
			x[i] = math.Float32frombits([]uint32{0x7f800000, 0xff800000, 0x7f7fffff, 0x7f7f8000, 0xff7f7fff,
				0x7f800001, 0xffc00000, 0x00000001, 0x807fffff, 0, 0x80000000}[rng.IntN(11)])
		case 3:
			x[i] = float32(rng.Float64())
		}
	}
	return x
}

// TestPackXAMX: packXAMX (its AVX-512 rounding included) lays X out as its
// comment says, each value rounded as RoundBF16 rounds it, and
// packXAMXSplit3 lays out the hi, mid and lo parts of split3BF16 in three
// planes the same way — on random bit patterns, ties and special values
// (infinities, NaNs, the largest finite and values that round to
// infinity, denormals), over odd k, rows past ma and pair blocks with
// padding.
func TestPackXAMX(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, tc := range []struct {
		name   string
		pack   func(x []float32, ldx, k, ma int, ap []uint32)
		planes int
		part   func(v float32, plane int) uint16
	}{
		{"round", packXAMX, 1, func(v float32, _ int) uint16 { return RoundBF16(v) }},
		{"split3", packXAMXSplit3, 3, func(v float32, plane int) uint16 {
			hi, mid, lo := split3BF16(v)
			return [3]uint16{hi, mid, lo}[plane]
		}},
	} {
		for _, sh := range [][3]int{{1, 1, 0}, {5, 33, 0}, {40, 300, 3}, {33, 257, 1}, {64, 64, 0}} {
			ma, k, pad := sh[0], sh[1], sh[2]
			ldx := k + pad
			x := roundingCases(rng, ma*ldx)
			kpAll := (k + 1) / 2
			ma32 := (ma + amxT - 1) &^ (amxT - 1)
			plane := ma32 * ((kpAll + 15) &^ 15)
			ap := make([]uint32, tc.planes*plane)
			for i := range ap {
				ap[i] = 0xdeadbeef
			}
			tc.pack(x, ldx, k, ma, ap)
			for pc := 0; pc < kpAll; pc += bfKP {
				kp := min(bfKP, kpAll-pc)
				kp16 := (kp + 15) &^ 15
				for r := 0; r < ma32; r++ {
					for p := 0; p < kp16; p++ {
						at := pc*ma32 + r/16*16*kp16 + p/16*256 + r%16*16 + p%16
						for pl := 0; pl < tc.planes; pl++ {
							var want uint32
							if q := 2 * (pc + p); r < ma && q < k {
								want = uint32(tc.part(x[r*ldx+q], pl))
								if q+1 < k {
									want |= uint32(tc.part(x[r*ldx+q+1], pl)) << 16
								}
							}
							if got := ap[pl*plane+at]; got != want {
								t.Fatalf("%s ma=%d k=%d: row %d pair %d, plane %d: %#08x, want %#08x", tc.name, ma, k, r, pc+p, pl, got, want)
							}
						}
					}
				}
			}
		}
	}
}
