#include "textflag.h"

// The AMX instructions are unknown to the Go assembler; each form used
// here is written out as bytes, as GNU as (2.40) assembles the AT&T line
// beside it. All are VEX-encoded (C4 R̄X̄B̄.mmmmm W.vvvv.L.pp opcode ModRM
// [SIB disp8]) in map 0F38 (mmmmm = 00010); the memory forms address
// base + index·1 with the index register holding the row stride in bytes
// (TILELOADD/TILESTORED require a SIB byte). Registers: SI, DI the two A
// tiles, R8 their row stride (64); BX the B step, R9 its row stride (128);
// DX, R11 the upper and lower halves of the C block, R10 its row stride.
//   ldtilecfg (%rax)                 C4 E2 78 49 00  (pp none, ModRM 00 000 000)
//   tilerelease                      C4 E2 78 49 C0
//   tilezero %tmmN                   C4 E2 7B 49 ModRM 11 N 000 (pp F2)
//   tileloadd (%rsi,%r8,1),%tmm4     C4 A2 7B 4B 24 06 (X̄ = 0: index R8; SIB 00 000 110)
//   tileloadd (%rdi,%r8,1),%tmm5     C4 A2 7B 4B 2C 07
//   tileloadd (%rbx,%r9,1),%tmm6     C4 A2 7B 4B 34 0B
//   tileloadd 64(%rbx,%r9,1),%tmm7   C4 A2 7B 4B 7C 0B 40
//   tileloadd (%rdx,%r10,1),%tmm0    C4 A2 7B 4B 04 12
//   tileloadd 64(%rdx,%r10,1),%tmm1  C4 A2 7B 4B 4C 12 40
//   tileloadd (%r11,%r10,1),%tmm2    C4 82 7B 4B 14 13 (B̄ = 0: base R11)
//   tileloadd 64(%r11,%r10,1),%tmm3  C4 82 7B 4B 5C 13 40
//   tilestored: the same with pp F3 (7A) and the tile in ModRM.reg
//   tdpbf16ps %tmmB,%tmmA,%tmmC      C4 E2 vvvv=¬B 5C ModRM 11 C A (pp F3)
// TDPBF16PS (Intel SDM): for each row m and column n of C and each pair
// step k, C[m][n] += A[m].bf16[2k]·B[k].bf16[2n] + A[m].bf16[2k+1]·
// B[k].bf16[2n+1], denormal inputs read as 0, round to nearest even,
// denormal results flushed to 0, MXCSR neither read nor written.
#define LDTILECFG_AX BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0x00
#define TILERELEASE BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0xC0
#define TILEZERO_0 BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC0
#define TILEZERO_1 BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC8
#define TILEZERO_2 BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD0
#define TILEZERO_3 BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD8
#define LOAD_A0 BYTE $0xC4; BYTE $0xA2; BYTE $0x7B; BYTE $0x4B; BYTE $0x24; BYTE $0x06
#define LOAD_A1 BYTE $0xC4; BYTE $0xA2; BYTE $0x7B; BYTE $0x4B; BYTE $0x2C; BYTE $0x07
#define LOAD_B0 BYTE $0xC4; BYTE $0xA2; BYTE $0x7B; BYTE $0x4B; BYTE $0x34; BYTE $0x0B
#define LOAD_B1 BYTE $0xC4; BYTE $0xA2; BYTE $0x7B; BYTE $0x4B; BYTE $0x7C; BYTE $0x0B; BYTE $0x40
#define LOAD_C00 BYTE $0xC4; BYTE $0xA2; BYTE $0x7B; BYTE $0x4B; BYTE $0x04; BYTE $0x12
#define LOAD_C01 BYTE $0xC4; BYTE $0xA2; BYTE $0x7B; BYTE $0x4B; BYTE $0x4C; BYTE $0x12; BYTE $0x40
#define LOAD_C10 BYTE $0xC4; BYTE $0x82; BYTE $0x7B; BYTE $0x4B; BYTE $0x14; BYTE $0x13
#define LOAD_C11 BYTE $0xC4; BYTE $0x82; BYTE $0x7B; BYTE $0x4B; BYTE $0x5C; BYTE $0x13; BYTE $0x40
#define STORE_C00 BYTE $0xC4; BYTE $0xA2; BYTE $0x7A; BYTE $0x4B; BYTE $0x04; BYTE $0x12
#define STORE_C01 BYTE $0xC4; BYTE $0xA2; BYTE $0x7A; BYTE $0x4B; BYTE $0x4C; BYTE $0x12; BYTE $0x40
#define STORE_C10 BYTE $0xC4; BYTE $0x82; BYTE $0x7A; BYTE $0x4B; BYTE $0x14; BYTE $0x13
#define STORE_C11 BYTE $0xC4; BYTE $0x82; BYTE $0x7A; BYTE $0x4B; BYTE $0x5C; BYTE $0x13; BYTE $0x40
#define DP_00 BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xC4 // tdpbf16ps %tmm6,%tmm4,%tmm0
#define DP_01 BYTE $0xC4; BYTE $0xE2; BYTE $0x42; BYTE $0x5C; BYTE $0xCC // tdpbf16ps %tmm7,%tmm4,%tmm1
#define DP_10 BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xD5 // tdpbf16ps %tmm6,%tmm5,%tmm2
#define DP_11 BYTE $0xC4; BYTE $0xE2; BYTE $0x42; BYTE $0x5C; BYTE $0xDD // tdpbf16ps %tmm7,%tmm5,%tmm3

