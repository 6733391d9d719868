package model

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model/internal/kern"
)

// Weight is one weight matrix [Rows, Cols] (nn.Linear's [out, in], or an
// embedding [vocab, d]) in the dtype it was stored in: float32 values, the
// raw bit patterns of a BF16 or F16 tensor, or the MXFP4 codes and scales
// of gpt-oss's released experts, as memory-mapped from the checkpoint
// (model.Load copies nothing onto the heap for any of them). The matrix
// products (linear) widen 16-bit weights and dequantize MXFP4 ones inside
// the kernels and accumulate in float32, so a product with such weights is
// the float32 product with the same (rounded) weights; the embedding
// lookup widens the rows it reads (widenRow).
//
// An MXFP4 weight (kern.MXFP4) holds element e of its storage as the
// 4-bit code in MX.Codes[e/2] (the low nibble for even e) times 2^(s−127) with
// s = MX.Scales[e/32]: value x[r, c] of a row of Cols (a multiple of 32)
// values is element r·Cols + c, exactly the `_blocks` [.., rows, cols/32,
// 16] and `_scales` [.., rows, cols/32] tensors of the release.
//
// A GGUF weight in one of ggml's quantized types (DType "Q8_0", "Q4_K",
// …: checkpoint.GGMLType's name in capitals) holds its blocks as stored
// (Q: kern.Blocks, a view of the mapped file, or for Llama's q/k rows a
// copy of the blocks in Hugging Face row order); element e is in block
// e/Q.Block, and rows are whole blocks (Cols a multiple of Q.Block).
// The products dequantize them while packing, bit for bit as ggml's
// dequantize_row_*, so a product with such a weight is the float32
// product with ggml's float32 reading of the file.
//
// Row r starts at element r·Cols of the storage, or, for a matrix made of
// runs of rows of a stored one (the query and gate rows of a packed q_proj,
// see unpackGatedQ), at ((r/run)·pitch + r%run)·Cols.
type Weight struct {
	Rows, Cols int
	DType      string       // "F32", "BF16", "F16" (safetensors' spelling) or "MXFP4"
	F32        []float32    // DType F32: the values
	Bits       []uint16     // DType BF16 or F16: the stored bit patterns
	MX         *MXFP4Data   // DType MXFP4: the codes and scales (a pointer: a Weight stays small, and a model holds many)
	Q          *kern.Blocks // a GGUF quantized DType: the blocks and their row dequantizer

	// run and pitch: rows come in runs of run rows, pitch rows apart in
	// the storage (run 0: contiguous); int32, so that a Weight (nine to a
	// layer) stays small.
	run, pitch int32

	// release, for a weight that is a view of a mapped checkpoint file,
	// takes its pages out of the process's resident set
	// (checkpoint.Releaser); nil otherwise.
	release func()
}

// MXFP4Data is the storage of an MXFP4 Weight as stored: the E2M1 codes,
// two a byte (Codes), and the E8M0 scale of each 32 elements (Scales).
type MXFP4Data struct {
	Codes, Scales []uint8
}

// mxfp4Weight is the [rows, cols] MXFP4 Weight of codes and scales.
func mxfp4Weight(rows, cols int, codes, scales []uint8) Weight {
	return Weight{Rows: rows, Cols: cols, DType: "MXFP4", MX: &MXFP4Data{Codes: codes, Scales: scales}}
}

// f32Weight is the float32 Weight of the values w, rows of cols values.
func f32Weight(w []float32, cols int) Weight {
	rows := 0
	if cols > 0 {
		rows = len(w) / cols
	}
	return Weight{Rows: rows, Cols: cols, DType: "F32", F32: w}
}

// present reports whether the weight exists (the zero Weight stands for an
// absent one: GPT-2 has no gate projection).
func (w *Weight) present() bool { return w.F32 != nil || w.Bits != nil || w.MX != nil || w.Q != nil }

