//go:build amd64

#include "textflag.h"

// The three passes of a softmax row on 16 float32 lanes (softmax_amd64.go):
// the maximum, p = e^(x − m) with Σp (and Σ p·(x − m), Σp², summed in
// float32 over 8 blocks of 16, then in float64) in float64, and
// the scaling α = p·inv. The tail of n mod 16
// elements runs under the opmask K1. AVX-512F only (checked at init).

// TAILMASK sets K1 to the low CX&15 bits.
#define TAILMASK \
	MOVQ CX, R9 \
	ANDQ $15, R9 \
	MOVQ $1, AX \
	SHLXQ R9, AX, AX \
	DECQ AX \
	KMOVW AX, K1

// HSUMPD adds the 8 lanes of Z(a) into X(a) (Z(b) is scratch).
#define HSUMPD(za, ya, xa, yb, xb) \
	VEXTRACTF64X4 $1, za, yb \
	VADDPD yb, ya, ya \
	VEXTRACTF128 $1, ya, xb \
	VADDPD xb, xa, xa \
	VPERMILPD $1, xa, xb \
	VADDSD xb, xa, xa

// func maxAVX512(x *float32, n int) float32
TEXT ·maxAVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0xFF800000, AX // −Inf
	VPBROADCASTD AX, Z0
	VMOVAPS Z0, Z2
	MOVQ CX, BX
	SHRQ $4, BX
	JZ maxtail
maxloop:
	VMAXPS (SI), Z0, Z0
	ADDQ $64, SI
	DECQ BX
	JNZ maxloop
maxtail:
	TAILMASK
	VMOVUPS (SI), K1, Z2 // masked-off lanes keep −Inf
	VMAXPS Z2, Z0, Z0
	VEXTRACTF32X8 $1, Z0, Y1
	VMAXPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4E, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xB1, X0, X1
	VMAXPS X1, X0, X0
	MOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// EXP16 sets Z5 = e^Z1 for Z1 ≤ 0 (the method of expf, nn.go, with fused
// multiply-adds), 0 where Z1 < −87.3 or the lane is not in K2&K1; NaN stays
// NaN. Clobbers Z2–Z4, K2. Constants in Z16–Z28 (expSumAVX512). Steps:
// K2 = not (d < −87.3) (true for NaN) and K1; t = d·log2e + magic;
// 2^k from the low bits of t; n = t − magic; r = d − n·ln2Hi − n·ln2Lo;
// the degree-7 Taylor polynomial in r by Horner; times 2^k; zero outside K2.
#define EXP16 \
	VCMPPS $0x15, Z27, Z1, K2 \
	KANDW K1, K2, K2 \
	VMOVAPS Z17, Z2 \
	VFMADD231PS Z16, Z1, Z2 \
	VPSUBD Z28, Z2, Z3 \
	VPSLLD $23, Z3, Z3 \
	VSUBPS Z17, Z2, Z2 \
	VMOVAPS Z1, Z4 \
	VFNMADD231PS Z18, Z2, Z4 \
	VFNMADD231PS Z19, Z2, Z4 \
	VMOVAPS Z20, Z5 \
	VFMADD213PS Z21, Z4, Z5 \
	VFMADD213PS Z22, Z4, Z5 \
	VFMADD213PS Z23, Z4, Z5 \
	VFMADD213PS Z24, Z4, Z5 \
	VFMADD213PS Z25, Z4, Z5 \
	VFMADD213PS Z26, Z4, Z5 \
	VFMADD213PS Z26, Z4, Z5 \
	VMULPS Z3, Z5, Z5 \
	VMOVAPS.Z Z5, K2, Z5

// ACCPD adds the 16 float32 lanes of Z5 into the float64 accumulators
// Z8 (low 8) and Z9 (high 8); Z6, Z7 get them as float64.
#define ACCPD \
	VCVTPS2PD Y5, Z6 \
	VEXTRACTF32X8 $1, Z5, Y7 \
	VCVTPS2PD Y7, Z7 \
	VADDPD Z6, Z8, Z8 \
	VADDPD Z7, Z9, Z9

