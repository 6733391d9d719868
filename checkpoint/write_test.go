package checkpoint

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// TestParseSize: max_shard_size spellings as transformers reads them.
func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"12345", 12345},
		{"500MB", 500e6},
		{"2GB", 2e9},
		{"2gB", 2e9},
		{"2gb", 2.5e8}, // gigabits, as transformers reads a final lowercase b
		{"5GiB", 5 << 30},
		{"5gib", 5 << 30},
		{"1MiB", 1 << 20},
		{"10KiB", 10 << 10},
		{"3KB", 3000},
		{"1TB", 1e12},
		{"1.5GB", 1.5e9},
		{"8Gb", 1e9}, // a lowercase b: gigabits
		{"8kb", 1000},
	} {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "0", "-5", "GB", "5XB", "5B", "-1GB", "0MB", "1e30GB", "five"} {
		if n, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", bad, n)
		}
	}
}

// TestWriteShardedSplit: tensors are split as huggingface_hub's
// split_state_dict_into_shards splits them (its own example: byte sizes
// 6, 10, 30, 2, 2 under a 10-byte limit give shards {1}, {3}, {2}, {4, 5}),
// and the checkpoint opens with every tensor intact.
func TestWriteShardedSplit(t *testing.T) {
	dir := t.TempDir()
	var tensors []Tensor
	for i, n := range []int{6, 10, 30, 2, 2} {
		data := make([]uint8, n)
		for j := range data {
			data[j] = uint8(10*i + j)
		}
		tensors = append(tensors, Tensor{Name: "layer_" + string(rune('1'+i)), Shape: []int{n}, Data: data})
	}
	files, err := WriteSharded(dir, tensors, 10, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
		"model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors", ShardIndexName}
	if !slices.Equal(files, wantFiles) {
		t.Fatalf("wrote %v, want %v", files, wantFiles)
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wantShard := map[string]string{"layer_1": "00001", "layer_3": "00002", "layer_2": "00003", "layer_4": "00004", "layer_5": "00004"}
	for _, tn := range tensors {
		info, _ := c.Info(tn.Name)
		if want := filepath.Join(dir, "model-"+wantShard[tn.Name]+"-of-00004.safetensors"); info.File != want {
			t.Errorf("%s is in %s, want %s", tn.Name, info.File, want)
		}
		got, err := c.Bytes(tn.Name)
		if err != nil || !slices.Equal(got, tn.Data.([]uint8)) {
			t.Errorf("%s = %v, %v; want %v", tn.Name, got, err, tn.Data)
		}
	}
	raw, _ := os.ReadFile(filepath.Join(dir, ShardIndexName))
	want := `{
  "metadata": {
    "total_parameters": 50,
    "total_size": 50
  },
  "weight_map": {
    "layer_1": "model-00001-of-00004.safetensors",
    "layer_2": "model-00003-of-00004.safetensors",
    "layer_3": "model-00002-of-00004.safetensors",
    "layer_4": "model-00004-of-00004.safetensors",
    "layer_5": "model-00004-of-00004.safetensors"
  }
}
`
	if string(raw) != want {
		t.Errorf("index:\n%s\nwant\n%s", raw, want)
	}

	// Everything in one shard: model.safetensors and no index.
	one := t.TempDir()
	if files, err := WriteSharded(one, tensors, 50, nil); err != nil || !slices.Equal(files, []string{"model.safetensors"}) {
		t.Fatalf("one shard: %v, %v", files, err)
	}
	if _, err := os.Stat(filepath.Join(one, ShardIndexName)); err == nil {
		t.Error("one shard wrote an index")
	}
	if _, err := WriteSharded(one, tensors, 0, nil); err == nil {
		t.Error("shard size 0 accepted")
	}
}

// TestWriteHalfPrecision: BF16 and F16 data are stored with their dtypes
// and read back exactly as the rounded values; Convert rounds to nearest
// even (ties to the even neighbour, NaN stays NaN, overflow to Inf in F16).
func TestWriteHalfPrecision(t *testing.T) {
	x := []float32{1, -2.5, 1 + 1.0/256, 1 + 3.0/256, 3.14159, 1e-3, 70000, float32(math.Inf(-1)), float32(math.NaN())}
	// bf16 keeps 8 significant bits: 1+2^-8 is a tie, rounded to the even
	// 1; 1+3·2^-8 a tie rounded up to 1+2^-6.
	wantBF16 := []float32{1, -2.5, 1, 1 + 4.0/256, 3.140625, 0.0009994507, 70144, float32(math.Inf(-1)), float32(math.NaN())}
	wantF16 := []float32{1, -2.5, 1 + 1.0/256, 1 + 3.0/256, 3.140625, 0.0010004044, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	dir := t.TempDir()
	for _, c := range []struct {
		dtype string
		want  []float32
	}{{"BF16", wantBF16}, {"F16", wantF16}} {
		data, err := Convert(x, c.dtype)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, c.dtype+".safetensors")
		if err := WriteSafetensors(path, []Tensor{{Name: "x", Shape: []int{len(x)}, Data: data}}, nil); err != nil {
			t.Fatal(err)
		}
		ck, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := ck.Info("x")
		got, err := ck.Float32("x")
		ck.Close()
		if err != nil || info.DType != c.dtype {
			t.Fatalf("%s: dtype %s, %v", c.dtype, info.DType, err)
		}
		for i := range got {
			if got[i] != c.want[i] && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(c.want[i]))) {
				t.Errorf("%s: %v stored as %v, want %v", c.dtype, x[i], got[i], c.want[i])
			}
		}
	}
	if d, err := Convert(x, "F32"); err != nil || !reflect.DeepEqual(d, x) {
		t.Errorf("Convert to F32 = %v, %v; want the data as is", d, err)
	}
	if _, err := Convert(x, "I8"); err == nil {
		t.Error("Convert to I8 accepted")
	}
}
