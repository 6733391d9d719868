// Package atomicfile is the module's one way to write a file that a reader
// never sees partial: tables, pass files, manifests, checkpoints, cached
// assets and rows. A crash leaves at most a ".<name>.tmp-*" file beside
// the target, which nothing reads.
package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write writes path through a temporary file ".<name>.tmp-*" in the same
// folder: write fills it through a 1 MiB buffer, which is flushed; the
// file is made 0644, fsynced, closed and renamed over path, and the folder
// synced so that the rename is durable (where the file system can). On an
// error the temporary file is removed and path is as it was; the error
// names path.
func Write(path string, write func(w io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err = write(bw); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("%s: fsync: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		d.Sync() // make the rename durable; not every file system supports it
		d.Close()
	}
	return nil
}

// WriteBytes is Write of data.
func WriteBytes(path string, data []byte) error {
	return Write(path, func(w io.Writer) error { _, err := w.Write(data); return err })
}
