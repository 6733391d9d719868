package probes

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSSMStateNormsEqualRecurrence: the chunked state norms equal those of
// the step-by-step float64 recurrence S_t = a_t S_{t−1} + dt_t x_t B_tᵀ,
// with decays of exactly 0 and 1 among them, T not a multiple of the
// chunk, and strided rows (several heads interleaved).
func TestSSMStateNormsEqualRecurrence(t *testing.T) {
	const T, H, P, N, h = 150, 3, 5, 7, 1
	rng := rand.New(rand.NewPCG(3, 4))
	fill := func(n int, lo, hi float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(lo + (hi-lo)*rng.Float64())
		}
		return v
	}
	x, bb, dt, a := fill(T*H*P, -1, 1), fill(T*H*N, -1, 1), fill(T*H, 0.01, 1), fill(T*H, 0.5, 1)
	a[10*H+h], a[70*H+h], a[71*H+h] = 0, 1, 1
	want := make([]float64, T)
	S := make([]float64, P*N)
	for tt := 0; tt < T; tt++ {
		var norm float64
		for p := 0; p < P; p++ {
			for k := 0; k < N; k++ {
				v := float64(a[tt*H+h])*S[p*N+k] + float64(dt[tt*H+h])*float64(x[(tt*H+h)*P+p])*float64(bb[(tt*H+h)*N+k])
				S[p*N+k] = v
				norm += v * v
			}
		}
		want[tt] = math.Sqrt(norm)
	}
	for _, chunk := range []int{1, 16, 64, 200} {
		got := make([]float64, T)
		C := min(chunk, T)
		Bm, Gb := make([]float64, T*N), make([]float64, (T+C-1)/C*C*C)
		ssmGroupGrams(Bm, Gb, bb[h*N:], T, H*N, N, C)
		ssmStateNorms(got, x[h*P:], Bm, Gb, dt[h:], a[h:], T, H*P, H, P, N, newSSMNormScratch(C, P, N))
		for tt := range got {
			if math.Abs(got[tt]-want[tt]) > 1e-9*(1+want[tt]) {
				t.Fatalf("chunk %d, t %d: ‖S‖ %v, recurrence %v", chunk, tt, got[tt], want[tt])
			}
		}
	}
}