// stored is the number of elements the storage holds.
func (w *Weight) stored() int {
	if w.MX != nil {
		return min(2*len(w.MX.Codes), kern.MXFP4Block*len(w.MX.Scales))
	}
	if w.Q != nil {
		return w.Q.Elements()
	}
	return max(len(w.F32), len(w.Bits))
}

// rowAt is the element offset of row r in the storage.
func (w *Weight) rowAt(r int) int {
	if w.run == 0 {
		return r * w.Cols
	}
	run, pitch := int(w.run), int(w.pitch)
	return (r/run*pitch + r%run) * w.Cols
}

// values is the number of values, Rows·Cols, that the storage holds (0
// where it holds fewer).
func (w *Weight) values() int {
	n := w.Rows * w.Cols
	if n > 0 && w.rowAt(w.Rows-1)+w.Cols > w.stored() {
		return 0
	}
	return n
}

// contiguous reports whether the rows follow each other in the storage.
func (w *Weight) contiguous() bool { return w.run == 0 }

// widenRow writes row r as float32 into dst[:Cols].
func (w *Weight) widenRow(dst []float32, r int) {
	at := w.rowAt(r)
	widenTo(dst[:w.Cols], w, at)
}

// widenTo writes the len(dst) values of w's storage from element at into
// dst as float32 (exact).
func widenTo(dst []float32, w *Weight, at int) {
	switch w.DType {
	case "F32":
		copy(dst, w.F32[at:at+len(dst)])
	case "BF16":
		src := w.Bits[at : at+len(dst)]
		dst = dst[:len(src)]
		for i, b := range src {
			dst[i] = math.Float32frombits(uint32(b) << 16)
		}
	case "F16":
		src := w.Bits[at : at+len(dst)]
		dst = dst[:len(src)]
		for i, b := range src {
			dst[i] = checkpoint.F16ToFloat32(b)
		}
	case "MXFP4":
		kern.DequantMXFP4(dst, w.MX.Codes, w.MX.Scales, at)
	default:
		if w.Q != nil {
			w.Q.Dequant(dst, at)
			return
		}
		panic(fmt.Sprintf("model: weight of dtype %q", w.DType))
	}
}

// widened returns the matrix as contiguous float32 values: the values
// themselves for a contiguous float32 weight, else a new slice.
func (w Weight) widened() []float32 {
	if w.DType == "F32" && w.contiguous() {
		return w.F32[:w.Rows*w.Cols]
	}
	out := make([]float32, w.Rows*w.Cols)
	for r := 0; r < w.Rows; r++ {
		w.widenRow(out[r*w.Cols:], r)
	}
	return out
}

// rowRange returns rows lo … hi−1 of a contiguous weight (sharing its
// storage).
func (w Weight) rowRange(lo, hi int) Weight {
	if !w.contiguous() {
		panic("model: rowRange of a weight made of runs")
	}
	s := w
	s.Rows = hi - lo
	s.sliceFrom(lo*w.Cols, hi*w.Cols)
	return s
}

// runsOf returns the matrix of rows runs: rows first … first+run−1 of
// every block of pitch rows of the contiguous weight w (rows/pitch blocks),
// sharing w's storage.
func (w Weight) runsOf(first, run, pitch int) Weight {
	if !w.contiguous() || w.Rows%pitch != 0 || first+run > pitch {
		panic(fmt.Sprintf("model: runs of %d rows at %d of every %d of a %d-row weight", run, first, pitch, w.Rows))
	}
	s := w
	s.Rows = w.Rows / pitch * run
	s.run, s.pitch = int32(run), int32(pitch)
	s.sliceFrom(first*w.Cols, w.stored())
	return s
}

