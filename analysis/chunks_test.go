package analysis

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
)

func TestParseLengths(t *testing.T) {
	for _, c := range []struct {
		in   string
		unit int
		want []int
	}{
		{"1k,2k,4k,6k,8k,10k", 1000, []int{1000, 2000, 4000, 6000, 8000, 10000}},
		{"1k,2k,4k,6k,8k,10k", 1024, []int{1024, 2048, 4096, 6144, 8192, 10240}},
		{"4k, 512 ,1.5k", 1024, []int{512, 1536, 4096}},
		{"0.25K,16k", 1024, []int{256, 16384}},
		{"37", 1000, []int{37}},
	} {
		got, err := ParseLengths(c.in, c.unit)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseLengths(%q, %d) = %v, %v; want %v", c.in, c.unit, got, err, c.want)
		}
	}
	for _, c := range []struct {
		in   string
		unit int
		msg  string
	}{
		{"1k,2k,1000", 1000, `duplicate length: "1k" and "1000" are both 1000 tokens`},
		{"2k,2k", 1024, "duplicate length"},
		{"1k", 1023, "k must be 1000 or 1024"},
		{"1.3k", 1024, "not a whole number"},
		{"1x", 1000, "not a number"},
		{"1k,,2k", 1000, "empty item"},
		{"0", 1000, "at least 1 token"},
		{"-1k", 1000, "at least 1 token"},
		{"", 1000, "no lengths"},
	} {
		_, err := ParseLengths(c.in, c.unit)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseLengths(%q, %d): error %v, want one containing %q", c.in, c.unit, err, c.msg)
		}
	}
	if formatLength(4096, 1024) != "4k" || formatLength(4000, 1024) != "4000" || formatLength(500, 1000) != "500" {
		t.Error("FormatLength")
	}
}

// checkDisjoint fails when two chunks of the plan overlap (within a length
// only when within is set).
func checkDisjoint(t *testing.T, chunks []results.Chunk, within bool) {
	t.Helper()
	for i, a := range chunks {
		for _, b := range chunks[i+1:] {
			if within && a.T != b.T {
				continue
			}
			if a.Start < b.End && b.Start < a.End {
				t.Errorf("chunks %+v and %+v overlap", a, b)
			}
		}
	}
}

func TestPlanChunks(t *testing.T) {
	o := ChunkOptions{Lengths: []int{10, 20}, Samples: 3}
	got, err := PlanChunks(100, o)
	if err != nil {
		t.Fatal(err)
	}
	want := []results.Chunk{{T: 10, Sample: 0, Start: 0, End: 10}, {T: 10, Sample: 1, Start: 10, End: 20}, {T: 10, Sample: 2, Start: 20, End: 30}, {T: 20, Sample: 0, Start: 30, End: 50}, {T: 20, Sample: 1, Start: 50, End: 70}, {T: 20, Sample: 2, Start: 70, End: 90}}
	if !slices.Equal(got, want) {
		t.Errorf("sequential, disjoint across lengths:\n got %v\nwant %v", got, want)
	}

	o.Disjoint, o.Offset = DisjointWithin, 5
	got, _ = PlanChunks(100, o)
	want = []results.Chunk{{T: 10, Sample: 0, Start: 5, End: 15}, {T: 10, Sample: 1, Start: 15, End: 25}, {T: 10, Sample: 2, Start: 25, End: 35}, {T: 20, Sample: 0, Start: 5, End: 25}, {T: 20, Sample: 1, Start: 25, End: 45}, {T: 20, Sample: 2, Start: 45, End: 65}}
	if !slices.Equal(got, want) {
		t.Errorf("within a length, offset 5:\n got %v\nwant %v", got, want)
	}

	// A prepended BOS counts in T: chunks hold T − 1 stream tokens.
	got, _ = PlanChunks(100, ChunkOptions{Lengths: []int{10}, Samples: 2, BOS: true})
	if want := []results.Chunk{{T: 10, Sample: 0, Start: 0, End: 9}, {T: 10, Sample: 1, Start: 9, End: 18}}; !slices.Equal(got, want) {
		t.Errorf("BOS: got %v, want %v", got, want)
	}

	// Shuffled layouts: deterministic per seed, still disjoint, and
	// different from the sequential one.
	for _, d := range []string{DisjointAll, DisjointWithin} {
		o := ChunkOptions{Lengths: []int{7, 11, 13}, Samples: 4, Disjoint: d, Placement: PlaceShuffled, Seed: 9}
		a, err := PlanChunks(400, o)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := PlanChunks(400, o)
		o.Placement = PlaceSequential
		seq, _ := PlanChunks(400, o)
		if !slices.Equal(a, b) || slices.Equal(a, seq) {
			t.Errorf("%s shuffled: not deterministic or equal to sequential: %v", d, a)
		}
		checkDisjoint(t, a, d == DisjointWithin)
		for _, c := range a {
			if c.End-c.Start != c.T || c.Start < 0 || c.End > 400 {
				t.Errorf("%s: bad chunk %+v", d, c)
			}
		}
	}
}