// func amxBlocks(kc int, a *uint32, b *uint32, pstride, nb, mb int, c *float32, ldc, load int, cfg *byte, plane int)
// Tiles: 0–3 the C block (00 01 / 10 11, 16 × 16 float32 each), 4–5 the
// A rows 0–15 and 16–31 of a step, 6–7 the B columns 0–15 and 16–31.
// The A tiles are contiguous (row stride R8 = 64 bytes): after the steps
// of a block, DI points at the next block's rows 0–15. With plane ≠ 0, A
// has two more planes laid out alike, plane and 2·plane bytes on, and
// each step adds their products too, in turn, with the same B tiles.
TEXT ·amxBlocks(SB), NOSPLIT, $0-88
	MOVQ cfg+72(FP), AX
	LDTILECFG_AX
	MOVQ $64, R8
	MOVQ $128, R9
	MOVQ ldc+56(FP), R10
	MOVQ R10, AX
	SHLQ $4, AX             // 16 rows of C
	MOVQ kc+0(FP), R12
	SHLQ $10, R12           // rows 16–31 of an A block: kc KiB on
	MOVQ b+16(FP), R13
	MOVQ c+48(FP), R14

panel:
	MOVQ mb+40(FP), R15
	MOVQ a+8(FP), SI
	MOVQ R14, DX

block:
	LEAQ (SI)(R12*1), DI    // A rows 16–31
	LEAQ (DX)(AX*1), R11    // C rows 16–31
	MOVQ load+64(FP), CX
	TESTQ CX, CX
	JNZ loadc
	TILEZERO_0
	TILEZERO_1
	TILEZERO_2
	TILEZERO_3
	JMP steps

loadc:
	LOAD_C00
	LOAD_C01
	LOAD_C10
	LOAD_C11

steps:
	MOVQ R13, BX
	MOVQ kc+0(FP), CX

step:
	LOAD_A0
	LOAD_A1
	LOAD_B0
	LOAD_B1
	DP_00
	DP_01
	DP_10
	DP_11
	CMPQ plane+80(FP), $0
	JEQ next
	ADDQ plane+80(FP), SI
	ADDQ plane+80(FP), DI
	LOAD_A0
	LOAD_A1
	DP_00
	DP_01
	DP_10
	DP_11
	ADDQ plane+80(FP), SI
	ADDQ plane+80(FP), DI
	LOAD_A0
	LOAD_A1
	DP_00
	DP_01
	DP_10
	DP_11
	SUBQ plane+80(FP), SI
	SUBQ plane+80(FP), DI
	SUBQ plane+80(FP), SI
	SUBQ plane+80(FP), DI

next:
	ADDQ $1024, SI
	ADDQ $1024, DI
	ADDQ $2048, BX
	DECQ CX
	JNZ step

	STORE_C00
	STORE_C01
	STORE_C10
	STORE_C11
	MOVQ DI, SI             // next 32 rows of A
	ADDQ AX, DX
	ADDQ AX, DX             // next 32 rows of C
	DECQ R15
	JNZ block

	MOVQ pstride+24(FP), CX
	ADDQ CX, R13            // next panel of B
	ADDQ $128, R14          // next 32 columns of C
	MOVQ nb+32(FP), CX
	DECQ CX
	MOVQ CX, nb+32(FP)
	JNZ panel

	TILERELEASE
	RET

// ROUND_CONSTS sets Z10–Z14 to the constants of ROUNDBF16: 0x7fff, 1,
// 0x7fffffff, 0x7f800000 and 0x40.
#define ROUND_CONSTS \
	MOVL $0x7fff, AX; VPBROADCASTD AX, Z10; \
	MOVL $1, AX; VPBROADCASTD AX, Z11; \
	MOVL $0x7fffffff, AX; VPBROADCASTD AX, Z12; \
	MOVL $0x7f800000, AX; VPBROADCASTD AX, Z13; \
	MOVL $0x40, AX; VPBROADCASTD AX, Z14

// ROUNDBF16(x, s, r) sets the low halves of r's 16 dwords to the bfloat16
// bits of x's 16 floats as RoundBF16 rounds them — (b + 0x7fff +
// (b>>16)&1) >> 16 on the bits b, and (b>>16) | 0x40 for a NaN (|b| >
// 0x7f800000) — the high halves to 0; s gets b>>16; Z3 and K1 are
// clobbered; ROUND_CONSTS set Z10–Z14.
#define ROUNDBF16(x, s, r) \
	VPSRLD $16, x, s; \
	VPANDD Z11, s, r; \
	VPADDD Z10, r, r; \
	VPADDD x, r, r; \
	VPSRLD $16, r, r; \
	VPANDD Z12, x, Z3; \
	VPCMPUD $6, Z13, Z3, K1; \
	VPORD Z14, s, K1, r

