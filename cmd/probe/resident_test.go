package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/filterlens/probe/checkpoint"
)

// TestResidentTensors: of a memory-mapped file of two 16 MiB BF16 tensors,
// a fused expert tensor [4, 2048, 2048] (8 MiB an expert) and two
// experts stored one by one (one group of two items), after
// reading all of "read" and the middle MiB of expert 2 only,
// residentTensors finds "read" wholly resident, one expert touched of
// four and "unread" untouched but for the kernel's fault-around: a fault
// maps the page-cache folio around the page (up to 2 MiB with large
// folios), so up to 2 MiB past either end of what was read.
func TestResidentTensors(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/self/pagemap is Linux's")
	}
	dir := t.TempDir()
	const n = 8 << 20 // BF16 values of each tensor
	hdr := map[string]any{
		"read":                          map[string]any{"dtype": "BF16", "shape": []int{4096, 2048}, "data_offsets": []int{0, 2 * n}},
		"unread":                        map[string]any{"dtype": "BF16", "shape": []int{4096, 2048}, "data_offsets": []int{2 * n, 4 * n}},
		"model.layers.0.mlp.experts.up": map[string]any{"dtype": "BF16", "shape": []int{4, 2048, 2048}, "data_offsets": []int{4 * n, 8 * n}},
		// experts stored one by one: one group, an item each
		"model.layers.1.mlp.experts.0.up.weight": map[string]any{"dtype": "BF16", "shape": []int{2048, 2048}, "data_offsets": []int{8 * n, 9 * n}},
		"model.layers.1.mlp.experts.1.up.weight": map[string]any{"dtype": "BF16", "shape": []int{2048, 2048}, "data_offsets": []int{9 * n, 10 * n}},
	}
	h, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 { // the data 8-aligned, as safetensors writers pad
		h = append(h, ' ')
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	binary.Write(f, binary.LittleEndian, uint64(len(h)))
	f.Write(h)
	f.Write(make([]byte, 10*n))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var sum uint16
	read, err := ck.Uint16View("read")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range read {
		sum += v
	}
	up, err := ck.Uint16View("model.layers.0.mlp.experts.up")
	if err != nil {
		t.Fatal(err)
	}
	e := len(up) / 4
	for _, v := range up[2*e+e/2-e/16 : 2*e+e/2+e/16] { // the middle MiB of expert 2
		sum += v
	}
	if _, err := ck.Uint16View("unread"); err != nil {
		t.Fatal(err)
	}
	got, err := residentTensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		items, touched int
		mapped, lo, hi float64 // MiB
	}{
		"read":                                   {1, 1, 16, 16, 16},
		"unread":                                 {1, 1, 16, 0, 2}, // fault-around of the pages after "read"
		"model.layers.0.mlp.experts.up":          {4, 1, 32, 1, 5}, // the MiB read, and fault-around
		"model.layers.1.mlp.experts.*.up.weight": {2, 0, 16, 0, 2}, // unread but for fault-around
	}
	if len(got) != len(want) {
		t.Fatalf("got %d groups %+v, want %d", len(got), got, len(want))
	}
	for _, g := range got {
		w, ok := want[g.Group]
		if !ok {
			t.Fatalf("group %q not expected (%+v)", g.Group, got)
		}
		if g.MappedMiB != w.mapped || g.Items != w.items || g.ResidentMiB < w.lo || g.ResidentMiB > w.hi {
			t.Errorf("%s: mapped %.3f MiB, resident %.3f MiB, %d items; want 16 MiB, resident in [%g, %g], %d items", g.Group,
				g.MappedMiB, g.ResidentMiB, g.Items, w.lo, w.hi, w.items)
		}
		if g.Group == "model.layers.0.mlp.experts.up" && g.Touched != w.touched {
			t.Errorf("%s: %d experts touched, want %d (of 4; only expert 2 was read)", g.Group, g.Touched, w.touched)
		}
	}
	if sum != 0 { // the reads used, so that the compiler keeps them
		t.Fatalf("the file's zeros read as %d", sum)
	}
}
