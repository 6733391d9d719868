package kern

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestPackXAMX: packXAMX (its AVX-512 rounding included) lays X out as its
// comment says, each value rounded as RoundBF16 rounds it — on random bit
// patterns, ties and special values (infinities, NaNs, the largest
// finite and values that round to infinity, denormals), over odd k,
// rows past ma and pair blocks with padding.
func TestPackXAMX(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, sh := range [][3]int{{1, 1, 0}, {5, 33, 0}, {40, 300, 3}, {33, 257, 1}, {64, 64, 0}} {
		ma, k, pad := sh[0], sh[1], sh[2]
		ldx := k + pad
		x := make([]float32, ma*ldx)
		for i := range x {
			x[i] = math.Float32frombits(rng.Uint32())
			switch rng.IntN(8) {
			case 0, 1:
				x[i] = math.Float32frombits(rng.Uint32()&0xffff0000 | 0x8000) // a tie
			case 2:
				x[i] = math.Float32frombits([]uint32{0x7f800000, 0xff800000, 0x7f7fffff, 0x7f7f8000, 0xff7f7fff,
					0x7f800001, 0xffc00000, 0x00000001, 0x807fffff, 0, 0x80000000}[rng.IntN(11)])
			}
		}
		kpAll := (k + 1) / 2
		ma32 := (ma + amxT - 1) &^ (amxT - 1)
		ap := make([]uint32, ma32*((kpAll+15)&^15))
		for i := range ap {
			ap[i] = 0xdeadbeef
		}
		packXAMX(x, ldx, k, ma, ap)
		for pc := 0; pc < kpAll; pc += bfKP {
			kp := min(bfKP, kpAll-pc)
			kp16 := (kp + 15) &^ 15
			for r := 0; r < ma32; r++ {
				for p := 0; p < kp16; p++ {
					var want uint32
					if q := 2 * (pc + p); r < ma && q < k {
						want = uint32(RoundBF16(x[r*ldx+q]))
						if q+1 < k {
							want |= uint32(RoundBF16(x[r*ldx+q+1])) << 16
						}
					}
					at := pc*ma32 + r/16*16*kp16 + p/16*256 + r%16*16 + p%16
					if ap[at] != want {
						t.Fatalf("ma=%d k=%d: row %d pair %d: %#08x, want %#08x", ma, k, r, pc+p, ap[at], want)
					}
				}
			}
		}
	}
}
