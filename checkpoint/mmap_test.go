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
	v, err := c.Float32View("w")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("Float32View of a mapped 16 MiB tensor allocated %d bytes, want a view", alloc)
	}
	if v2, _ := c.Float32View("w"); unsafe.SliceData(v2) != unsafe.SliceData(v) {
		t.Error("two Float32View calls of a mapped tensor gave different memory")
	}
	if cp, _ := c.Float32("w"); unsafe.SliceData(cp) == unsafe.SliceData(v) {
		t.Error("Float32 returned the view, want a copy")
	}
	if h, err := c.Float32View("x"); err != nil || h[0] != 1 || h[1] != -2 || h[2] != 3 {
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
	b, err := c.Float32View("b")
	if err != nil || b[0] != 1.5 || b[1] != -2 || b[2] != 1e-30 {
		t.Fatalf("misaligned F32 = %v, %v", b, err)
	}
	if a, err := c.Int64("a"); err != nil || a[0] != 7 {
		t.Fatalf("U8 = %v, %v", a, err)
	}
}

// TestMappedUint16View: a BF16 or F16 tensor of a mapped file is a view
// of the mapping (no copy; the same memory on every call; valid after
// Close), its raw bits as stored; one at an odd offset is copied, with the
// same bits; a tensor of another element size is refused by name.
func TestMappedUint16View(t *testing.T) {
	if !canMap {
		t.Skip("files are not mapped on this platform")
	}
	path := filepath.Join(t.TempDir(), "h.safetensors")
	const n = 1 << 21 // 4 MiB of bfloat16
	bf := make(BFloat16, n)
	for i := range bf {
		bf[i] = uint16(i*7919) ^ 0x3f00
	}
	if err := WriteSafetensors(path, []Tensor{ // in name order: a_bf at 0, b_f16 after it, d_odd after one byte
		{Name: "a_bf", Shape: []int{n}, Data: bf},
		{Name: "b_f16", Shape: []int{4}, Data: Float16{0x3c00, 0x8001, 0x7c00, 0x7e01}},
		{Name: "c_u", Shape: []int{1}, Data: []uint8{7}},
		{Name: "d_odd", Shape: []int{3}, Data: BFloat16{0x3f80, 0xffc1, 0x0001}},
		{Name: "e_w", Shape: []int{2}, Data: []float32{1, 2}},
	}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v, err := c.Uint16View("a_bf")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("Uint16View of a mapped 4 MiB tensor allocated %d bytes, want a view", alloc)
	}
	if v2, _ := c.Uint16View("a_bf"); unsafe.SliceData(v2) != unsafe.SliceData(v) {
		t.Error("two Uint16View calls of a mapped tensor gave different memory")
	}
	h, err := c.Uint16View("b_f16")
	if err != nil || len(h) != 4 || h[0] != 0x3c00 || h[1] != 0x8001 || h[2] != 0x7c00 || h[3] != 0x7e01 {
		t.Errorf("F16 bits = %#x, %v", h, err)
	}
	runtime.ReadMemStats(&before)
	odd, err := c.Uint16View("d_odd")
	runtime.ReadMemStats(&after)
	if after.TotalAlloc == before.TotalAlloc {
		t.Error("a BF16 tensor at an odd offset was not copied")
	}
	if err != nil || len(odd) != 3 || odd[0] != 0x3f80 || odd[1] != 0xffc1 || odd[2] != 0x0001 {
		t.Errorf("BF16 tensor at an odd offset = %#x, %v", odd, err)
	}
	if _, err := c.Uint16View("e_w"); err == nil || !strings.Contains(err.Error(), `tensor "e_w": dtype F32 is not a 2-byte type`) {
		t.Errorf("Uint16View of an F32 tensor: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range bf { // the view outlives Close
		if v[i] != bf[i] {
			t.Fatalf("view[%d] = %#x after Close, want %#x", i, v[i], bf[i])
		}
	}
	if _, err := c.Uint16View("a_bf"); err == nil || !strings.Contains(err.Error(), "checkpoint is closed") {
		t.Errorf("Uint16View after Close: %v", err)
	}
}

// vmRSS is this process's resident set in bytes (/proc/self/status).
func vmRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			var kb int64
			for _, c := range f[1] {
				kb = 10*kb + int64(c-'0')
			}
			return kb << 10
		}
	}
	t.Skip("no VmRSS in /proc/self/status")
	return 0
}

// TestReleaser: releasing a mapped tensor takes its pages out of the
// resident set, and the view still reads the file's values afterwards (and
// can be released again); a tensor that is not a view has no Releaser.
func TestReleaser(t *testing.T) {
	if !canMap {
		t.Skip("files are not mapped on this platform")
	}
	path := filepath.Join(t.TempDir(), "w.safetensors")
	const n = 1 << 24 // 32 MiB of bf16
	w := make(BFloat16, n)
	for i := range w {
		w[i] = uint16(i % 50000)
	}
	if err := WriteSafetensors(path, []Tensor{{Name: "w", Shape: []int{n}, Data: w}}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.Uint16View("w")
	if err != nil {
		t.Fatal(err)
	}
	release := c.Releaser("w")
	if release == nil {
		t.Fatal("Releaser of a mapped tensor is nil")
	}
	want := 0
	for i := 0; i < n; i += 1024 {
		want += int(w[i])
	}
	for round := range 2 {
		sum := 0
		for i := 0; i < n; i += 1024 { // one read per 2 KiB: every page
			sum += int(v[i])
		}
		if sum != want {
			t.Fatalf("round %d: sum of the view's values %d, want %d", round, sum, want)
		}
		touched := vmRSS(t)
		release()
		released := vmRSS(t)
		if touched-released < 3*n/2 { // 2n bytes were resident; allow for other allocations
			t.Errorf("round %d: the resident set fell by %d bytes on release, want about %d", round, touched-released, 2*n)
		}
		for i := 0; i < n; i += 997 {
			if v[i] != w[i] {
				t.Fatalf("round %d: after release v[%d] = %d, want %d", round, i, v[i], w[i])
			}
		}
	}
	if c.Releaser("absent") != nil {
		t.Error("Releaser of an absent tensor is not nil")
	}
}

// TestMappedUint8View: a U8 tensor of a mapped file (MXFP4 blocks and
// scales) is a view of the mapping, its bytes as stored; a tensor of
// another element size is refused by name.
func TestMappedUint8View(t *testing.T) {
	if !canMap {
		t.Skip("files are not mapped on this platform")
	}
	path := filepath.Join(t.TempDir(), "q.safetensors")
	const n = 1 << 21
	blocks := make([]uint8, n)
	for i := range blocks {
		blocks[i] = uint8(i * 131)
	}
	if err := WriteSafetensors(path, []Tensor{
		{Name: "a_blocks", Shape: []int{n / 16, 16}, Data: blocks},
		{Name: "b_w", Shape: []int{2}, Data: []float32{1, 2}},
	}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v, err := c.Uint8View("a_blocks")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<19 {
		t.Errorf("Uint8View of a mapped 2 MiB tensor allocated %d bytes, want a view", alloc)
	}
	if !bytes.Equal(v, blocks) || cap(v) != n {
		t.Errorf("Uint8View: %d bytes (cap %d), equal %v; want the %d stored", len(v), cap(v), bytes.Equal(v, blocks), n)
	}
	if _, err := c.Uint8View("b_w"); err == nil || !strings.Contains(err.Error(), `tensor "b_w": dtype F32 is not a 1-byte type`) {
		t.Errorf("Uint8View of an F32 tensor: %v", err)
	}
}