// sliceFrom makes the storage elements lo … hi−1 of w's the whole of w's
// (lo and hi multiples of 32 for MXFP4, of Q.Block for ggml's blocks).
func (w *Weight) sliceFrom(lo, hi int) {
	switch {
	case w.F32 != nil:
		w.F32 = w.F32[lo:hi]
	case w.MX != nil:
		w.MX = &MXFP4Data{Codes: w.MX.Codes[lo/2 : hi/2], Scales: w.MX.Scales[lo/kern.MXFP4Block : hi/kern.MXFP4Block]}
	case w.Q != nil:
		q := *w.Q
		q.Data = q.Data[lo/q.Block*q.Size : hi/q.Block*q.Size]
		w.Q = &q
	default:
		w.Bits = w.Bits[lo:hi]
	}
}

// transposed returns the [Cols, Rows] transpose of a contiguous weight, in
// its dtype (a new slice: GPT-2's Conv1D weights are stored [in, out]).
func (w Weight) transposed() Weight {
	if !w.contiguous() || w.MX != nil || w.Q != nil {
		panic("model: transpose of a weight made of runs or of MXFP4 or ggml blocks")
	}
	t := w
	t.Rows, t.Cols = w.Cols, w.Rows
	if w.F32 != nil {
		t.F32 = transpose(w.F32, w.Rows, w.Cols)
		return t
	}
	t.Bits = make([]uint16, len(w.Bits))
	for r := 0; r < w.Rows; r++ {
		for c := 0; c < w.Cols; c++ {
			t.Bits[c*w.Rows+r] = w.Bits[r*w.Cols+c]
		}
	}
	return t
}

// residentBytes is the memory the weight's values take as held: 4 bytes
// per float32 value, 2 per 16-bit one, 17/32 per MXFP4 value (half a byte
// and a scale byte per 32), Q.Size/Q.Block per value in ggml's blocks.
func (w *Weight) residentBytes() int64 {
	if w.Q != nil {
		return int64(w.Rows) * int64(w.Cols) / int64(w.Q.Block) * int64(w.Q.Size)
	}
	if w.MX != nil {
		n := int64(w.Rows) * int64(w.Cols)
		return n/2 + n/kern.MXFP4Block
	}
	if w.Bits != nil {
		return 2 * int64(w.Rows) * int64(w.Cols)
	}
	return 4 * int64(w.Rows) * int64(w.Cols)
}

// linear computes dst[n, out] = x[n, in] · w[out, in]ᵀ + b (b may be nil),
// the PyTorch nn.Linear convention, reading w in its stored dtype (see
// Weight; float32 accumulation). Weights of other layouts (GPT-2's Conv1D)
// are transposed at load time so that every projection uses this.
//
// The rows of x are split across goroutines when there is enough work
// (gemmWeight splits the rows of w itself for few rows of x), each part
// one matrix product: on the blocked AVX-512 kernels where the
// build has them (gemmWeight, which widens 16-bit rows while packing its
// panels), else one BLAS call for a contiguous float32 weight, or BLAS
// calls on blocks of rows widened into scratch (linearBlocks).
func linear(dst []float32, x []float32, n, in int, w Weight, out int, b []float32) {
	if n == 0 {
		return
	}
	if w.Rows != out || w.Cols != in {
		panic(fmt.Sprintf("model: linear with a [%d, %d] weight for %d inputs and %d outputs", w.Rows, w.Cols, in, out))
	}
	parts := min(runtime.GOMAXPROCS(0), n/16)
	if parts < 1 || n*in*out <= 1<<20 || n <= gemmWeightRows {
		parts = 1
	}
	if gemmWeight == nil && (w.DType != "F32" || !w.contiguous()) {
		linearBlocks(dst, x, n, &w, parts)
	} else {
		eachPart(n, parts, func(lo, hi int) {
			if gemmWeight != nil {
				gemmWeight(hi-lo, x[lo*in:hi*in], &w, dst[lo*out:hi*out])
				return
			}
			blas32.Gemm(blas.NoTrans, blas.Trans, 1,
				blas32.General{Rows: hi - lo, Cols: in, Stride: in, Data: x[lo*in : hi*in]},
				blas32.General{Rows: out, Cols: in, Stride: in, Data: w.F32[:out*in]},
				0, blas32.General{Rows: hi - lo, Cols: out, Stride: out, Data: dst[lo*out : hi*out]})
		})
	}
	addBias(dst, n, out, b, parts)
}

