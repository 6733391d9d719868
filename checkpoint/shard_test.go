package checkpoint

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// goldenTensors reads every tensor of the golden model as float32.
func goldenTensors(t *testing.T) (names []string, infos map[string]Info, vals map[string][]float32) {
	t.Helper()
	c, err := OpenFile(filepath.Join(goldenDir(t, "qwen3_gate_headwise"), "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	infos, vals = map[string]Info{}, map[string][]float32{}
	for _, n := range c.Names() {
		infos[n], _ = c.Info(n)
		if vals[n], err = c.Float32(n); err != nil {
			t.Fatal(err)
		}
	}
	return c.Names(), infos, vals
}

// writeIndex writes a Hugging Face index file.
func writeIndex(t *testing.T, path string, weightMap map[string]string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 578688}, "weight_map": weightMap})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkSame compares a checkpoint against the golden tensors bit for bit.
func checkSame(t *testing.T, c *Checkpoint, names []string, vals map[string][]float32) {
	t.Helper()
	if !reflect.DeepEqual(c.Names(), names) {
		t.Fatalf("names %v", c.Names())
	}
	for _, n := range names {
		got, err := c.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(vals[n][i]) {
				t.Fatalf("%s[%d]: %v vs %v", n, i, got[i], vals[n][i])
			}
		}
	}
}

