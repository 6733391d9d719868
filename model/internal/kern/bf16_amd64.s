//go:build amd64

#include "textflag.h"

// VDPBF16PS (AVX512_BF16) is unknown to the Go assembler, so the twelve
// forms the micro-kernel uses are written out as bytes, as GNU as
// assembles them (`vdpbf16ps 4*r(%rsi){1to16}, %zmm(12+h), %zmm(2r+h)`,
// r = 0…5, h = 0, 1). Each is EVEX 62 P0 P1 P2, opcode 52, ModRM[, disp8]:
//   P0 = R̄ X̄ B̄ R̄′ 0 0 1 0: map 0F38; R̄ = 0 for destinations Z8–Z15
//        (0x72), 1 for Z0–Z7 (0xF2); X̄ = B̄ = 1 (base RSI, no index).
//   P1 = W v̄v̄v̄v̄ 1 p p: W = 0, vvvv = ¬(first source) — Z12: 0x1E, Z13:
//        0x16 —, pp = 10 (prefix F3).
//   P2 = z L′L b V̄′ a a a = 0 10 1 1 000 = 0x58: 512 bits, {1to16}
//        broadcast of the memory dword, no mask.
//   ModRM = mod reg rm: reg = destination mod 8, rm = 110 (RSI); mod = 00
//        for offset 0, else 01 with disp8 = offset/4 (EVEX compresses the
//        displacement by the 4-byte broadcast element).
// For each lane i < 16: dst[i] += src1.bf16[2i+1]·m.bf16[1], then dst[i] +=
// src1.bf16[2i]·m.bf16[0] (m the broadcast dword), each a fused step with
// one round-to-nearest-even, denormal inputs read as 0 and denormal
// results flushed to 0, MXCSR neither read nor written (Intel SDM).
#define DP_R0_0 BYTE $0x62; BYTE $0xF2; BYTE $0x1E; BYTE $0x58; BYTE $0x52; BYTE $0x06
#define DP_R0_1 BYTE $0x62; BYTE $0xF2; BYTE $0x16; BYTE $0x58; BYTE $0x52; BYTE $0x0E
#define DP_R1_0 BYTE $0x62; BYTE $0xF2; BYTE $0x1E; BYTE $0x58; BYTE $0x52; BYTE $0x56; BYTE $0x01
#define DP_R1_1 BYTE $0x62; BYTE $0xF2; BYTE $0x16; BYTE $0x58; BYTE $0x52; BYTE $0x5E; BYTE $0x01
#define DP_R2_0 BYTE $0x62; BYTE $0xF2; BYTE $0x1E; BYTE $0x58; BYTE $0x52; BYTE $0x66; BYTE $0x02
#define DP_R2_1 BYTE $0x62; BYTE $0xF2; BYTE $0x16; BYTE $0x58; BYTE $0x52; BYTE $0x6E; BYTE $0x02
#define DP_R3_0 BYTE $0x62; BYTE $0xF2; BYTE $0x1E; BYTE $0x58; BYTE $0x52; BYTE $0x76; BYTE $0x03
#define DP_R3_1 BYTE $0x62; BYTE $0xF2; BYTE $0x16; BYTE $0x58; BYTE $0x52; BYTE $0x7E; BYTE $0x03
#define DP_R4_0 BYTE $0x62; BYTE $0x72; BYTE $0x1E; BYTE $0x58; BYTE $0x52; BYTE $0x46; BYTE $0x04
#define DP_R4_1 BYTE $0x62; BYTE $0x72; BYTE $0x16; BYTE $0x58; BYTE $0x52; BYTE $0x4E; BYTE $0x04
#define DP_R5_0 BYTE $0x62; BYTE $0x72; BYTE $0x1E; BYTE $0x58; BYTE $0x52; BYTE $0x56; BYTE $0x05
#define DP_R5_1 BYTE $0x62; BYTE $0x72; BYTE $0x16; BYTE $0x58; BYTE $0x52; BYTE $0x5E; BYTE $0x05

// LD1 and ST1 move one row of C at DX (32 float32) to or from a, b.
#define LD1(a, b) \
	VMOVUPS (DX), a \
	VMOVUPS 64(DX), b

