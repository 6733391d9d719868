//go:build unix

package checkpoint

import (
	"errors"
	"math"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// canMap reports whether mapFile maps files on this platform.
const canMap = true

// mapFile maps the whole of f (size bytes) private and copy-on-write,
// readable and writable: writes copy pages in this process only.
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size <= 0 || uint64(size) > math.MaxInt {
		return nil, errors.New("cannot map this size")
	}
	return unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
}

func unmap(data []byte) error { return unix.Munmap(data) }

// dropPages takes the whole pages inside data (part of a mapping) out of
// this process's resident set; the page cache keeps them.
func dropPages(data []byte) {
	if len(data) == 0 {
		return
	}
	ps := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	lo := int((ps - start%ps) % ps)                      // to the first page boundary
	hi := len(data) - int((start+uintptr(len(data)))%ps) // the last page boundary
	if hi <= lo {
		return
	}
	// MADV_DONTNEED on a private file mapping drops the page table
	// entries; the next read maps the file's pages again. (It would also
	// drop this process's writes to them, which Releaser's contract rules
	// out.)
	_ = unix.Madvise(data[lo:hi], unix.MADV_DONTNEED)
}
