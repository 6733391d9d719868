package analysis

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/filterlens/probe/analysis/results"
)

// ParseLengths parses a comma-separated list of context lengths such as
// "1k,2k,4k,6k,8k,10k". A "k" suffix multiplies by unit, which must be 1000
// or 1024 (the paper's "1k" is either; notes §B.2, §F.1.6). Plain integers
// ("1500") and fractional multiples that land on an integer ("1.5k") are
// accepted. The lengths are returned in ascending order; duplicates (also
// after resolution, e.g. "2k,2000" with unit 1000) are an error naming both
// spellings.
func ParseLengths(s string, unit int) ([]int, error) {
	if unit != 1000 && unit != 1024 {
		return nil, fmt.Errorf("k must be 1000 or 1024, got %d", unit)
	}
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("no lengths given (e.g. 1k,2k,4k)")
	}
	seen := map[int]string{}
	var out []int
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("lengths %q: empty item", s)
		}
		num, mult := item, 1.0
		if strings.HasSuffix(item, "k") || strings.HasSuffix(item, "K") {
			num, mult = item[:len(item)-1], float64(unit)
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("length %q: not a number with an optional k suffix", item)
		}
		v := f * mult
		if v != math.Round(v) {
			return nil, fmt.Errorf("length %q is %v tokens with k = %d, not a whole number", item, v, unit)
		}
		if v < 1 || v > math.MaxInt32 {
			return nil, fmt.Errorf("length %q: want at least 1 token", item)
		}
		T := int(v)
		if prev, ok := seen[T]; ok {
			return nil, fmt.Errorf("duplicate length: %q and %q are both %d tokens (k = %d)", prev, item, T, unit)
		}
		seen[T] = item
		out = append(out, T)
	}
	slices.Sort(out)
	return out, nil
}

// formatLength writes T as the paper does where it is a whole number of
// units ("4k"), and as a plain integer otherwise.
func formatLength(T, unit int) string {
	if unit > 0 && T%unit == 0 {
		return strconv.Itoa(T/unit) + "k"
	}
	return strconv.Itoa(T)
}

// chunkName names the chunk in messages: "T=<T> sample <s>", after its pass.
func chunkName(c results.Chunk) string {
	if c.Pass != "" {
		return fmt.Sprintf("%s T=%d sample %d", c.Pass, c.T, c.Sample)
	}
	return fmt.Sprintf("T=%d sample %d", c.T, c.Sample)
}

// Chunk layouts (ChunkOptions.Disjoint).
const (
	// DisjointAll makes every chunk of every length disjoint from every
	// other (default): no token is seen by two passes, so the lengths are
	// independent samples of the text, at the price of Σ_T N·T tokens
	// (155k for the paper's sweep with k = 1000).
	DisjointAll = "all"
	// DisjointWithin makes chunks disjoint only among the samples of one
	// length; different lengths reuse the start of the stream, which needs
	// only max_T N·T tokens.
	DisjointWithin = "within"
)

// Chunk placements (ChunkOptions.Placement).
const (
	// PlaceSequential lays the chunks out back to back from Offset, lengths
	// ascending, samples in order (default: the paper's "first N
	// non-overlapping chunks" reading).
	PlaceSequential = "sequential"
	// PlaceShuffled draws the layout from Seed: with DisjointAll the order
	// of the (T, sample) chunks in the stream is a seeded permutation; with
	// DisjointWithin each length's samples are distinct slots of that
	// length drawn without replacement from all that fit.
	PlaceShuffled = "shuffled"
)

// ChunkOptions says how a token stream is cut into the passes of a sweep.
type ChunkOptions struct {
	Lengths   []int  // context lengths T, ascending, distinct
	Samples   int    // samples per length, ≥ 1
	Disjoint  string // DisjointAll (default when empty) or DisjointWithin
	Placement string // PlaceSequential (default when empty) or PlaceShuffled
	Seed      uint64 // for PlaceShuffled
	Offset    int    // stream tokens before Offset are not used
	BOS       bool   // a BOS token is prepended: it counts in T, the chunk holds T − 1 tokens
}

