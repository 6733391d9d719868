//go:build openblas

package model

/*
#cgo LDFLAGS: -lm
#include <immintrin.h>
#include <math.h>
#include <string.h>

// probe_have_avx2 reports whether the CPU runs the AVX2+FMA kernels below.
static int probe_have_avx2(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// exp8 is e^x on 8 lanes, the method of the Go expf (nn.go): round x·log2(e)
// to n, r = x − n·ln2 with ln2 in two parts, Taylor polynomial of degree 7,
// times 2^n (as 2^⌊n/2⌋·2^(n−⌊n/2⌋), both factors normal). Lanes below −87.3
// (and −Inf) give 0, lanes above 88.72 (and +Inf) give +Inf, NaN stays NaN.
__attribute__((target("avx2,fma")))
static inline __m256 exp8(__m256 x) {
	const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.72f);
	__m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
	__m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
	x = _mm256_max_ps(lo, x); // NaN in x is kept (second operand)
	x = _mm256_min_ps(hi, x);
	const __m256 magic = _mm256_set1_ps(12582912.0f);
	__m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.4426950408889634f), magic);
	__m256i k = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4b400000));
	__m256 n = _mm256_sub_ps(t, magic);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.4286068203094173e-06f), r);
	__m256 p = _mm256_set1_ps(1.0f / 5040);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	__m256i k1 = _mm256_srai_epi32(k, 1), k2 = _mm256_sub_epi32(k, k1);
	const __m256i bias = _mm256_set1_epi32(127);
	__m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
	__m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
	__m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
	res = _mm256_blendv_ps(res, _mm256_set1_ps(__builtin_inff()), over);
	return _mm256_andnot_ps(under, res);
}

// probe_silu_mul computes g[i] = silu(g[i])·u[i] = g[i]/(1 + e^−g[i])·u[i].
__attribute__((target("avx2,fma")))
static void probe_silu_mul(float *g, const float *u, long n) {
	const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
	long i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps(g + i);
		__m256 s = _mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, x))));
		_mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
	}
	if (i < n) {
		float xs[8] = {0}, us[8] = {0};
		for (long k = 0; k < n - i; k++) { xs[k] = g[i + k]; us[k] = u[i + k]; }
		__m256 x = _mm256_loadu_ps(xs);
		__m256 s = _mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, x))));
		_mm256_storeu_ps(xs, _mm256_mul_ps(s, _mm256_loadu_ps(us)));
		for (long k = 0; k < n - i; k++) g[i + k] = xs[k];
	}
}

// probe_shift_square sets w[j·dh+i] = (v[j·stride+i] − c[i])² for j < n,
// i < dh.
__attribute__((target("avx2,fma")))
static void probe_shift_square(float *w, const float *v, long stride, const float *c, long n, long dh) {
	for (long j = 0; j < n; j++) {
		const float *vj = v + j * stride;
		float *wj = w + j * dh;
		long i = 0;
		for (; i + 8 <= dh; i += 8) {
			__m256 d = _mm256_sub_ps(_mm256_loadu_ps(vj + i), _mm256_loadu_ps(c + i));
			_mm256_storeu_ps(wj + i, _mm256_mul_ps(d, d));
		}
		for (; i < dh; i++) {
			float d = vj[i] - c[i];
			wj[i] = d * d;
		}
	}
}

// hsum4 adds the four lanes of v.
__attribute__((target("avx2,fma")))
static inline double hsum4(__m256d v) {
	double d[4];
	_mm256_storeu_pd(d, v);
	return (d[0] + d[1]) + (d[2] + d[3]);
}

// probe_softmax_tile is softmaxTileGo (attention.go) with 8-lane kernels:
// rows × ncol scores s of the queries q0 … q0+rows−1; row r is softmaxed
// over keys lo … t (t = q0+r, lo = max(0, t−window+1) with a window) and
// zeroed elsewhere. With softcap > 0 the scores lo … t are first capped to
// softcap·tanh(x/softcap) with capLogits' roundings (x/softcap in float,
// tanh in double, rounded to float, times softcap in float). With a sink
// logit (sink > −Inf; never capped) the softmax runs over the keys and the
// sink column, m = max(row max, sink), z = Σp + e^(sink − m), and the
// column is dropped: the row sums to 1 − σ, σ = e^(sink − m)·(1/z) in
// float, written to sm[r] when sm is not NULL. With s1 non-NULL it also
// writes Σα, Σα² and the entropy of each row's returned weights (without
// the sink column) into s1, s2, ent.
__attribute__((target("avx2,fma")))
static void probe_softmax_tile(float *s, int rows, int ncol, int q0, int window, float softcap,
		float sink, float *sm, double *s1, double *s2, double *ent) {
	int has_sink = sink > -__builtin_inff();
	for (int r = 0; r < rows; r++) {
		int t = q0 + r, lo = 0;
		if (window > 0 && t - window + 1 > 0) lo = t - window + 1;
		float *row = s + (size_t)r * ncol;
		int n = t + 1 - lo; // weights lo … t
		float *x = row + lo;
		if (softcap > 0) {
			for (int j = 0; j < n; j++) x[j] = (float)tanh((double)(x[j] / softcap)) * softcap;
		}
		// max
		__m256 vm = _mm256_set1_ps(-__builtin_inff());
		int j = 0;
		for (; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + j));
		float mv[8];
		_mm256_storeu_ps(mv, vm);
		float m = mv[0];
		for (int i = 1; i < 8; i++) m = mv[i] > m ? mv[i] : m;
		for (; j < n; j++) m = x[j] > m ? x[j] : m;
		if (has_sink && sink > m) m = sink;
		// p = e^(x − m), z = Σp, pd = Σ p·(x − m) (float64)
		__m256 vmax = _mm256_set1_ps(m);
		__m256d z0 = _mm256_setzero_pd(), z1 = _mm256_setzero_pd();
		__m256d d0 = _mm256_setzero_pd(), d1 = _mm256_setzero_pd();
		j = 0;
		for (; j + 8 <= n; j += 8) {
			__m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + j), vmax);
			__m256 p = exp8(d);
			_mm256_storeu_ps(x + j, p);
			__m256d plo = _mm256_cvtps_pd(_mm256_castps256_ps128(p));
			__m256d phi = _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1));
			z0 = _mm256_add_pd(z0, plo);
			z1 = _mm256_add_pd(z1, phi);
			if (s1) {
				d0 = _mm256_fmadd_pd(plo, _mm256_cvtps_pd(_mm256_castps256_ps128(d)), d0);
				d1 = _mm256_fmadd_pd(phi, _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1)), d1);
			}
		}
		double z = hsum4(_mm256_add_pd(z0, z1)), pd = hsum4(_mm256_add_pd(d0, d1));
		if (j < n) {
			float tail[8] = {0}, out[8];
			int k = n - j;
			for (int i = 0; i < 8; i++) tail[i] = i < k ? x[j + i] - m : -__builtin_inff();
			_mm256_storeu_ps(out, exp8(_mm256_loadu_ps(tail)));
			for (int i = 0; i < k; i++) {
				x[j + i] = out[i];
				z += out[i];
				pd += (double)out[i] * (double)tail[i];
			}
		}
		// the sink column: e^(sink − m) by the same exp8, added to z only
		float ps = 0;
		if (has_sink) {
			float one[8];
			_mm256_storeu_ps(one, exp8(_mm256_set1_ps(sink - m)));
			ps = one[0];
			z += ps;
		}
		// α = p / z; Σα, Σα² (float64)
		double inv = 1 / z;
		__m256 vinv = _mm256_set1_ps((float)inv);
		if (sm) sm[r] = has_sink ? ps * (float)inv : 0;
		memset(row, 0, sizeof(float) * lo);
		memset(row + t + 1, 0, sizeof(float) * (ncol - t - 1));
		if (!s1) {
			j = 0;
			for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), vinv));
			for (; j < n; j++) x[j] *= (float)inv;
			continue;
		}
		__m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
		__m256d q0v = _mm256_setzero_pd(), q1v = _mm256_setzero_pd();
		j = 0;
		for (; j + 8 <= n; j += 8) {
			__m256 a = _mm256_mul_ps(_mm256_loadu_ps(x + j), vinv);
			_mm256_storeu_ps(x + j, a);
			__m256d alo = _mm256_cvtps_pd(_mm256_castps256_ps128(a));
			__m256d ahi = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
			a0 = _mm256_add_pd(a0, alo);
			a1 = _mm256_add_pd(a1, ahi);
			q0v = _mm256_fmadd_pd(alo, alo, q0v);
			q1v = _mm256_fmadd_pd(ahi, ahi, q1v);
		}
		double sa = hsum4(_mm256_add_pd(a0, a1)), sq = hsum4(_mm256_add_pd(q0v, q1v));
		for (; j < n; j++) {
			float a = x[j] * (float)inv;
			x[j] = a;
			sa += a;
			sq += (double)a * a;
		}
		s1[r] = sa;
		s2[r] = sq;
		ent[r] = __builtin_log(z) * sa - pd * inv;
	}
}
*/
import "C"

