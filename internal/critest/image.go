package critest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"runtime"
	"time"
)

// imageFile is one regular file of the image's single layer.
type imageFile struct {
	path string // absolute path in the image, e.g. "/pause"
	mode int64
	data []byte
}

// ociDescriptor is an OCI content descriptor.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// layerTar returns an uncompressed tar layer holding files (and their
// parent directories).
func layerTar(files []imageFile) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	for _, f := range files {
		rel := filepath.Clean(f.path)[1:]
		for d := filepath.Dir(rel); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: f.mode, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ociArchive builds an OCI image layout tarball (what `ctr images import`
// reads) of a one-layer linux image named ref whose config has env and the
// entrypoint.
func ociArchive(ref string, files []imageFile, env, entrypoint []string) ([]byte, error) {
	layer, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	layerDigest := digestOf(layer)
	config, err := json.Marshal(map[string]any{
		"created":      "1970-01-01T00:00:00Z",
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Env":        env,
			"Entrypoint": entrypoint,
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return nil, err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        ociDescriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digestOf(config), Size: int64(len(config))},
		"layers":        []ociDescriptor{{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: layerDigest, Size: int64(len(layer))}},
	})
	if err != nil {
		return nil, err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []ociDescriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json",
			Digest:    digestOf(manifest),
			Size:      int64(len(manifest)),
			Annotations: map[string]string{
				"io.containerd.image.name":          ref,
				"org.opencontainers.image.ref.name": ref,
			},
			Platform: map[string]string{"architecture": runtime.GOARCH, "os": "linux"},
		}},
	})
	if err != nil {
		return nil, err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
	}
	blob := func(b []byte) string { return "blobs/sha256/" + digestOf(b)[len("sha256:"):] }
	for _, e := range []struct {
		name string
		b    []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blob(manifest), manifest},
		{blob(config), config},
		{blob(layer), layer},
	} {
		if err := add(e.name, e.b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
