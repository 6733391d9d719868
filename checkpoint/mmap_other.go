//go:build !unix

package checkpoint

import (
	"errors"
	"os"
)

// canMap reports whether mapFile maps files on this platform.
const canMap = false

// mapFile does not map on this platform: tensors are read from the open
// file into memory.
func mapFile(f *os.File, size int64) ([]byte, error) {
	return nil, errors.New("memory mapping is not supported on this platform")
}

func unmap(data []byte) error { return nil }

func dropPages(data []byte) {}
