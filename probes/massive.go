package probes

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
)

// Massive activations (Sun, Chen, Kolter & Liu 2024, "Massive Activations
// in Large Language Models"): a few entries of the residual stream, at
// fixed channels and a few positions (often the first token), are orders of
// magnitude larger than the rest — Sun et al. call an entry massive when
// its magnitude exceeds 100 and about 1,000 times the median magnitude of
// the hidden state. TopAbs finds the k largest |h[t, i]| of one layer's
// residual stream with their position and channel, MedianAbs the median
// |h| they are compared with, and ReplaceEntries is the intervention that
// sets them to zero or to a channel mean.

// Activation is one entry of a [T, D] activation: position, channel, value.
type Activation struct {
	Position, Channel int
	Value             float32
}

// actHeap is a min-heap on |Value| (ties: the later position, then the
// later channel, is smaller, so that the earliest entries are kept).
type actHeap []Activation

func (h actHeap) Len() int           { return len(h) }
func (h actHeap) Less(i, j int) bool { return lessAct(h[i], h[j]) }
func (h actHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *actHeap) Push(x any)        { *h = append(*h, x.(Activation)) }
func (h *actHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// TopAbs returns the k entries of x [T, D] (row-major, row t = position)
// with the largest |value|, largest first; ties go to the earlier
// position, then the earlier channel. NaN entries are skipped. Cost
// O(T·D·log k), memory O(k).
func TopAbs(x []float32, T, D, k int) []Activation {
	if len(x) != T*D {
		panic(fmt.Sprintf("probes: TopAbs: %d values for [T=%d, D=%d]", len(x), T, D))
	}
	if k <= 0 {
		return nil
	}
	h := make(actHeap, 0, k+1)
	for t := 0; t < T; t++ {
		for i, v := range x[t*D : (t+1)*D] {
			if v != v {
				continue
			}
			a := Activation{t, i, v}
			if len(h) < k {
				heap.Push(&h, a)
				continue
			}
			if !lessAct(h[0], a) {
				continue
			}
			h[0] = a
			heap.Fix(&h, 0)
		}
	}
	out := make([]Activation, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&h).(Activation)
	}
	return out
}

// lessAct orders entries by |Value|, and among equal magnitudes the later
// position, then the later channel, first (the heap keeps the larger).
func lessAct(a, b Activation) bool {
	x, y := abs32(a.Value), abs32(b.Value)
	if x != y {
		return x < y
	}
	if a.Position != b.Position {
		return a.Position > b.Position
	}
	return a.Channel > b.Channel
}

// MedianAbs returns the median of |x| (the mean of the two middle values
// for an even count; NaN entries skipped, NaN if none), sorting a copy in
// scratch, which it returns for reuse.
func MedianAbs(x []float32, scratch []float32) (float64, []float32) {
	s := scratch[:0]
	for _, v := range x {
		if v == v {
			s = append(s, abs32(v))
		}
	}
	n := len(s)
	if n == 0 {
		return math.NaN(), s
	}
	slices.Sort(s)
	if n%2 == 1 {
		return float64(s[n/2]), s
	}
	return (float64(s[n/2-1]) + float64(s[n/2])) / 2, s
}

// ChannelMeans writes into dst [D] the mean over positions of each channel
// of x [T, D], in float64.
func ChannelMeans(dst []float64, x []float32, T, D int) {
	clear(dst[:D])
	for t := 0; t < T; t++ {
		for i, v := range x[t*D : (t+1)*D] {
			dst[i] += float64(v)
		}
	}
	for i := range dst[:D] {
		dst[i] /= float64(T)
	}
}

// ReplaceEntries sets x[p, c] (x [T, D]) for every entry to 0, or, when
// means is non-nil, to means[c]: the intervention of Sun et al. (zero) and
// its mean-ablation control.
func ReplaceEntries(x []float32, D int, entries []Activation, means []float64) {
	for _, a := range entries {
		v := float32(0)
		if means != nil {
			v = float32(means[a.Channel])
		}
		x[a.Position*D+a.Channel] = v
	}
}
