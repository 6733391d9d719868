//go:build amd64

#include "textflag.h"

// func dequantMXFP4AVX512(dst *float32, blocks *uint8, scales *uint8, table *float32, n int)
// dst[32b + 2j + h] = table[16·scales[b] + nibble h of blocks[16b + j]]
// (h = 0: the low nibble) for the n > 0 blocks b of 32 values: the 16
// bytes of a block zero-extended to dwords, each dword's high nibble moved
// to bits 16–19 so that the 32 words are the codes in order, widened to
// dwords 16 at a time, and looked up in the scale's 16 values (VPERMPS).
TEXT ·dequantMXFP4AVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ blocks+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ table+24(FP), R8
	MOVQ n+32(FP), CX
	MOVL $0x0f, AX
	VPBROADCASTD AX, Z7
	MOVL $0x0f0000, AX
	VPBROADCASTD AX, Z6
mxloop:
	MOVBQZX (DX), AX
	SHLQ $6, AX
	VMOVUPS (R8)(AX*1), Z5
	VPMOVZXBD (SI), Z0
	VPSLLD $12, Z0, Z1
	VPANDD Z7, Z0, Z0
	VPANDD Z6, Z1, Z1
	VPORD Z1, Z0, Z0
	VPMOVZXWD Y0, Z2
	VEXTRACTI64X4 $1, Z0, Y3
	VPMOVZXWD Y3, Z3
	VPERMPS Z5, Z2, Z2
	VPERMPS Z5, Z3, Z3
	VMOVUPS Z2, (DI)
	VMOVUPS Z3, 64(DI)
	ADDQ $16, SI
	INCQ DX
	ADDQ $128, DI
	DECQ CX
	JNZ mxloop
	VZEROUPPER
	RET