// func roundPairs16(dst *uint32, src *float32, n, stride int)
// Rounds n groups of 32 float32 at src (consecutive) to bfloat16 as
// RoundBF16 does (ROUNDBF16) and writes each group as 16 dwords of pairs
// (VPMOVDW keeps the low halves in order: dword q = element 2q | element
// 2q+1 << 16) at dst, dst + stride, … bytes.
TEXT ·roundPairs16(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ stride+24(FP), DX
	ROUND_CONSTS

round:
	VMOVDQU32 (SI), Z0
	VMOVDQU32 64(SI), Z1
	ROUNDBF16(Z0, Z4, Z2)
	ROUNDBF16(Z1, Z5, Z6)
	VPMOVDW Z2, Y7
	VPMOVDW Z6, Y8
	VMOVDQU Y7, (DI)
	VMOVDQU Y8, 32(DI)
	ADDQ $128, SI
	ADDQ DX, DI
	DECQ CX
	JNZ round
	VZEROUPPER
	RET

// func splitPairs16(dst *uint32, src *float32, n, stride int)
// Splits n groups of 16 float32 at src (consecutive) as splitBF16 does —
// hi = the value rounded as RoundBF16 rounds it, lo = (x − hi) rounded
// likewise, 0 where hi's exponent is all ones — and writes each group as
// 16 dwords hi | lo << 16 at dst, dst + stride, … bytes.
TEXT ·splitPairs16(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ stride+24(FP), DX
	ROUND_CONSTS
	MOVL $0x7f80, AX
	VPBROADCASTD AX, Z15

split:
	VMOVDQU32 (SI), Z0
	ROUNDBF16(Z0, Z4, Z2)   // hi
	VPSLLD $16, Z2, Z5      // hi as float32
	VSUBPS Z5, Z0, Z6       // lo = x − hi, exact where hi is finite
	ROUNDBF16(Z6, Z7, Z8)   // lo rounded (a NaN only where hi is not finite)
	VPANDD Z15, Z2, Z3
	VPCMPEQD Z15, Z3, K2    // hi is ±Inf or NaN
	VPXORD Z8, Z8, K2, Z8   // lo = 0 there
	VPSLLD $16, Z8, Z8
	VPORD Z8, Z2, Z9
	VMOVDQU32 Z9, (DI)
	ADDQ $64, SI
	ADDQ DX, DI
	DECQ CX
	JNZ split
	VZEROUPPER
	RET

// SPLIT3(x, hi, mid, lo) splits x's 16 floats as split3BF16 does: hi, mid
// and lo get the bfloat16 bits (low halves) of RoundBF16(x), of the rest
// r = x − hi and of r − mid (exact: the three sum to x), mid and lo 0
// where hi's exponent is all ones. Z3–Z7, K1 and K2 are clobbered;
// ROUND_CONSTS set Z10–Z14 and Z15 holds 0x7f80.
#define SPLIT3(x, hi, mid, lo) \
	ROUNDBF16(x, Z4, hi); \
	VPSLLD $16, hi, Z5; \
	VSUBPS Z5, x, Z6; \
	ROUNDBF16(Z6, Z4, mid); \
	VPSLLD $16, mid, Z5; \
	VSUBPS Z5, Z6, Z7; \
	ROUNDBF16(Z7, Z4, lo); \
	VPANDD Z15, hi, Z3; \
	VPCMPEQD Z15, Z3, K2; \
	VPXORD mid, mid, K2, mid; \
	VPXORD lo, lo, K2, lo

// func split3Pairs16(dst *uint32, src *float32, n, stride, plane int)
// Splits n groups of 32 float32 at src (consecutive) in three bfloat16
// parts (SPLIT3) and writes each part's group as 16 dwords of pairs, as
// roundPairs16 writes the rounded values: hi at dst, dst + stride, …
// bytes, mid plane bytes after each, lo 2·plane bytes after.
TEXT ·split3Pairs16(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ stride+24(FP), DX
	MOVQ plane+32(FP), BX
	ROUND_CONSTS
	MOVL $0x7f80, AX
	VPBROADCASTD AX, Z15

split3:
	VMOVDQU32 (SI), Z0
	VMOVDQU32 64(SI), Z1
	SPLIT3(Z0, Z16, Z17, Z18)
	SPLIT3(Z1, Z19, Z20, Z21)
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	VPMOVDW Z16, Y22
	VPMOVDW Z19, Y23
	VMOVDQU32 Y22, (DI)
	VMOVDQU32 Y23, 32(DI)
	VPMOVDW Z17, Y22
	VPMOVDW Z20, Y23
	VMOVDQU32 Y22, (R8)
	VMOVDQU32 Y23, 32(R8)
	VPMOVDW Z18, Y22
	VPMOVDW Z21, Y23
	VMOVDQU32 Y22, (R9)
	VMOVDQU32 Y23, 32(R9)
	ADDQ $128, SI
	ADDQ DX, DI
	DECQ CX
	JNZ split3
	VZEROUPPER
	RET
