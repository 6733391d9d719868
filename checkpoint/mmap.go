package checkpoint

import (
	"encoding/binary"
	"io"
	"os"
	"sync"
	"unsafe"
)

// Checkpoint files are memory-mapped where the platform allows it (see
// mapFile): a private, copy-on-write mapping of the whole file, read and
// write. Float32View then returns an F32 tensor as a []float32 view of the
// mapping instead of a copy on the Go heap: the pages are the page cache's,
// shared with every process that maps the same file (Slurm array tasks on
// one node), and read from disk when first touched. A write through a view
// copies just that page, privately; the file never changes.
//
// Lifetime: Close unmaps a file only if no view of it was handed out. A
// file with views stays mapped until the process exits, since the views
// (say, a loaded model's weights) outlive the Checkpoint: model.Load closes
// the checkpoint once the weights are loaded and runs on the views. What
// such a mapping costs after its model is gone is address space and, for a
// file deleted meanwhile, its disk blocks until exit; its clean pages are
// page cache the kernel reclaims like any other.
//
// A file must not be truncated or rewritten in place while it is mapped
// (replacing it by a rename, as WriteSafetensors and save_pretrained do, is
// safe): reading a view past the new end of the file raises SIGBUS.

// mapping is one open file and its bytes mapped by mapFile. Reads that copy
// (ReadAt: headers, and every tensor but an F32 or 16-bit view) go through the file
// descriptor, as without a mapping, so that the pages they touch stay in
// the page cache instead of counting in this process's resident set; only
// views (view) use the mapping.
type mapping struct {
	f      *os.File
	mu     sync.RWMutex
	data   []byte // nil after Close
	viewed bool   // a view was handed out: the mapping is never unmapped
}

// ReadAt reads from the file.
func (m *mapping) ReadAt(p []byte, off int64) (int, error) { return m.f.ReadAt(p, off) }

// view returns the n bytes at off of the mapping, marking it as viewed, or
// nil when they are out of range, not aligned to align bytes or the mapping
// is closed.
func (m *mapping) view(off, n, align int64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil || off < 0 || n <= 0 || off > int64(len(m.data))-n ||
		int64(uintptr(unsafe.Pointer(&m.data[off])))%align != 0 {
		return nil
	}
	m.viewed = true
	return m.data[off : off+n : off+n]
}

// Close closes the file and unmaps it unless a view of it was handed out.
func (m *mapping) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	err := m.f.Close()
	data := m.data
	m.data = nil
	if data != nil && !m.viewed {
		if uerr := unmap(data); err == nil {
			err = uerr
		}
	}
	return err
}

// littleEndian reports whether this machine stores float32 as the
// checkpoint files do (views need it).
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// float32View returns an F32 tensor's values as a view of its file's
// mapping, or nil where there is none: another dtype, a strided or empty
// tensor, a file that is not mapped, a misaligned offset, or a big-endian
// machine. Float32View copies in those cases.
func (t *tensor) float32View() []float32 {
	if t.info.DType != "F32" {
		return nil
	}
	b := t.mappedBytes()
	if b == nil {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), t.numel)
}

// uint16View returns a 2-byte tensor's (BF16, F16, I16) raw values as a
// view of its file's mapping, or nil where there is none (as float32View).
func (t *tensor) uint16View() []uint16 {
	if t.elemSize != 2 {
		return nil
	}
	b := t.mappedBytes()
	if b == nil {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), t.numel)
}

// mappedBytes returns the tensor's bytes as a view of its file's mapping,
// aligned to its element size, or nil: a strided or empty tensor, a file
// that is not mapped, a misaligned offset, or a big-endian machine.
func (t *tensor) mappedBytes() []byte {
	if t.stride != nil || t.numel == 0 || !littleEndian {
		return nil
	}
	s, ok := t.src.(sectionSource)
	if !ok {
		return nil
	}
	m, ok := s.r.(*mapping)
	if !ok {
		return nil
	}
	return m.view(s.base+t.elemSize*t.offset, t.elemSize*t.numel, t.elemSize)
}

// openMapped maps f (size bytes) with mapFile, or returns f itself where the
// file cannot be mapped (an empty file, a platform without mmap, a size
// beyond the address space): then every tensor is copied from the file.
func openMapped(f *os.File, size int64) io.ReaderAt {
	data, err := mapFile(f, size)
	if err != nil {
		return f
	}
	return &mapping{f: f, data: data}
}
