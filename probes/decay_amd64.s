#include "textflag.h"

// func decayAdd8(row, u, next *float64, n int, e, k, kn float64) float64
//
// For i < n (a multiple of 8), eight float64 lanes a step:
// x = e·row[i] + k·u[i] (one rounding: FMA), row[i] = x,
// next[i] += kn·x, and the sum of x² in eight partial sums, reduced at
// the end. See decayAdd64 for what the row update is.
TEXT ·decayAdd8(SB), NOSPLIT, $0-64
	MOVQ         row+0(FP), DI
	MOVQ         u+8(FP), SI
	MOVQ         next+16(FP), DX
	MOVQ         n+24(FP), CX
	VBROADCASTSD e+32(FP), Z0
	VBROADCASTSD k+40(FP), Z1
	VBROADCASTSD kn+48(FP), Z2
	VXORPD       Z3, Z3, Z3
	XORQ         AX, AX

loop:
	CMPQ        AX, CX
	JGE         done
	VMULPD      (DI)(AX*8), Z0, Z4
	VFMADD231PD (SI)(AX*8), Z1, Z4
	VMOVUPD     Z4, (DI)(AX*8)
	VMOVUPD     (DX)(AX*8), Z5
	VFMADD231PD Z4, Z2, Z5
	VMOVUPD     Z5, (DX)(AX*8)
	VFMADD231PD Z4, Z4, Z3
	ADDQ        $8, AX
	JMP         loop

done:
	VEXTRACTF64X4 $1, Z3, Y4
	VADDPD        Y4, Y3, Y3
	VEXTRACTF128  $1, Y3, X4
	VADDPD        X4, X3, X3
	VPERMILPD     $1, X3, X4
	VADDSD        X4, X3, X3
	MOVSD         X3, ret+56(FP)
	VZEROUPPER
	RET
