package kern

// Blocks is a matrix stored in ggml's quantized blocks (GGUF's Q8_0,
// Q4_0 … Q6_K): each run of Block consecutive elements of the storage is
// one block of Size bytes of Data, and Row widens whole blocks to float32
// (bit for bit as ggml's dequantize_row_*, checkpoint.RowDequantizer): it
// writes the len(dst)/Block blocks of src into dst and allocates nothing.
// A row of a [rows, cols] matrix (cols a multiple of Block) starts at
// element r·cols, that is at byte r·cols/Block·Size.
type Blocks struct {
	Data        []byte
	Block, Size int
	Row         func(dst []float32, src []byte)
}

// maxBlock is the largest Block (QK_K, the K-quants' super-block).
const maxBlock = 256

// Elements is the number of elements the storage holds.
func (q *Blocks) Elements() int { return len(q.Data) / q.Size * q.Block }

// Dequant writes the len(dst) elements of q's storage from element at on
// into dst as float32: whole blocks straight from Data, allocating nothing
// (the products' packing asks for runs of gemmKC = 256 columns from a
// multiple of 256, whole blocks of every type), and a partial block at
// either end through one block of scratch (the same values), which the
// indirect call to Row puts on the heap.
func (q *Blocks) Dequant(dst []float32, at int) {
	for len(dst) > 0 {
		blk, off := at/q.Block, at%q.Block
		if off == 0 && len(dst) >= q.Block {
			n := len(dst) / q.Block
			q.Row(dst[:n*q.Block], q.Data[blk*q.Size:(blk+n)*q.Size])
			dst, at = dst[n*q.Block:], at+n*q.Block
			continue
		}
		// declared here, not above the loop: an escaping variable is
		// allocated where it is declared, and the aligned runs the packing
		// asks for never come here (a 1 KiB allocation per call had cost
		// 13 % more CPU seconds on 4 layers of the 8B shape in Q4_K_M)
		var tmp [maxBlock]float32
		q.Row(tmp[:q.Block], q.Data[blk*q.Size:(blk+1)*q.Size])
		n := copy(dst, tmp[off:q.Block])
		dst, at = dst[n:], at+n
	}
}