func TestPlanChunksTooShort(t *testing.T) {
	o := ChunkOptions{Lengths: []int{1000, 2000}, Samples: 5}
	_, err := PlanChunks(12000, o)
	want := "the token stream has 12000 tokens (12000 from offset 0) but the sweep needs 15000 (chunks disjoint across all lengths: 5×1000 + 5×2000)"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--disjoint within") {
		t.Errorf("error %v\nwant one containing %q", err, want)
	}
	o.Disjoint = DisjointWithin
	if _, err := PlanChunks(12000, o); err != nil {
		t.Errorf("within a length 10000 tokens suffice: %v", err)
	}
	_, err = PlanChunks(9999, o)
	if err == nil || !strings.Contains(err.Error(), "needs 10000 (chunks disjoint within each length: max(5×1000, 5×2000))") {
		t.Errorf("within: %v", err)
	}
	for _, c := range []struct {
		o   ChunkOptions
		msg string
	}{
		{ChunkOptions{Lengths: []int{10}, Samples: 0}, "samples = 0"},
		{ChunkOptions{Lengths: []int{10}, Samples: 1, Disjoint: "some"}, `disjoint "some"`},
		{ChunkOptions{Lengths: []int{10}, Samples: 1, Placement: "random"}, `placement "random"`},
		{ChunkOptions{Lengths: []int{20, 10}, Samples: 1}, "ascending"},
		{ChunkOptions{Lengths: []int{1}, Samples: 1, BOS: true}, "T ≥ 2"},
		{ChunkOptions{Lengths: []int{10}, Samples: 1, Offset: -1}, "negative"},
	} {
		if _, err := PlanChunks(100, c.o); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: error %v, want %q", c.o, err, c.msg)
		}
	}
}

func TestWindowsAndBuckets(t *testing.T) {
	for _, c := range []struct {
		T    int
		f    float64
		want int
	}{{1000, 0.25, 750}, {1024, 0.25, 768}, {1001, 0.25, 751}, {1001, 0.5, 501}, {1000, 0.5, 500}, {7, 1, 0}, {3, 0.25, 3}} {
		if got := windowStart(c.T, c.f); got != c.want {
			t.Errorf("WindowStart(%d, %v) = %d, want %d", c.T, c.f, got, c.want)
		}
	}
	got := bucketEdges(100, 30, windowStart(100, 0.25), windowStart(100, 0.5))
	if want := []int{0, 30, 50, 60, 75, 90, 100}; !slices.Equal(got, want) {
		t.Errorf("BucketEdges = %v, want %v", got, want)
	}
	if got := fmt.Sprint(bucketEdges(5, 1)); got != "[0 1 2 3 4 5]" {
		t.Errorf("bucket 1: %s", got)
	}
}
