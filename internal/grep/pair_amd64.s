#include "textflag.h"

// func indexPairAVX2(s []byte, c1, c2 byte, d int) int
//
// The first i with s[i] == c1 and s[i+d] == c2, or -1; the caller
// guarantees len(s)-d >= 32 (pair_amd64.go). Each step compares 32
// positions: the bytes at i with c1 and the bytes at i+d with c2, both as
// one AVX2 compare, and the two masks ANDed. The last step overlaps the
// one before it so that no load reads past s (positions compared twice
// had no match).
TEXT ·indexPairAVX2(SB),NOSPLIT,$0-48
	MOVQ	s_base+0(FP), SI
	MOVQ	s_len+8(FP), BX
	MOVBLZX	c1+24(FP), AX
	MOVBLZX	c2+25(FP), CX
	MOVQ	d+32(FP), DX
	SUBQ	DX, BX	// BX = n: the positions i to look at
	LEAQ	(SI)(DX*1), R9	// R9 = &s[d]
	MOVQ	AX, X0
	VPBROADCASTB	X0, Y0
	MOVQ	CX, X1
	VPBROADCASTB	X1, Y1
	XORQ	DI, DI	// DI = i
	MOVQ	BX, R8
	SUBQ	$32, R8	// R8 = n-32: the last start of a whole step
	MOVQ	R8, R11
	SUBQ	$32, R11	// R11 = n-64: the last start of a double step

loop2:
	// Two steps (64 positions) at a time while they fit.
	CMPQ	DI, R11
	JGT	loop1
	VMOVDQU	(SI)(DI*1), Y2
	VMOVDQU	(R9)(DI*1), Y3
	VMOVDQU	32(SI)(DI*1), Y4
	VMOVDQU	32(R9)(DI*1), Y5
	VPCMPEQB	Y0, Y2, Y2
	VPCMPEQB	Y1, Y3, Y3
	VPCMPEQB	Y0, Y4, Y4
	VPCMPEQB	Y1, Y5, Y5
	VPAND	Y2, Y3, Y3
	VPAND	Y4, Y5, Y5
	VPOR	Y3, Y5, Y6
	VPTEST	Y6, Y6
	JNZ	found2
	ADDQ	$64, DI
	JMP	loop2

found2:
	VPMOVMSKB	Y3, R10
	TESTL	R10, R10
	JNZ	found
	ADDQ	$32, DI
	VPMOVMSKB	Y5, R10
	JMP	found

loop1:
	CMPQ	DI, R8
	JGT	last
	VMOVDQU	(SI)(DI*1), Y2
	VMOVDQU	(R9)(DI*1), Y3
	VPCMPEQB	Y0, Y2, Y2
	VPCMPEQB	Y1, Y3, Y3
	VPAND	Y2, Y3, Y3
	VPMOVMSKB	Y3, R10
	TESTL	R10, R10
	JNZ	found
	ADDQ	$32, DI
	JMP	loop1

last:
	// Fewer than 32 positions left: one step that ends at n.
	CMPQ	DI, BX
	JGE	none
	MOVQ	R8, DI
	VMOVDQU	(SI)(DI*1), Y2
	VMOVDQU	(R9)(DI*1), Y3
	VPCMPEQB	Y0, Y2, Y2
	VPCMPEQB	Y1, Y3, Y3
	VPAND	Y2, Y3, Y3
	VPMOVMSKB	Y3, R10
	TESTL	R10, R10
	JNZ	found

none:
	VZEROUPPER
	MOVQ	$-1, ret+40(FP)
	RET

found:
	BSFL	R10, R10
	ADDQ	R10, DI
	VZEROUPPER
	MOVQ	DI, ret+40(FP)
	RET
