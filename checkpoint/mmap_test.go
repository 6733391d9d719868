package checkpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// mapsOf counts the mappings of path in /proc/self/maps, skipping the test
// where there is no such file or files are not mapped.
func mapsOf(t *testing.T, path string) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	return strings.Count(string(maps), path+"\n")
}

// TestMappedViews: an F32 tensor of a mapped file is a view of the
// mapping, not a heap copy; writes to it stay in this process (the file
// and another Checkpoint of it are unchanged); it stays valid after Close,
// and Close unmaps a file none of whose tensors was viewed.
func TestMappedViews(t *testing.T) {
	if !canMap {
		t.Skip("files are not mapped on this platform")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "w.safetensors")
	const n = 1 << 22 // 16 MiB of float32
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(i%1000) - 0.5
	}
	if err := WriteSafetensors(path, []Tensor{ // w first, at offset 0: aligned
		{Name: "w", Shape: []int{n}, Data: w},
		{Name: "x", Shape: []int{3}, Data: BFloat16{0x3f80, 0xc000, 0x4040}},
	}, nil); err != nil {
		t.Fatal(err)
	}
	path, _ = filepath.Abs(path)
	if mapsOf(t, path) != 0 {
		t.Fatal("mapped before Open")
	}
	c, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v, err := c.Float32("w")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("Float32 of a mapped 16 MiB tensor allocated %d bytes, want a view", alloc)
	}
	if v2, _ := c.Float32("w"); unsafe.SliceData(v2) != unsafe.SliceData(v) {
		t.Error("two Float32 calls of a mapped tensor gave different memory")
	}
	if h, err := c.Float32("x"); err != nil || h[0] != 1 || h[1] != -2 || h[2] != 3 {
		t.Errorf("BF16 tensor of a mapped file = %v, %v", h, err)
	}
	v[0], v[n-1] = 42, 43 // copy-on-write: private to this process
	if mapsOf(t, path) != 1 {
		t.Fatalf("%d mappings of %s, want 1", mapsOf(t, path), path)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if mapsOf(t, path) != 1 {
		t.Error("a file whose tensor was viewed was unmapped by Close")
	}
	for i := 1; i < n-1; i++ { // the view outlives Close
		if v[i] != w[i] {
			t.Fatalf("view[%d] = %v after Close, want %v", i, v[i], w[i])
		}
	}
	if v[0] != 42 || v[n-1] != 43 {
		t.Fatalf("writes to the view were lost: %v, %v", v[0], v[n-1])
	}

	// The file and a second Checkpoint of it do not see the writes.
	c2, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if mapsOf(t, path) != 2 {
		t.Errorf("%d mappings with a second Checkpoint open, want 2", mapsOf(t, path))
	}
	raw, err := c2.Bytes("w")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := c2.Float32("w")
	c2.Close()
	if !bytes.Equal(raw[:4], []byte{0, 0, 0, 0xbf}) { // -0.5
		t.Errorf("the file's first value is % x after writing to another process's view, want -0.5", raw[:4])
	}
	if want[0] != -0.5 || want[n-1] != w[n-1] {
		t.Errorf("a second Checkpoint sees %v, %v; want the file's %v, %v", want[0], want[n-1], w[0], w[n-1])
	}

	// A Checkpoint whose tensors were only copied is unmapped by Close.
	c3, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c3.Bytes("w"); err != nil {
		t.Fatal(err)
	}
	if _, err := c3.Float64("w"); err != nil {
		t.Fatal(err)
	}
	mapped := mapsOf(t, path)
	c3.Close()
	if got := mapsOf(t, path); got != mapped-1 {
		t.Errorf("%d mappings after closing a Checkpoint with no views, want %d", got, mapped-1)
	}
	if _, err := c3.Float32("w"); err == nil || !strings.Contains(err.Error(), "checkpoint is closed") {
		t.Errorf("read after Close: %v", err)
	}
}

// TestMappedMisaligned: an F32 tensor at an offset that is not a multiple
// of 4 is copied, with the same values.
func TestMappedMisaligned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := WriteSafetensors(path, []Tensor{
		{Name: "a", Shape: []int{1}, Data: []uint8{7}},
		{Name: "b", Shape: []int{3}, Data: []float32{1.5, -2, 1e-30}}, // at byte 1 of the data
	}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := c.Float32("b")
	if err != nil || b[0] != 1.5 || b[1] != -2 || b[2] != 1e-30 {
		t.Fatalf("misaligned F32 = %v, %v", b, err)
	}
	if a, err := c.Int64("a"); err != nil || a[0] != 7 {
		t.Fatalf("U8 = %v, %v", a, err)
	}
}