func (o *ChunkOptions) resolve() error {
	o.Disjoint = cmp.Or(o.Disjoint, DisjointAll)
	o.Placement = cmp.Or(o.Placement, PlaceSequential)
	switch {
	case o.Disjoint != DisjointAll && o.Disjoint != DisjointWithin:
		return fmt.Errorf("disjoint %q: want %q or %q", o.Disjoint, DisjointAll, DisjointWithin)
	case o.Placement != PlaceSequential && o.Placement != PlaceShuffled:
		return fmt.Errorf("placement %q: want %q or %q", o.Placement, PlaceSequential, PlaceShuffled)
	case o.Samples < 1:
		return fmt.Errorf("samples = %d: want at least 1", o.Samples)
	case len(o.Lengths) == 0:
		return fmt.Errorf("no lengths")
	case o.Offset < 0:
		return fmt.Errorf("offset %d is negative", o.Offset)
	}
	for i, T := range o.Lengths {
		if i > 0 && T <= o.Lengths[i-1] {
			return fmt.Errorf("lengths must be ascending and distinct, got %v", o.Lengths)
		}
		if o.BOS && T < 2 {
			return fmt.Errorf("length %d: with a prepended BOS token a pass needs T ≥ 2 (the BOS counts in T)", T)
		}
	}
	return nil
}

// textTokens is the number of stream tokens in a chunk of length T.
func (o *ChunkOptions) textTokens(T int) int {
	if o.BOS {
		return T - 1
	}
	return T
}

// Needed returns how many stream tokens (from Offset on) the layout needs.
func (o ChunkOptions) Needed() (int, error) {
	if err := o.resolve(); err != nil {
		return 0, err
	}
	need := 0
	for _, T := range o.Lengths {
		n := o.Samples * o.textTokens(T)
		if o.Disjoint == DisjointAll {
			need += n
		} else {
			need = max(need, n)
		}
	}
	return need, nil
}

// PlanChunks cuts a stream of streamLen tokens into the sweep's chunks,
// ordered by (T, sample). It fails when the stream is too short, saying how
// many tokens there are and how many the layout needs.
func PlanChunks(streamLen int, o ChunkOptions) ([]results.Chunk, error) {
	need, err := o.Needed()
	if err != nil {
		return nil, err
	}
	o.resolve()
	avail := streamLen - o.Offset
	if avail < need {
		var parts []string
		for _, T := range o.Lengths {
			parts = append(parts, fmt.Sprintf("%d×%d", o.Samples, o.textTokens(T)))
		}
		layout := "chunks disjoint across all lengths: " + strings.Join(parts, " + ")
		if o.Disjoint == DisjointWithin {
			layout = "chunks disjoint within each length: max(" + strings.Join(parts, ", ") + ")"
		}
		bos := ""
		if o.BOS {
			bos = "; each pass's prepended BOS token is not from the stream"
		}
		return nil, fmt.Errorf("the token stream has %d tokens (%d from offset %d) but the sweep needs %d (%s%s); use %s",
			streamLen, max(avail, 0), o.Offset, need, layout, bos, hint(o.Disjoint))
	}
	var chunks []results.Chunk
	if o.Disjoint == DisjointAll {
		for _, T := range o.Lengths {
			for s := 0; s < o.Samples; s++ {
				chunks = append(chunks, results.Chunk{T: T, Sample: s})
			}
		}
		order := make([]int, len(chunks))
		for i := range order {
			order[i] = i
		}
		if o.Placement == PlaceShuffled {
			rng := rand.New(rand.NewPCG(o.Seed, 0x63686e6b))
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		pos := o.Offset
		for _, i := range order {
			n := o.textTokens(chunks[i].T)
			chunks[i].Start, chunks[i].End = pos, pos+n
			pos += n
		}
		return chunks, nil
	}
	for _, T := range o.Lengths {
		n := o.textTokens(T)
		slots := make([]int, avail/n)
		for i := range slots {
			slots[i] = i
		}
		if o.Placement == PlaceShuffled {
			rng := rand.New(rand.NewPCG(o.Seed, uint64(T)))
			rng.Shuffle(len(slots), func(i, j int) { slots[i], slots[j] = slots[j], slots[i] })
		}
		for s := 0; s < o.Samples; s++ {
			start := o.Offset + slots[s]*n
			chunks = append(chunks, results.Chunk{T: T, Sample: s, Start: start, End: start + n})
		}
	}
	return chunks, nil
}

func hint(disjoint string) string {
	if disjoint == DisjointAll {
		return "fewer samples or lengths, a longer text, or --disjoint within, which needs only the largest N·T"
	}
	return "fewer samples or shorter lengths, or a longer text"
}
