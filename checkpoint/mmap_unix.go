//go:build unix

package checkpoint

import (
	"errors"
	"math"
	"os"

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