#define ST1(a, b) \
	VMOVUPS a, (DX) \
	VMOVUPS b, 64(DX)

// kernelBF6x32AVX512 is the bf16 micro-kernel of GemmBF16: C[6×32] =
// C0 + Ap·Bp over kp ≥ 1 pair steps, where C0 is C itself (load ≠ 0) or 0.
// Step p of Ap holds six dwords, the bf16 pair (x[r][2p], x[r][2p+1]) of
// row r; of Bp 32 dwords, the pair (w[j][2p], w[j][2p+1]) of column j.
// Row r of C accumulates in Z(2r), Z(2r+1) (columns 0–15, 16–31); Z12, Z13
// hold the step's B pairs; the A pairs are broadcast from memory.
// func kernelBF6x32AVX512(kp int, ap, bp *uint32, c *float32, ldc, load int)
TEXT ·kernelBF6x32AVX512(SB), NOSPLIT, $0-48
	MOVQ kp+0(FP), CX
	MOVQ ap+8(FP), SI
	MOVQ bp+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	MOVQ DX, R9
	MOVQ load+40(FP), AX
	TESTQ AX, AX
	JNZ loadc
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	VPXORQ Z2, Z2, Z2
	VPXORQ Z3, Z3, Z3
	VPXORQ Z4, Z4, Z4
	VPXORQ Z5, Z5, Z5
	VPXORQ Z6, Z6, Z6
	VPXORQ Z7, Z7, Z7
	VPXORQ Z8, Z8, Z8
	VPXORQ Z9, Z9, Z9
	VPXORQ Z10, Z10, Z10
	VPXORQ Z11, Z11, Z11
	JMP loop
loadc:
	LD1(Z0, Z1)
	ADDQ R8, DX
	LD1(Z2, Z3)
	ADDQ R8, DX
	LD1(Z4, Z5)
	ADDQ R8, DX
	LD1(Z6, Z7)
	ADDQ R8, DX
	LD1(Z8, Z9)
	ADDQ R8, DX
	LD1(Z10, Z11)
loop:
	VMOVUPS (DI), Z12
	VMOVUPS 64(DI), Z13
	DP_R0_0
	DP_R0_1
	DP_R1_0
	DP_R1_1
	DP_R2_0
	DP_R2_1
	DP_R3_0
	DP_R3_1
	DP_R4_0
	DP_R4_1
	DP_R5_0
	DP_R5_1
	ADDQ $24, SI
	ADDQ $128, DI
	DECQ CX
	JNZ loop
	MOVQ R9, DX
	ST1(Z0, Z1)
	ADDQ R8, DX
	ST1(Z2, Z3)
	ADDQ R8, DX
	ST1(Z4, Z5)
	ADDQ R8, DX
	ST1(Z6, Z7)
	ADDQ R8, DX
	ST1(Z8, Z9)
	ADDQ R8, DX
	ST1(Z10, Z11)
	VZEROUPPER
	RET

// func packPanelAVX512(dst *uint32, bits *uint16, idx *int32, kp int)
// Writes the first kp pairs of 32 bfloat16 rows as one panel: step p is
// dst[32p … 32p+31], the dword (pair p) of row j at bits + idx[j%16] +
// (j/16)·idx[16] bytes + 4p, gathered 16 rows at a time (VPGATHERDD
// clears its mask, so each is reset to all ones first).
TEXT ·packPanelAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ bits+8(FP), SI
	MOVQ idx+16(FP), AX
	MOVQ kp+24(FP), CX
	VMOVDQU32 (AX), Z0
	MOVLQSX 64(AX), DX
	LEAQ (SI)(DX*1), R8     // rows 16–31

gather:
	KXNORW K1, K1, K1
	KXNORW K2, K2, K2
	VPGATHERDD (SI)(Z0*1), K1, Z2
	VPGATHERDD (R8)(Z0*1), K2, Z3
	VMOVDQU32 Z2, (DI)
	VMOVDQU32 Z3, 64(DI)
	ADDQ $4, SI
	ADDQ $4, R8
	ADDQ $128, DI
	DECQ CX
	JNZ gather
	VZEROUPPER
	RET
