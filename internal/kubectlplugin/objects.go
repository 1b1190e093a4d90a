package kubectlplugin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// readObjectFile reads the Nodes and Pods of a YAML or JSON file: documents
// separated by ---, each an object or a List of objects (what `kubectl get
// -o yaml` writes). Objects of other kinds are skipped; a Node or Pod that
// does not decode is an error naming the file, the document and the object.
func readObjectFile(file string) ([]*v1.Node, []*v1.Pod, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	var nodes []*v1.Node
	var pods []*v1.Pod
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for doc := 1; ; doc++ {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("%s: document %d: %w", file, doc, err)
		}
		if obj == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		items := []unstructured.Unstructured{*u}
		if u.IsList() {
			list, err := u.ToList()
			if err != nil {
				return nil, nil, fmt.Errorf("%s: document %d: %w", file, doc, err)
			}
			items = list.Items
		}
		for i := range items {
			item := &items[i]
			var target any
			switch item.GetKind() {
			case "Node":
				n := &v1.Node{}
				nodes, target = append(nodes, n), n
			case "Pod":
				p := &v1.Pod{}
				pods, target = append(pods, p), p
			default:
				continue
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, target); err != nil {
				return nil, nil, fmt.Errorf("%s: document %d: %s %q: %w", file, doc, item.GetKind(), item.GetName(), err)
			}
		}
	}
	for _, p := range pods {
		if p.Namespace == "" {
			p.Namespace = "default"
		}
	}
	return nodes, pods, nil
}
