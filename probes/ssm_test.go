package probes

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSSMStateNormsEqualRecurrence: the chunked state norms equal those of
// the step-by-step float64 recurrence S_t = a_t S_{t−1} + dt_t x_t B_tᵀ of
// each head, with decays of exactly 0 and 1 among them, T not a multiple
// of the chunk, strided rows (several heads and groups interleaved), and
// blocks of one to all three heads of a group run together.
func TestSSMStateNormsEqualRecurrence(t *testing.T) {
	const T, G, rep, P, N = 150, 2, 3, 5, 7
	const H = G * rep
	rng := rand.New(rand.NewPCG(3, 4))
	fill := func(n int, lo, hi float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(lo + (hi-lo)*rng.Float64())
		}
		return v
	}
	x, bb, dt, a := fill(T*H*P, -1, 1), fill(T*G*N, -1, 1), fill(T*H, 0.01, 1), fill(T*H, 0.5, 1)
	a[10*H+4], a[70*H+4], a[71*H+5] = 0, 1, 1
	want := make([]float64, H*T)
	for h := 0; h < H; h++ {
		S := make([]float64, P*N)
		for tt := 0; tt < T; tt++ {
			var norm float64
			for p := 0; p < P; p++ {
				for k := 0; k < N; k++ {
					v := float64(a[tt*H+h])*S[p*N+k] + float64(dt[tt*H+h])*float64(x[(tt*H+h)*P+p])*float64(bb[(tt*G+h/rep)*N+k])
					S[p*N+k] = v
					norm += v * v
				}
			}
			want[h*T+tt] = math.Sqrt(norm)
		}
	}
	for _, chunk := range []int{1, 16, 64, 200} {
		C := min(chunk, T)
		for _, blk := range []struct{ h0, nh int }{{4, 1}, {3, 2}, {3, 3}, {0, 3}} {
			got := make([]float64, blk.nh*T)
			g := blk.h0 / rep
			chunks := (T + C - 1) / C
			Bm, Bt, Gb := make([]float64, T*N), make([]float64, chunks*N*C), make([]float64, chunks*C*C)
			ssmGroupGrams(Bm, Bt, Gb, bb[g*N:], T, G*N, N, C)
			ssmStateNorms(got, x[blk.h0*P:], Bm, Bt, Gb, dt[blk.h0:], a[blk.h0:], T, H*P, H, blk.nh, P, N, newSSMNormScratch(C, blk.nh, P, N))
			for i, v := range got {
				h, tt := blk.h0+i/T, i%T
				if w := want[h*T+tt]; math.Abs(v-w) > 1e-9*(1+w) {
					t.Fatalf("chunk %d, heads %d+%d: head %d t %d: ‖S‖ %v, recurrence %v", chunk, blk.h0, blk.nh, h, tt, v, w)
				}
			}
		}
	}
}

// BenchmarkSSMLayerFilter: SetSSMLayer on one layer of Mamba-2-130M's shape
// (24 heads × 64, state 128, one group) at T = 2048, on one thread: the
// per-token columns and the float64 state norms of every head.
func BenchmarkSSMLayerFilter(b *testing.B) {
	const T, H, P, N, G = 2048, 24, 64, 128, 1
	rng := rand.New(rand.NewPCG(5, 6))
	fill := func(n int, lo, hi float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(lo + (hi-lo)*rng.Float64())
		}
		return v
	}
	x, bb, dt, a := fill(T*H*P, -1, 1), fill(T*G*N, -1, 1), fill(T*H, 0.01, 0.1), fill(T*H, 0.9, 1)
	f, err := NewGDNFilter(1, T, 1, []int{0}, H, N, P, GDNOptions{NoRows: true, Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := f.SetSSMLayer(0, x, bb, dt, a); err != nil {
			b.Fatal(err)
		}
	}
}
