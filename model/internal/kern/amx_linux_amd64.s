#include "textflag.h"

// The AMX instructions are unknown to the Go assembler; each form used
// here is written out as bytes, as GNU as (2.40) assembles the AT&T line
// beside it. All are VEX-encoded (C4 R̄X̄B̄.mmmmm W.vvvv.L.pp opcode ModRM
// [SIB disp8]) in map 0F38 (mmmmm = 00010); the memory forms address
// base + index·1 with the index register holding the row stride in bytes
// (TILELOADD/TILESTORED require a SIB byte). Registers: SI, DI the two A
// tiles' rows, R8 their stride; BX the B step, R9 its stride (128); DX,
// R11 the upper and lower halves of the C block, R10 its stride.
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

// func amxBlocks(kc int, a *uint32, lda int, b *uint32, pstride, nb, mb int, c *float32, ldc, load int, cfg *byte)
// Tiles: 0–3 the C block (00 01 / 10 11, 16 × 16 float32 each), 4–5 the
// A rows 0–15 and 16–31 of a step, 6–7 the B columns 0–15 and 16–31. The
// local ablk holds the current block's A rows.
TEXT ·amxBlocks(SB), NOSPLIT, $8-88
	MOVQ cfg+80(FP), AX
	LDTILECFG_AX
	MOVQ lda+16(FP), R8
	MOVQ $128, R9
	MOVQ ldc+64(FP), R10
	MOVQ R10, AX
	SHLQ $4, AX             // 16 rows of C
	MOVQ nb+40(FP), R12
	MOVQ b+24(FP), R13
	MOVQ c+56(FP), R14

panel:
	MOVQ mb+48(FP), R15
	MOVQ a+8(FP), SI
	MOVQ R14, DX

block:
	MOVQ SI, ablk-8(SP)
	MOVQ R8, DI
	SHLQ $4, DI
	ADDQ SI, DI             // A rows 16–31
	LEAQ (DX)(AX*1), R11    // C rows 16–31
	MOVQ load+72(FP), CX
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
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $2048, BX
	DECQ CX
	JNZ step

	STORE_C00
	STORE_C01
	STORE_C10
	STORE_C11
	MOVQ ablk-8(SP), SI
	MOVQ R8, CX
	SHLQ $5, CX
	ADDQ CX, SI             // next 32 rows of A
	ADDQ AX, DX
	ADDQ AX, DX             // next 32 rows of C
	DECQ R15
	JNZ block

	MOVQ pstride+32(FP), CX
	ADDQ CX, R13            // next panel of B
	ADDQ $128, R14          // next 32 columns of C
	DECQ R12
	JNZ panel

	TILERELEASE
	RET