import (
	"unsafe"

	"github.com/filterlens/probe/model/internal/kern"
)

func init() {
	if C.probe_have_avx2() != 0 && !kern.Available() { // else the 16-lane kernels, kern_amd64.go
		softmaxTile = softmaxTileAVX2
		shiftSquare = shiftSquareAVX2
		siluMulKernel = siluMulAVX2
	}
}

// siluMulAVX2 computes g[i] = silu(g[i])·u[i] with the C kernel
// probe_silu_mul (see siluMulKernel).
func siluMulAVX2(g, u []float32) {
	if len(g) == 0 {
		return
	}
	_ = u[len(g)-1]
	C.probe_silu_mul((*C.float)(unsafe.Pointer(&g[0])), (*C.float)(unsafe.Pointer(&u[0])), C.long(len(g)))
}

// shiftSquareAVX2 is shiftSquare with the C kernel probe_shift_square.
func shiftSquareAVX2(w, v []float32, stride int, c []float32, n int) {
	dh := len(c)
	if n == 0 || dh == 0 {
		return
	}
	_, _ = w[n*dh-1], v[(n-1)*stride+dh-1]
	C.probe_shift_square((*C.float)(unsafe.Pointer(&w[0])), (*C.float)(unsafe.Pointer(&v[0])), C.long(stride),
		(*C.float)(unsafe.Pointer(&c[0])), C.long(n), C.long(dh))
}

