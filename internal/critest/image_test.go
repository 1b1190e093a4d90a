package critest

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"testing"
)

// TestOCIArchive checks the image layout tarball ImportImage hands to ctr:
// every blob is stored under its digest and the index names the image.
func TestOCIArchive(t *testing.T) {
	const ref = "critest.local/gpusched/img:test"
	b, err := ociArchive(ref, []imageFile{{path: "/pause", mode: 0o755, data: []byte("binary")}},
		[]string{DefaultPath, "NVIDIA_VISIBLE_DEVICES=all"}, []string{"/pause"})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = data
	}
	blob := func(d ociDescriptor) []byte {
		t.Helper()
		data, ok := files["blobs/sha256/"+d.Digest[len("sha256:"):]]
		if !ok || digestOf(data) != d.Digest || int64(len(data)) != d.Size {
			t.Fatalf("blob %s missing or wrong", d.Digest)
		}
		return data
	}
	var index struct{ Manifests []ociDescriptor }
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != ref {
		t.Fatalf("index = %+v", index)
	}
	var manifest struct {
		Config ociDescriptor
		Layers []ociDescriptor
	}
	if err := json.Unmarshal(blob(index.Manifests[0]), &manifest); err != nil {
		t.Fatal(err)
	}
	var config struct {
		Config struct{ Env, Entrypoint []string }
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		}
	}
	if err := json.Unmarshal(blob(manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Layers) != 1 || len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Fatalf("layers %+v, diff_ids %v", manifest.Layers, config.RootFS.DiffIDs)
	}
	if got := config.Config.Env; len(got) != 2 || got[1] != "NVIDIA_VISIBLE_DEVICES=all" {
		t.Fatalf("config env = %q", got)
	}
	lr := tar.NewReader(bytes.NewReader(blob(manifest.Layers[0])))
	var names []string
	for {
		h, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if len(names) != 1 || names[0] != "pause" {
		t.Fatalf("layer holds %q", names)
	}
}