// addBias adds b (nil: nothing) to each of the n rows of dst [n, out],
// split over parts goroutines.
func addBias(dst []float32, n, out int, b []float32, parts int) {
	if b == nil {
		return
	}
	eachPart(n, parts, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := dst[r*out : (r+1)*out]
			for i, v := range b {
				row[i] += v
			}
		}
	})
}

// Linear sets dst[n, out] = x[n, in]·wᵀ + b for float32 weights w [out, in]
// (nn.Linear; b nil: no bias) with the matrix product of the model's
// passes, for passes outside the registry (package afatoy's baseline).
func Linear(dst, x []float32, n, in int, w []float32, out int, b []float32) {
	linear(dst, x, n, in, f32Weight(w, in), out, b)
}

// eachPart calls fn(lo, hi) for the parts [p·n/parts, (p+1)·n/parts) of
// [0, n), each on its own goroutine when parts > 1.
func eachPart(n, parts int, fn func(lo, hi int)) {
	if parts == 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(p*n/parts, (p+1)*n/parts)
		}()
	}
	wg.Wait()
}

// gemmWeight, where the build has it (the AVX-512 kernels of the pure-Go
// amd64 build, blas_gemm.go), sets dst[n, w.Rows] = x[n, w.Cols]·wᵀ,
// widening 16-bit weights while packing them: the same sums as the float32
// product of the widened weights (bit for bit).
var gemmWeight func(n int, x []float32, w *Weight, dst []float32)

// gemmWeightRows is the most rows of x for which gemmWeight splits the
// product between goroutines itself (by rows of w: kern.SgemmRows'
// narrow products), so that linear does not split x.
var gemmWeightRows int

// widenBlock is the number of values linearBlocks widens per block (8 MiB
// of float32 scratch), in blocks of at least minBlock rows: the BLAS packs
// x once per call, so that each block should be tall (2048 rows of a
// 1024-wide matrix, 512 of a 4096-wide one).
const (
	widenBlock = 1 << 21
	minBlock   = 256
)

// widenScratch holds one goroutine's widened weight block.
var widenScratch = sync.Pool{New: func() any { return new([]float32) }}

// linearBlocks sets dst[n, w.Rows] = x[n, w.Cols]·wᵀ block by block of
// rows of w: each block is widened (or, for float32 rows in runs,
// gathered) into scratch once, its rows split across the parts, then each
// part of the rows of x is multiplied by it in one BLAS call — the calls
// the float32 path makes, on a block of the weight's rows. What the
// OpenBLAS build and CPUs without AVX-512 run for weights that are not
// contiguous float32.
func linearBlocks(dst, x []float32, n int, w *Weight, parts int) {
	in, out := w.Cols, w.Rows
	rows := min(out, max(minBlock, widenBlock/max(in, 1)/minBlock*minBlock))
	buf := widenScratch.Get().(*[]float32)
	defer widenScratch.Put(buf)
	if cap(*buf) < rows*in {
		*buf = make([]float32, rows*in)
	}
	for o0 := 0; o0 < out; o0 += rows {
		m := min(rows, out-o0)
		ws := (*buf)[:m*in]
		eachPart(m, min(parts, m), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				w.widenRow(ws[r*in:], o0+r)
			}
		})
		eachPart(n, parts, func(lo, hi int) {
			blas32.Gemm(blas.NoTrans, blas.Trans, 1,
				blas32.General{Rows: hi - lo, Cols: in, Stride: in, Data: x[lo*in : hi*in]},
				blas32.General{Rows: m, Cols: in, Stride: in, Data: ws},
				0, blas32.General{Rows: hi - lo, Cols: m, Stride: out, Data: dst[lo*out+o0:]})
		})
	}
}