// ACCPS2 adds p·d and p² (p = Z5, d = Z1) into the float32 accumulators
// Z29, Z30; FLUSH2 moves them into the float64 ones (Z10, Z11 and Z14, Z15)
// every 8 blocks of 16, so a float32 sum never has more than 8 terms.
#define ACCPS2 \
	VFMADD231PS Z1, Z5, Z29 \
	VFMADD231PS Z5, Z5, Z30

#define FLUSH2 \
	VCVTPS2PD Y29, Z12 \
	VEXTRACTF32X8 $1, Z29, Y13 \
	VCVTPS2PD Y13, Z13 \
	VADDPD Z12, Z10, Z10 \
	VADDPD Z13, Z11, Z11 \
	VCVTPS2PD Y30, Z12 \
	VEXTRACTF32X8 $1, Z30, Y13 \
	VCVTPS2PD Y13, Z13 \
	VADDPD Z12, Z14, Z14 \
	VADDPD Z13, Z15, Z15 \
	VPXORQ Z29, Z29, Z29 \
	VPXORQ Z30, Z30, Z30

// FLUSH1 moves the float32 accumulator Z29 into the float64 ones Z10, Z11
// (scaleDotAVX512).
#define FLUSH1 \
	VCVTPS2PD Y29, Z12 \
	VEXTRACTF32X8 $1, Z29, Y13 \
	VCVTPS2PD Y13, Z13 \
	VADDPD Z12, Z10, Z10 \
	VADDPD Z13, Z11, Z11 \
	VPXORQ Z29, Z29, Z29

#define BCAST(v, z) \
	MOVL v, AX \
	VPBROADCASTD AX, z

// EXPCONSTS loads EXP16's constants: Z16 log2e, Z17 the magic 1.5·2²³,
// Z18, Z19 ln2 in two parts, Z20–Z25 the Taylor coefficients 1/5040 …
// 1/2, Z26 1, Z27 −87.3, Z28 the magic's bits − 127.
#define EXPCONSTS \
	BCAST($0x3FB8AA3B, Z16) \
	BCAST($0x4B400000, Z17) \
	BCAST($0x3F317200, Z18) \
	BCAST($0x35BFBE8E, Z19) \
	BCAST($0x39500D01, Z20) \
	BCAST($0x3AB60B61, Z21) \
	BCAST($0x3C088889, Z22) \
	BCAST($0x3D2AAAAB, Z23) \
	BCAST($0x3E2AAAAB, Z24) \
	BCAST($0x3F000000, Z25) \
	BCAST($0x3F800000, Z26) \
	BCAST($0xC2AE999A, Z27) \
	BCAST($0x4B3FFF81, Z28)

