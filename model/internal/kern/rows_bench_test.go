//go:build amd64

package kern

import "testing"

// BenchmarkPackRows times packRows on one block of B (gemmNC rows ×
// gemmKC columns) of a float32 and of a bfloat16 weight.
func BenchmarkPackRows(b *testing.B) {
	const n, k = 1024, 512
	bp := make([]float32, (gemmNC+sNR)*gemmKC)
	for _, c := range []struct {
		name string
		r    Rows
	}{{"f32", Rows{F32: make([]float32, n*k), Cols: k}}, {"bf16", Rows{Bits: make([]uint16, n*k), Cols: k}}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				packRows(&c.r, 0, gemmKC, 0, gemmNC, bp)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(gemmKC*gemmNC), "ns/value")
		})
	}
}