// softmaxTileAVX2 is softmaxTile with the 8-lane C kernel
// probe_softmax_tile (cgo; OpenBLAS build on AVX2+FMA CPUs). It differs
// from softmaxTileGo only in rounding (fused multiply-adds, summation
// order; the soft-cap's tanh is the C library's, not math.Tanh) and in
// giving 0 instead of a subnormal for e^(x−m) below e^−87.3. The dot
// products g (w non-nil) follow in a float64 pass over the weights.
func softmaxTileAVX2(s []float32, rows, ncol, q0, window int, softcap, sink float32, sm []float32, s1, s2, ent []float64, w []float32, g []float64) {
	if rows == 0 {
		return
	}
	_ = s[rows*ncol-1]
	var psm *C.float
	if sm != nil {
		_ = sm[rows-1]
		psm = (*C.float)(unsafe.Pointer(&sm[0]))
	}
	var p1, p2, pe *C.double
	if s1 != nil {
		_, _, _ = s1[rows-1], s2[rows-1], ent[rows-1]
		p1 = (*C.double)(unsafe.Pointer(&s1[0]))
		p2 = (*C.double)(unsafe.Pointer(&s2[0]))
		pe = (*C.double)(unsafe.Pointer(&ent[0]))
	}
	C.probe_softmax_tile((*C.float)(unsafe.Pointer(&s[0])), C.int(rows), C.int(ncol), C.int(q0), C.int(window),
		C.float(softcap), C.float(sink), psm, p1, p2, pe)
	if w == nil {
		return
	}
	for r := 0; r < rows; r++ {
		var sum float64
		for j, x := range s[r*ncol : r*ncol+q0+r+1] {
			sum += float64(x) * float64(w[j])
		}
		g[r] = sum
	}
}