// func expSumAVX512(x *float32, n int, m float32, stats int) (z, pd, q float64)
TEXT ·expSumAVX512(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Z0
	MOVQ stats+24(FP), DX
	EXPCONSTS
	VPXORQ Z8, Z8, Z8
	VPXORQ Z9, Z9, Z9
	VPXORQ Z10, Z10, Z10
	VPXORQ Z11, Z11, Z11
	VPXORQ Z14, Z14, Z14
	VPXORQ Z15, Z15, Z15
	VPXORQ Z29, Z29, Z29
	VPXORQ Z30, Z30, Z30
	MOVQ $8, R8
	MOVW $0xFFFF, AX
	KMOVW AX, K1
	MOVQ CX, BX
	SHRQ $4, BX
	JZ exptail
exploop:
	VMOVUPS (SI), Z1
	VSUBPS Z0, Z1, Z1 // d = x − m
	EXP16
	VMOVUPS Z5, (SI)
	ACCPD
	TESTQ DX, DX
	JZ expnext
	ACCPS2
	DECQ R8
	JNZ expnext
	FLUSH2
	MOVQ $8, R8
expnext:
	ADDQ $64, SI
	DECQ BX
	JNZ exploop
exptail:
	TAILMASK
	VMOVUPS.Z (SI), K1, Z1
	VSUBPS Z0, Z1, Z1
	VMOVAPS.Z Z1, K1, Z1 // d = 0 beyond the tail
	EXP16
	VMOVUPS Z5, K1, (SI)
	ACCPD
	TESTQ DX, DX
	JZ expdone
	ACCPS2
	FLUSH2
expdone:
	VADDPD Z9, Z8, Z8
	HSUMPD(Z8, Y8, X8, Y9, X9)
	MOVSD X8, z+32(FP)
	VADDPD Z11, Z10, Z10
	HSUMPD(Z10, Y10, X10, Y11, X11)
	MOVSD X10, pd+40(FP)
	VADDPD Z15, Z14, Z14
	HSUMPD(Z14, Y14, X14, Y15, X15)
	MOVSD X14, q+48(FP)
	VZEROUPPER
	RET

// func scaleAVX512(x *float32, n int, f float32)
// multiplies x[i] by f for i < n.
TEXT ·scaleAVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS f+16(FP), Z0
	MOVQ CX, BX
	SHRQ $4, BX
	JZ scaletail
scaleloop:
	VMULPS (SI), Z0, Z5
	VMOVUPS Z5, (SI)
	ADDQ $64, SI
	DECQ BX
	JNZ scaleloop
scaletail:
	TAILMASK
	VMOVUPS.Z (SI), K1, Z5
	VMULPS Z0, Z5, Z5
	VMOVUPS Z5, K1, (SI)
	VZEROUPPER
	RET

// func shiftSquareAVX512(w, v *float32, stride int, c *float32, n, dh int)
// sets w[j·dh+i] = (v[j·stride+i] − c[i])² for j < n, i < dh (dh a
// positive multiple of 16).
TEXT ·shiftSquareAVX512(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ stride+16(FP), R8
	SHLQ $2, R8
	MOVQ c+24(FP), DX
	MOVQ n+32(FP), CX
	MOVQ dh+40(FP), R9
	SHRQ $4, R9
	TESTQ CX, CX
	JZ sqdone
sqrow:
	MOVQ SI, R10
	MOVQ DX, R11
	MOVQ R9, BX
sqblock:
	VMOVUPS (R10), Z0
	VSUBPS (R11), Z0, Z0
	VMULPS Z0, Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, R10
	ADDQ $64, R11
	ADDQ $64, DI
	DECQ BX
	JNZ sqblock
	ADDQ R8, SI
	DECQ CX
	JNZ sqrow
sqdone:
	VZEROUPPER
	RET

// SILU16 sets Z7 = silu(Z10)·Z11 (see siluMulAVX512; K3 = x < 0).
#define SILU16 \
	VORPS Z31, Z10, Z1 \
	EXP16 \
	VADDPS Z26, Z5, Z6 \
	VMOVAPS Z26, Z7 \
	VCMPPS $0x01, Z30, Z10, K3 \
	VMOVAPS Z5, K3, Z7 \
	VDIVPS Z6, Z7, Z7 \
	VMULPS Z10, Z7, Z7 \
	VMULPS Z11, Z7, Z7

// func siluMulAVX512(x, u *float32, n int)
// sets x[i] = silu(x[i])·u[i] = x[i]·σ(x[i])·u[i] for i < n, with σ from
// t = e^−|x| (EXP16, never overflows): σ = 1/(1 + t) for x ≥ 0, t/(1 + t)
// for x < 0.
TEXT ·siluMulAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ u+8(FP), DI
	MOVQ n+16(FP), CX
	EXPCONSTS
	BCAST($0x80000000, Z31)
	VPXORQ Z30, Z30, Z30
	MOVW $0xFFFF, AX
	KMOVW AX, K1
	MOVQ CX, BX
	SHRQ $4, BX
	JZ silutail
siluloop:
	VMOVUPS (SI), Z10
	VMOVUPS (DI), Z11
	SILU16
	VMOVUPS Z7, (SI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ BX
	JNZ siluloop
silutail:
	TAILMASK
	VMOVUPS.Z (SI), K1, Z10
	VMOVUPS.Z (DI), K1, Z11
	SILU16
	VMOVUPS Z7, K1, (SI)
	VZEROUPPER
	RET

// func scaleDotAVX512(x *float32, n int, f float32, w *float32) float64
// multiplies x[i] by f for i < n and returns Σ x[i]·w[i] of the scaled
// values: each product in float32, summed in float32 over 8 blocks of 16
// (Z29), then in float64 (Z10, Z11).
TEXT ·scaleDotAVX512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS f+16(FP), Z0
	MOVQ w+24(FP), DI
	VPXORQ Z10, Z10, Z10
	VPXORQ Z11, Z11, Z11
	VPXORQ Z29, Z29, Z29
	MOVQ $8, R8
	MOVQ CX, BX
	SHRQ $4, BX
	JZ sdtail
sdloop:
	VMULPS (SI), Z0, Z5
	VMOVUPS Z5, (SI)
	VFMADD231PS (DI), Z5, Z29
	DECQ R8
	JNZ sdnext
	FLUSH1
	MOVQ $8, R8
sdnext:
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ BX
	JNZ sdloop
sdtail:
	TAILMASK
	VMOVUPS.Z (SI), K1, Z5
	VMULPS Z0, Z5, Z5
	VMOVUPS Z5, K1, (SI)
	VMOVUPS.Z (DI), K1, Z6
	VFMADD231PS Z6, Z5, Z29
	FLUSH1
	VADDPD Z11, Z10, Z10
	HSUMPD(Z10, Y10, X10, Y11, X11)
	MOVSD X10, ret+32(FP)
	VZEROUPPER
	RET

// func shiftNormAVX512(w, v *float32, stride int, c *float32, n, dh int)
// sets w[j] = Σ_i (v[j·stride+i] − c[i])² for j < n, i < dh (dh a
// positive multiple of 16), summed in float32.
TEXT ·shiftNormAVX512(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ stride+16(FP), R8
	SHLQ $2, R8
	MOVQ c+24(FP), DX
	MOVQ n+32(FP), CX
	MOVQ dh+40(FP), R9
	SHRQ $4, R9
	TESTQ CX, CX
	JZ sndone
snrow:
	MOVQ SI, R10
	MOVQ DX, R11
	MOVQ R9, BX
	VPXORQ Z1, Z1, Z1
snblock:
	VMOVUPS (R10), Z0
	VSUBPS (R11), Z0, Z0
	VFMADD231PS Z0, Z0, Z1
	ADDQ $64, R10
	ADDQ $64, R11
	DECQ BX
	JNZ snblock
	VEXTRACTF32X8 $1, Z1, Y2
	VADDPS Y2, Y1, Y1
	VEXTRACTF128 $1, Y1, X2
	VADDPS X2, X1, X1
	VPERMILPS $0x4E, X1, X2
	VADDPS X2, X1, X1
	VPERMILPS $0xB1, X1, X2
	VADDSS X2, X1, X1
	MOVSS X1, (DI)
	ADDQ $4, DI
	ADDQ R8, SI
	DECQ CX
	JNZ snrow
sndone:
	VZEROUPPER
	RET

// func sumSquaresAVX512(x *float32, n int) float64
// returns Σ x[i]² for i < n: each x widened to float64, the squares (exact
// in float64) summed in two 8-lane float64 accumulators, then across lanes.
TEXT ·sumSquaresAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	MOVQ CX, BX
	SHRQ $4, BX
	JZ sstail
ssloop:
	VCVTPS2PD (SI), Z4
	VCVTPS2PD 32(SI), Z5
	VFMADD231PD Z4, Z4, Z0
	VFMADD231PD Z5, Z5, Z1
	ADDQ $64, SI
	DECQ BX
	JNZ ssloop
sstail:
	TAILMASK
	VMOVUPS.Z (SI), K1, Z6
	VCVTPS2PD Y6, Z4
	VEXTRACTF64X4 $1, Z6, Y7
	VCVTPS2PD Y7, Z5
	VFMADD231PD Z4, Z4, Z0
	VFMADD231PD Z5, Z5, Z1
	VADDPD Z1, Z0, Z0
	HSUMPD(Z0, Y0, X0, Y1, X1)
	MOVSD X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleMulAVX512(dst, x, w *float32, n int, s float32)
// sets dst[i] = w[i]·(x[i]·s) for i < n, each product rounded to float32
// (dst may be x).
TEXT ·scaleMulAVX512(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DX
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DI
	MOVQ n+24(FP), CX
	VBROADCASTSS s+32(FP), Z0
	MOVQ CX, BX
	SHRQ $4, BX
	JZ smtail
smloop:
	VMULPS (SI), Z0, Z1
	VMULPS (DI), Z1, Z1
	VMOVUPS Z1, (DX)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, DX
	DECQ BX
	JNZ smloop
smtail:
	TAILMASK
	VMOVUPS.Z (SI), K1, Z1
	VMOVUPS.Z (DI), K1, Z2
	VMULPS Z0, Z1, Z1
	VMULPS Z2, Z1, Z1
	VMOVUPS Z1, K1, (DX)
	VZEROUPPER
	RET

// func firstNonFiniteAVX512(x *float32, n int) int
// returns the index of the first NaN or ±Inf among x[0 … n−1] (all
// exponent bits set), or −1.
TEXT ·firstNonFiniteAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ SI, R8
	BCAST($0x7f800000, Z31)
	MOVQ CX, BX
	SHRQ $4, BX
	JZ nftail
nfloop:
	VPANDD (SI), Z31, Z1
	VPCMPEQD Z31, Z1, K2
	KORTESTW K2, K2
	JNZ nffound
	ADDQ $64, SI
	DECQ BX
	JNZ nfloop
nftail:
	TAILMASK
	VMOVUPS.Z (SI), K1, Z1
	VPANDD Z31, Z1, Z1
	VPCMPEQD Z31, Z1, K1, K2
	KORTESTW K2, K2
	JNZ nffound
	MOVQ $-1, ret+16(FP)
	VZEROUPPER
	RET
nffound:
	KMOVW K2, AX
	TZCNTL AX, AX
	SUBQ R8, SI
	SHRQ $2, SI
	ADDQ SI, AX
	MOVQ AX, ret+16(FP)
	VZEROUPPER
	RET

// ROTATE16 sets Z5 = Z1·Z3 − Z2·Z4 and Z7 = Z2·Z3 + Z1·Z4, each product
// rounded (a, b = Z1, Z2; cos, sin = Z3, Z4).
#define ROTATE16 \
	VMULPS Z3, Z1, Z5 \
	VMULPS Z4, Z2, Z6 \
	VSUBPS Z6, Z5, Z5 \
	VMULPS Z3, Z2, Z7 \
	VMULPS Z4, Z1, Z8 \
	VADDPS Z8, Z7, Z7

// func rotateAVX512(x1, x2, c, s *float32, n int)
// sets x1[i], x2[i] = x1[i]·c[i] − x2[i]·s[i], x2[i]·c[i] + x1[i]·s[i] for
// i < n, each product rounded to float32 before the sum (as Go computes it).
TEXT ·rotateAVX512(SB), NOSPLIT, $0-40
	MOVQ x1+0(FP), DX
	MOVQ x2+8(FP), SI
	MOVQ c+16(FP), DI
	MOVQ s+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ CX, BX
	SHRQ $4, BX
	JZ rotail
roloop:
	VMOVUPS (DX), Z1
	VMOVUPS (SI), Z2
	VMOVUPS (DI), Z3
	VMOVUPS (R8), Z4
	ROTATE16
	VMOVUPS Z5, (DX)
	VMOVUPS Z7, (SI)
	ADDQ $64, DX
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, R8
	DECQ BX
	JNZ roloop
rotail:
	TAILMASK
	VMOVUPS.Z (DX), K1, Z1
	VMOVUPS.Z (SI), K1, Z2
	VMOVUPS.Z (DI), K1, Z3
	VMOVUPS.Z (R8), K1, Z4
	ROTATE16
	VMOVUPS Z5, K1, (DX)
	VMOVUPS Z7, K1, (SI)
	VZEROUPPER
	RET