// mxfp4 returns the experts × [rows, cols] MXFP4 matrices stored as
// name+"_blocks" (uint8 [experts, rows, cols/32, 16]) and name+"_scales"
// (uint8 [experts, rows, cols/32]), gpt-oss's released layout, one Weight
// per expert holding views of the mapped file (checkpoint.Uint8View).
// Tensors that are missing, of another dtype than U8 or of shapes that
// disagree with each other or with config.json are collected as get
// collects them, naming the tensor (zero stand-ins: no load returns
// them). cols must be a multiple of 32. A generator (Generate) makes them
// instead (generator.mxfp4).
func (ld *loader) mxfp4(name string, experts, rows, cols int) []Weight {
	if cols%kern.MXFP4Block != 0 {
		ld.errs = append(ld.errs, fmt.Sprintf("tensor %q: MXFP4 rows of %d values, not a multiple of %d", name+"_blocks", cols, kern.MXFP4Block))
		cols = 0
	}
	groups := cols / kern.MXFP4Block
	read := func(suffix string, shape ...int) []uint8 {
		n := name + suffix
		info, ok := ld.ck.Info(n)
		switch {
		case !ok:
			ld.missing = append(ld.missing, n)
		case info.DType != "U8":
			ld.used[n] = true
			ld.errs = append(ld.errs, fmt.Sprintf("tensor %q: MXFP4 %s of dtype %s, want U8", n, suffix[1:], info.DType))
		case !equalShape(info.Shape, shape):
			ld.used[n] = true
			ld.errs = append(ld.errs, fmt.Sprintf("tensor %q: expected shape %v from config.json (%d experts, [%d, %d] each in blocks of 32), found %v", n, shape, experts, rows, cols, info.Shape))
		default:
			ld.used[n] = true
			b, err := ld.ck.Uint8View(n)
			if err != nil {
				ld.errs = append(ld.errs, err.Error())
				break
			}
			ld.types["MXFP4"] = true
			ld.bytes += int64(len(b))
			return b
		}
		return ld.standInBytes(n, shape)
	}
	var blocks, scales []uint8
	if ld.gen != nil {
		blocks, scales = ld.gen.mxfp4(name, experts, rows, cols)
	} else {
		blocks = read("_blocks", experts, rows, groups, 16)
		scales = read("_scales", experts, rows, groups)
		ld.params += int64(experts) * int64(rows) * int64(cols)
	}
	out := make([]Weight, experts)
	per := rows * cols
	for e := range out {
		out[e] = mxfp4Weight(rows, cols, blocks[e*per/2:(e+1)*per/2], scales[e*per/kern.MXFP4Block:(e+1)*per/kern.MXFP4Block])
	}
	return out
}

// standInBytes is standIn for a tensor of bytes.
func (ld *loader) standInBytes(name string, shape []int) []uint8 {
	n := 1
	for _, d := range shape {
		if d < 0 || (d > 0 && n > (maxStandIn-ld.stand)/d) {
			n = -1
			break
		}
		n *= d
	}
	if n < 0 {
		ld.errs = append(ld.errs, fmt.Sprintf("stopped checking at tensor %q: config.json asks for shape %v, too large to stand in for a tensor that is missing or does not match (limit %d elements)",
			name, shape, maxStandIn))
		panic(errStopLoading)
	}
	ld.stand += n
	return make([]uint8, n)
}

// StoredParameters returns the parameters a stored tensor holds and the
// dtype they are held in, for summaries of a checkpoint that is not
// loaded (probe inspect): its elements in its dtype, but two values a byte
// for the U8 `*_blocks` tensors of MXFP4 weights (dtype MXFP4) and none
// for their `*_scales`, whose bytes belong to those weights.
func StoredParameters(name string, info checkpoint.Info) (int64, string) {
	p := int64(1)
	for _, d := range info.Shape {
		p *= int64(d)
	}
	switch {
	case info.DType == "U8" && strings.HasSuffix(name, "_blocks"):
		return 2 * p, "MXFP4"
	case info.DType == "U8" && strings.HasSuffix(name, "_scales"):
		return 0, "MXFP4"
	}
	return p, info.DType
}
