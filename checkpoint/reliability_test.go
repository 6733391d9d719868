package checkpoint

import (
	"archive/zip"
	"bytes"
	"io"
	"sync/atomic"
	"testing"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// TestInflatedStorageReadOnce: a deflate-compressed storage is inflated
// once per tensor read, not once per chunk (which made a 1 MiB archive of
// a 1 GiB storage cost ~512 GiB of inflation).
func TestInflatedStorageReadOnce(t *testing.T) {
	const numel = 16 * chunkElems // 16 chunks of F32
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	pick := statePickle([]tt{{name: "w", key: "0", class: "FloatStorage", numel: numel, shape: []int64{numel}, stride: []int64{1}}})
	for _, e := range torchEntries("archive", pick, nil) {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
		w.Write(e.data)
	}
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "archive/data/0", Method: zip.Deflate})
	w.Write(make([]byte, numel*4))
	zw.Close()
	cr := &countingReader{r: bytes.NewReader(zbuf.Bytes())}
	c, err := openReader("bomb.bin", cr, int64(zbuf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	cr.n.Store(0)
	v, err := c.Float32("w")
	if err != nil || len(v) != numel {
		t.Fatalf("read %d values: %v", len(v), err)
	}
	t.Logf("archive %d bytes; reading the tensor read %d bytes of it", zbuf.Len(), cr.n.Load())
	if got := cr.n.Load(); got > 2*int64(zbuf.Len())+64<<10 {
		t.Fatalf("reading a %d-byte compressed storage read %d bytes of the archive", zbuf.Len(), got)
	}
}
