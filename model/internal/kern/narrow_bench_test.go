//go:build amd64

package kern

import (
	"fmt"
	"testing"
)

// BenchmarkSgemmRows times SgemmRows' narrow and packed paths on one
// 2048 × 6144 bf16 weight (the gated 1.72B model's MLP down projection) for
// few rows of A: what decides NarrowM. The packed path runs on one
// goroutine per half of A's rows where m ≥ 32, as model.linear splits it.
func BenchmarkSgemmRows(b *testing.B) {
	for _, sh := range [][2]int{{2048, 6144}, {6144, 2048}, {2048, 2048}} {
		n, k := sh[0], sh[1]
		w := Rows{Bits: make([]uint16, n*k), Cols: k}
		for i := range w.Bits {
			w.Bits[i] = uint16(0x3f80 + i%61)
		}
		benchRows(b, n, k, w)
	}
}

func benchRows(b *testing.B, n, k int, w Rows) {
	for _, m := range []int{16, 64, 128, 256, 512} {
		a := make([]float32, m*k)
		for i := range a {
			a[i] = float32(i%7) - 3
		}
		c := make([]float32, m*n)
		b.Run(fmt.Sprintf("narrow/%dx%d/m%d", n, k, m), func(b *testing.B) {
			for b.Loop() {
				sgemmRowsNarrow(m, n, k, a, k, &w, c, n)
			}
		})
		b.Run(fmt.Sprintf("packed/%dx%d/m%d", n, k, m), func(b *testing.B) {
			for b.Loop() {
				if m < 32 {
					sgemmRowsPacked(m, n, k, a, k, &w, c, n)
					continue
				}
				h := m / 2
				done := make(chan bool)
				go func() { sgemmRowsPacked(h, n, k, a, k, &w, c, n); done <- true }()
				sgemmRowsPacked(m-h, n, k, a[h*k:], k, &w, c[h*n:], n)
				<-done
			}
		})
	}
}