// TestShardedSafetensors splits the golden model into two shards.
func TestShardedSafetensors(t *testing.T) {
	names, infos, vals := goldenTensors(t)
	dir := t.TempDir()
	shards := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	wm := map[string]string{}
	var parts [2][]Tensor
	for i, n := range names {
		s := i * 2 / len(names)
		parts[s] = append(parts[s], Tensor{Name: n, Shape: infos[n].Shape, Data: vals[n]})
		wm[n] = shards[s]
	}
	for s := range shards {
		if err := WriteSafetensors(filepath.Join(dir, shards[s]), parts[s], map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	index := filepath.Join(dir, "model.safetensors.index.json")
	writeIndex(t, index, wm)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Format() != FormatSafetensorsSharded {
		t.Fatalf("format %s", c.Format())
	}
	want := []string{filepath.Join(dir, shards[0]), filepath.Join(dir, shards[1]), index}
	if !reflect.DeepEqual(c.Files(), want) {
		t.Fatalf("files %v, want %v", c.Files(), want)
	}
	if c.Metadata()["format"] != "pt" {
		t.Fatalf("metadata %v", c.Metadata())
	}
	checkSame(t, c, names, vals)
	if info, _ := c.Info(names[len(names)-1]); info.File != filepath.Join(dir, shards[1]) {
		t.Fatalf("info.File %s", info.File)
	}

	// Broken variants of the same directory.
	t.Run("missing shard", func(t *testing.T) {
		d := t.TempDir()
		os.Link(filepath.Join(dir, shards[0]), filepath.Join(d, shards[0]))
		writeIndex(t, filepath.Join(d, "model.safetensors.index.json"), wm)
		_, err := Open(d)
		wantErr(t, err, filepath.Join(d, "model.safetensors.index.json"), "missing shard model-00002-of-00002.safetensors")
	})
	t.Run("duplicate across shards", func(t *testing.T) {
		d := t.TempDir()
		dup := append([]Tensor{}, parts[1]...)
		dup = append(dup, parts[0][0])
		WriteSafetensors(filepath.Join(d, shards[0]), parts[0], nil)
		WriteSafetensors(filepath.Join(d, shards[1]), dup, nil)
		writeIndex(t, filepath.Join(d, "model.safetensors.index.json"), wm)
		_, err := Open(d)
		wantErr(t, err, "tensor \""+names[0]+"\" appears in two shards: "+shards[0]+" and "+shards[1])
	})
	t.Run("listed but absent", func(t *testing.T) {
		d := t.TempDir()
		WriteSafetensors(filepath.Join(d, shards[0]), parts[0][1:], nil)
		WriteSafetensors(filepath.Join(d, shards[1]), parts[1], nil)
		writeIndex(t, filepath.Join(d, "model.safetensors.index.json"), wm)
		_, err := Open(d)
		wantErr(t, err, "tensor \""+names[0]+"\": weight_map puts it in shard "+shards[0]+" but it is not there (found in no shard")
	})
	t.Run("path escape", func(t *testing.T) {
		d := t.TempDir()
		writeIndex(t, filepath.Join(d, "model.safetensors.index.json"), map[string]string{"w": "../" + shards[0]})
		_, err := Open(d)
		wantErr(t, err, `weight_map: tensor "w": shard "../model-00001-of-00002.safetensors" is not a plain file name`)
	})
	t.Run("bad index", func(t *testing.T) {
		d := t.TempDir()
		os.WriteFile(filepath.Join(d, "model.safetensors.index.json"), []byte(`{"weight_map": {"a": 1}}`), 0o644)
		_, err := Open(d)
		wantErr(t, err, "model.safetensors.index.json", `weight_map: tensor "a": shard is 1, not a string`)
		os.WriteFile(filepath.Join(d, "model.safetensors.index.json"), []byte(`{"metadata": {}}`), 0o644)
		_, err = Open(d)
		wantErr(t, err, "model.safetensors.index.json", `no "weight_map"`)
	})
	t.Run("wrong shard format", func(t *testing.T) {
		d := t.TempDir()
		gold := filepath.Join(goldenDir(t, "qwen3_gate_headwise"), "pytorch_model.bin")
		data, _ := os.ReadFile(gold)
		os.WriteFile(filepath.Join(d, "a.safetensors"), data, 0o644)
		writeIndex(t, filepath.Join(d, "model.safetensors.index.json"), map[string]string{names[0]: "a.safetensors"})
		_, err := Open(d)
		wantErr(t, err, "shard a.safetensors is a pytorch file, expected safetensors")
	})
}

// TestShardedPyTorch splits the golden pytorch_model.bin into two torch zip
// shards written by the test's own pickle and zip writers.
func TestShardedPyTorch(t *testing.T) {
	gold, err := OpenFile(filepath.Join(goldenDir(t, "qwen3_gate_headwise"), "pytorch_model.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer gold.Close()
	names, _, vals := goldenTensors(t)
	dir := t.TempDir()
	shards := []string{"pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"}
	wm := map[string]string{}
	var ts [2][]tt
	storages := [2]map[string][]byte{{}, {}}
	for i, n := range names {
		s := i * 2 / len(names)
		info, _ := gold.Info(n)
		raw, err := gold.Bytes(n)
		if err != nil {
			t.Fatal(err)
		}
		shape := make([]int64, len(info.Shape))
		for j, d := range info.Shape {
			shape[j] = int64(d)
		}
		key := itoa(int64(i))
		ts[s] = append(ts[s], tt{name: n, key: key, class: "FloatStorage", numel: int64(len(raw) / 4), shape: shape, stride: contiguous(shape...)})
		storages[s][key] = raw
		wm[n] = shards[s]
	}
	for s := range shards {
		writeZip(t, filepath.Join(dir, shards[s]), torchEntries(shards[s][:len(shards[s])-4], statePickle(ts[s]), storages[s]))
	}
	writeIndex(t, filepath.Join(dir, "pytorch_model.bin.index.json"), wm)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Format() != FormatPyTorchSharded || len(c.Files()) != 3 {
		t.Fatalf("format %s files %v", c.Format(), c.Files())
	}
	checkSame(t, c, names, vals)

	t.Run("missing shard", func(t *testing.T) {
		os.Remove(filepath.Join(dir, shards[1]))
		_, err := Open(dir)
		wantErr(t, err, "pytorch_model.bin.index.json", "missing shard "+shards[1])
	})
}
